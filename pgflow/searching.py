"""A parsed search (:class:`pgflow.search.Query`) as a ``WorkflowRun`` queryset: what the run
list's search box and ``manage.py pgflow --search`` list and act on. Reads only.

Each qualifier is written so that an index answers it (benchmarks/search_runs.py times each
at 100,000 runs, with the plans; migration 0016 made the indexes the earlier ones lacked):

- ``status:``, ``since:``, ``class:`` (a dotted path) use ``pgflow_run_status_created``,
  ``pgflow_run_created``, ``pgflow_run_class_created``; ``parent:`` ``pgflow_run_parent``.
- ``class:<name>``: the dotted paths of the classes with that name, read from
  ``pgflow_run_class_created`` by a skip scan (one probe per class), then as a dotted path.
- ``key:``, exact or a prefix: ``pgflow_run_key``.
- ``step:``: the current step of a running, paused or cancelled run (a finished run has none):
  ``pgflow_run_status_created`` finds those runs, the step is checked on their rows. An index
  on ``current_step`` would be written on every step: each step changes it, so the run row's
  update could no longer be HOT and would write a new entry into every index of pgflow_run.
- ``input.<path>:<value>`` is ``input @> {…}`` on the GIN ``pgflow_run_input``;
  ``output.<step>.<path>:<value>`` a completed attempt of that step with ``output @> {…}``
  on the GIN ``pgflow_step_output``; ``attr.<name>:<value>`` ``attributes @> {…}`` on the
  GIN ``pgflow_run_attributes``; each is also checked exactly as a path (a digit in a path is
  an array position or a key, as Django's key lookups read it). A comparison (``>100``)
  matches JSON numbers only (jsonb orders every boolean above every number): no index orders
  the values of a JSON path, so :func:`pgflow.search.parse` bounds it by a ``since:`` window,
  read on ``pgflow_run_created``.
- ``error:`` an attempt with an error whose class or message holds the text (any case): the
  attempts with an error, on ``pgflow_step_error``, never every attempt.
- ``failed:<from>..<until>``: an attempt that failed then (its ``finished_at``), on
  ``pgflow_step_finished``: what an insights failures bar counts.
- a bare word, the run list's plain search: a run id, part of a key, or a subject id.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import CharField, Exists, F, Func, JSONField, OuterRef, Q, QuerySet, Value
from django.db.models.fields.json import KeyTransform
from django.db.models.lookups import Exact
from django.utils import timezone

from .core.states import StepStatus
from .models import Step, WorkflowRun
from .search import MAX_RUN_ID, Query, SearchError, Term

LOOKUPS = {"=": "exact", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}
STEP_STATUSES = ("running", "paused", "cancelled")  # the runs with a current step
MAX_ARRAY_POSITIONS = 3  # digits in a JSON path read as array positions or keys, for the index
# The distinct workflow classes, one index probe each (a skip scan of pgflow_run_class_created).
CLASSES_SQL = """
WITH RECURSIVE classes(name) AS (
    (SELECT workflow_class FROM pgflow_run ORDER BY workflow_class LIMIT 1)
    UNION ALL
    SELECT (SELECT workflow_class FROM pgflow_run WHERE workflow_class > classes.name ORDER BY workflow_class LIMIT 1)
    FROM classes WHERE classes.name IS NOT NULL
)
SELECT name FROM classes WHERE name = %s OR right(name, %s) = %s
"""


def runs_matching(
    query: Query, runs: QuerySet[WorkflowRun] | None = None, *, now: datetime | None = None
) -> QuerySet[WorkflowRun]:
    """``runs`` (every run by default) narrowed to those every term and word of ``query``
    matches."""
    found = WorkflowRun.objects.all() if runs is None else runs
    moment = timezone.now() if now is None else now
    windows = [float(term.value or 0) for term in query.terms if term.qualifier == "since"]
    if query.window is not None:  # a comparison, bounded (pgflow.search.COMPARISON_WINDOW)
        windows.append(query.window)
        found = found.filter(created_at__gte=moment - timedelta(seconds=query.window))
    # A run's attempts are created after it: a since: window bounds them too, so the attempt
    # qualifiers read the window's attempts (pgflow_step_created), not every attempt.
    attempts_since = moment - timedelta(seconds=min(windows)) if windows else None
    for term in query.terms:
        found = found.filter(term_filter(term, now=moment, using=found.db, attempts_since=attempts_since))
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


def term_filter(
    term: Term, *, now: datetime, using: str = "default", attempts_since: datetime | None = None
) -> Q | Exists:
    """``term`` as a filter of runs; ``using``: the database ``class:<name>`` reads the class
    names from; ``attempts_since``: no attempt of a matching run was created before it."""
    name = term.qualifier
    attempts = Step.objects.filter(run=OuterRef("pk"))
    if attempts_since is not None:
        attempts = attempts.filter(created_at__gte=attempts_since)
    if name == "status":
        return Q(status=term.value)
    if name == "since":
        return Q(created_at__gte=now - timedelta(seconds=float(term.value or 0)))
    if name == "class":
        value = str(term.value)
        if "." in value:  # a dotted path: exactly, on pgflow_run_class_created
            return Q(workflow_class=value)
        return Q(workflow_class__in=class_paths(value, using=using))  # the class's name
    if name == "key":
        value = str(term.value)
        return Q(key__startswith=value[:-1]) if value.endswith("*") else Q(key=value)
    if name == "step":
        return Q(current_step=term.value, status__in=STEP_STATUSES)
    if name == "parent":
        return Q(parent_id=term.value)
    if name == "error":
        text = str(term.value)
        failed = attempts.filter(error_class__isnull=False).filter(
            Q(error_class__icontains=text) | Q(error_message__icontains=text)
        )
        return Exists(failed)
    if name == "failed":
        start, end = (datetime.fromisoformat(str(value)) for value in term.values)
        return Exists(attempts.filter(status=StepStatus.FAILED, finished_at__gte=start, finished_at__lt=end))
    if name == "input":
        return json_filter("input", term.path, term)
    if name == "output":
        step, *path = term.path
        completed = attempts.filter(step_name=step, status=StepStatus.COMPLETED).filter(
            json_filter("output", tuple(path), term)
        )
        return Exists(completed)
    if name == "attr":
        return json_filter("attributes", term.path, term, flat=True)
    raise SearchError(f"{term.token!r}: no filter for the qualifier {name!r}", token=term.token)


def class_paths(name: str, *, using: str = "default") -> list[str]:
    """The dotted paths of the runs' classes named ``name`` (or that are ``name``)."""
    with connections[using].cursor() as cursor:
        cursor.execute(CLASSES_SQL, [name, len(name) + 1, f".{name}"])
        return [row[0] for row in cursor.fetchall()]


def json_filter(column: str, path: tuple[str, ...], term: Term, *, flat: bool = False) -> Q:
    """The JSON value at ``path`` of ``column`` equals one of the term's values, or compares
    with its number; a comparison only matches a JSON number. An equality is also written
    as containment (``column @> {…}``), which the column's GIN index answers; ``flat``: the
    path is one key, whatever its dots (attributes)."""
    key = _key(column, path)  # explicit transforms: a key may hold "__", which a lookup string splits
    if term.op == "=":
        exact, contained = Q(), Q()
        for value in term.values:
            if flat:
                exact |= Q(**{f"{column}__contains": {path[0]: value}})
                continue
            if "__" in "".join(path):  # Django would split the key: compare the jsonb itself
                exact |= Q(key.get_lookup("exact")(key, Value(value, output_field=JSONField())))
            else:
                exact |= Q(**{"__".join((column, *path)): value})  # None: JSON null (Django's rule)
            for document in _containing(path, value):
                contained |= Q(**{f"{column}__contains": document})
        return exact & contained
    typed = Exact(Func(key, function="jsonb_typeof", output_field=CharField()), Value("number"))
    number = Value(term.value, output_field=JSONField())  # a jsonb, as the key's value is
    return Q(typed) & Q(key.get_lookup(LOOKUPS[term.op])(key, number))


def _containing(path: tuple[str, ...], value: Any) -> list[Any]:
    """The documents one of which a JSON value holding ``value`` at ``path`` contains: one, or
    for each digit in the path (an array position or a key) both readings; none (no index
    then) past :data:`MAX_ARRAY_POSITIONS` digits."""
    digits = [i for i, part in enumerate(path) if part.isdigit()]
    if len(digits) > MAX_ARRAY_POSITIONS:
        return []
    found = []
    for readings in itertools.product((False, True), repeat=len(digits)):
        as_array = {i for i, reading in zip(digits, readings, strict=True) if reading}
        document: Any = value
        for i in reversed(range(len(path))):
            document = [document] if i in as_array else {path[i]: document}
        found.append(document)
    return found


def _key(column: str, path: tuple[str, ...]) -> Any:
    expression: Any = F(column)
    for part in path:
        expression = KeyTransform(part, expression)
    return expression
