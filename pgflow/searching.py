"""A parsed search (:class:`pgflow.search.Query`) as a ``WorkflowRun`` queryset: what the run
list's search box and ``manage.py pgflow --search`` list and act on. Reads only.

Each qualifier filters the run row or asks for an attempt of it (``EXISTS`` over
``pgflow_step``, reached by the run through ``pgflow_step_run``):

- ``status:``, ``since:``, ``class:`` (a dotted path) use ``pgflow_run_status_created``,
  ``pgflow_run_created``, ``pgflow_run_class_created``; ``parent:`` ``pgflow_run_parent``;
  ``class:`` (a name alone), ``key:`` exact (or a prefix) and ``step:`` read the run row.
- ``input.<path>:`` is a jsonb path of the run's input; ``output.<step>.<path>:`` of a
  completed attempt of that step; a comparison (``>100``) matches JSON numbers only (jsonb
  orders every boolean above every number, so without the type check ``true > 100``).
- ``error:`` an attempt with an error whose class or message holds the text (any case).
- ``attr.<name>:`` the run's attributes, on the GIN index ``pgflow_run_attributes``
  (jsonb_path_ops): a value is ``attributes @> {"name": value}``, a comparison the jsonpath
  ``attributes @@ '$."name" > 100'`` (false for a value that is not a number). Django's
  ``attributes__name=…`` would read the key of every row instead.
- a bare word, the run list's plain search: a run id, part of a key, or a subject id.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.db.models import BooleanField, CharField, Exists, F, Func, OuterRef, Q, QuerySet, Value
from django.db.models.fields.json import KeyTransform
from django.db.models.lookups import Exact
from django.utils import timezone

from .core.states import StepStatus
from .models import Step, WorkflowRun
from .search import MAX_RUN_ID, Query, SearchError, Term

LOOKUPS = {"=": "exact", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}
JSONPATH_OPS = {">": ">", ">=": ">=", "<": "<", "<=": "<="}


def runs_matching(
    query: Query, runs: QuerySet[WorkflowRun] | None = None, *, now: datetime | None = None
) -> QuerySet[WorkflowRun]:
    """``runs`` (every run by default) narrowed to those every term and word of ``query``
    matches."""
    found = WorkflowRun.objects.all() if runs is None else runs
    moment = timezone.now() if now is None else now
    for term in query.terms:
        found = found.filter(term_filter(term, now=moment))
    for word in query.words:
        found = found.filter(word_filter(word))
    return found


def word_filter(word: str) -> Q:
    """A bare word: the run list's plain search (a run id, part of a key, a subject id)."""
    match = Q(key__icontains=word) | Q(subject_id=word)
    number = word.removeprefix("#")
    if number.isdigit() and len(number) <= MAX_RUN_ID:
        match |= Q(pk=int(number))
    return match


def term_filter(term: Term, *, now: datetime) -> Q | Exists:
    name = term.qualifier
    if name == "status":
        return Q(status=term.value)
    if name == "since":
        return Q(created_at__gte=now - timedelta(seconds=float(term.value or 0)))
    if name == "class":
        value = str(term.value)
        if "." in value:  # a dotted path: exactly, on pgflow_run_class_created
            return Q(workflow_class=value)
        return Q(workflow_class__endswith=f".{value}") | Q(workflow_class=value)  # the class's name
    if name == "key":
        value = str(term.value)
        return Q(key__startswith=value[:-1]) if value.endswith("*") else Q(key=value)
    if name == "step":
        return Q(current_step=term.value)
    if name == "parent":
        return Q(parent_id=term.value)
    if name == "error":
        text = str(term.value)
        failed = Step.objects.filter(run=OuterRef("pk"), error_class__isnull=False).filter(
            Q(error_class__icontains=text) | Q(error_message__icontains=text)
        )
        return Exists(failed)
    if name == "input":
        return json_filter("input", term.path, term)
    if name == "output":
        step, *path = term.path
        completed = Step.objects.filter(run=OuterRef("pk"), step_name=step, status=StepStatus.COMPLETED).filter(
            json_filter("output", tuple(path), term)
        )
        return Exists(completed)
    if name == "attr":
        return attribute_filter(term.path[0], term)
    raise SearchError(f"{term.token!r}: no filter for the qualifier {name!r}", token=term.token)


def json_filter(column: str, path: tuple[str, ...], term: Term) -> Q:
    """The JSON value at ``path`` of ``column`` equals one of the term's values, or compares
    with its number; a comparison only matches a JSON number."""
    lookup = "__".join((column, *path))
    if term.op == "=":
        match = Q()
        for value in term.values:
            match |= Q(**{lookup: value})  # None: the key holds JSON null (Django's rule for key lookups)
        return match
    typed = Exact(Func(_key(column, path), function="jsonb_typeof", output_field=CharField()), Value("number"))
    return Q(typed) & Q(**{f"{lookup}__{LOOKUPS[term.op]}": term.value})


def _key(column: str, path: tuple[str, ...]) -> Any:
    expression: Any = F(column)
    for part in path:
        expression = KeyTransform(part, expression)
    return expression


def attribute_filter(name: str, term: Term) -> Q:
    """``attr.<name>:`` as operators the GIN index answers: ``@>`` for each value, ``@@`` for a comparison."""
    if term.op == "=":
        match = Q()
        for value in term.values:
            match |= Q(attributes__contains={name: value})
        return match
    # The name is letters, digits, _ . - (pgflow.core.attributes.KEY_PATTERN): safe in quotes.
    number = json.dumps(term.value)
    path = f'$."{name}" {JSONPATH_OPS[term.op]} {number}'
    return Q(
        Func(
            F("attributes"),
            Value(path),
            arg_joiner=" @@ ",
            template="(%(expressions)s::jsonpath)",
            output_field=BooleanField(),
        )
    )
