"""Rows built and read without the ORM's per-instance cost, for the statements on every
attempt's path: model instances made from a row as Django loads one (``loaded``,
``deferred``), an ``INSERT`` compiled once with its parameters prepared once (``Insert``,
``Template``), the columns a claim returns, and the values an attempt takes from its step's
definition. The claim (``claims``), the plain start (``starting``) and the group commit
(``commit``) share them."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from django.db.models import Field, Model
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init
from django.db.models.sql import InsertQuery
from psycopg import sql as psycopg_sql

from ..db import alias, connection, wrapper

if TYPE_CHECKING:
    from ..core.definitions import StepDefinition
    from ..workflow import Workflow

M = TypeVar("M", bound=Model)

# --- what a claim returns -----------------------------------------------------------------------

# The run's columns come back with each claimed attempt, so a plain step needs no other
# read before its body runs.
RUN_COLUMNS = (
    "workflow_class",
    "status",
    "current_step",
    "subject_type_id",
    "subject_id",
    "input",
    "key",
    "definition_digest",
    "created_at",
    "updated_at",
    "finished_at",
    "paused_reason",
    "traceparent",
    "parent_id",
    "rerun_of_id",
    "singleton_key",
    "attributes",  # a run field like the others (at most 4 KB): self.run.attributes costs no query
    "tenant",
)
# The attempt's own timestamps, for its trace span and metrics (pgflow.observability).
STEP_COLUMNS = ("created_at", "scheduled_at", "waiting_since", "queue", "throttled_until")
# The attempt's columns a claim's UPDATE of pgflow_step ``s`` returns: Claim's fields, then
# STEP_COLUMNS.
CLAIMED_STEP = "s.id, s.run_id, s.step_name, s.attempt, s.claim_token, s.started_at" + "".join(
    f", s.{column}" for column in STEP_COLUMNS
)
# The run's outputs as a claim brings them (``{step_name: output}`` of its completed
# attempts, oldest first, the last of a name winning: what ``store.outputs_of_runs`` reads,
# a re-run's copied attempts included), only for the attempts of the steps named in
# ``%(readers)s`` ("workflow path:step name", those whose body reads ``self.outputs``) and
# only while the run's stored outputs take at most ``%(outputs_cap)s`` bytes: past it, or
# for any other step, NULL, and ``self.outputs`` reads them with one query when first used.
# So an output no body reads costs no claim, and a large one costs the claim only its
# size's probe (pg_column_size reads no TOASTed value). The claim's snapshot was taken
# before its UPDATE: it sees every output committed before the attempt was claimed, and the
# previous step's was committed with the attempt itself.
OUTPUTS_CAP = 32 * 1024
CLAIMED_OUTPUTS = """CASE WHEN r.workflow_class || ':' || s.step_name = ANY(%(readers)s::text[])
        AND (SELECT coalesce(sum(pg_column_size(z.output)), 0) FROM pgflow_step_live AS z
             WHERE z.run_id = s.run_id AND z.status = 'completed') <= %(outputs_cap)s
    THEN (SELECT coalesce(jsonb_object_agg(o.step_name, o.output ORDER BY o.created_at, o.id), '{}'::jsonb)
          FROM pgflow_step_live AS o WHERE o.run_id = s.run_id AND o.status = 'completed') END"""
# What a claim reads of the attempt (s) and its run (r): Claim's fields, then RUN_COLUMNS,
# then STEP_COLUMNS, then the outputs (CLAIMED_OUTPUTS).
CLAIMED = (
    "s.id, s.run_id, s.step_name, s.attempt, s.claim_token, s.started_at, "
    + ", ".join(f"r.{column}" for column in RUN_COLUMNS)
    + "".join(f", s.{column}" for column in STEP_COLUMNS)
    + ", "
    + CLAIMED_OUTPUTS
)


# --- an attempt's values from its definition --------------------------------------------------


ATTEMPT_VALUES = ("step_name", "queue", "priority")  # the keys of attempt_values()


def attempt_values(workflow: type[Workflow], definition: StepDefinition) -> dict[str, Any]:
    """The columns a new attempt of ``definition`` takes from its class and step (``Step``'s
    field names): every path that inserts an attempt (``schedule_attempt``, the plain start,
    the group commit) writes these."""
    return {
        "step_name": definition.name,
        "queue": workflow.queue_for(definition.name),
        "priority": workflow.priority_for(definition.name),
    }


# --- model instances from a row ---------------------------------------------------------------


def loaded(model: type[M], values: dict[str, Any]) -> M:
    """An instance of ``model`` as if loaded from the database, with ``values`` (by attname)
    and every other field at its default. Django's positional construction: with keywords
    its ``__init__`` looks each field up in them, on every attempt before its body (the
    start latency). It belongs to pgflow's database, where a ``save()`` or
    ``refresh_from_db()`` of it must go."""
    places, defaults, fresh = _row_of(model)
    row = list(defaults)
    for index, made in fresh:  # a callable default (dict, now…) makes a new value each time
        row[index] = made.get_default()
    for name, value in values.items():
        row[places[name]] = value
    return model.from_db(alias(), places.keys(), row)


def deferred(model: type[M], values: dict[str, Any], **more: Any) -> M:
    """An instance of ``model`` with only ``values`` and ``more`` (by attname) loaded, as
    ``.only()`` would load it: any other field is read from the database when first used
    (``more``: values kept apart, so that a caller's dict is not copied to add one). Smaller than
    ``loaded`` (a claimed step's row has 35 fields, each in its ``__dict__``, for each
    attempt held, 1,000 of them for 1,000 awaiting async bodies).

    Two are made before every body (its run and its attempt): with Django's own ``__init__``
    and ``from_db``, and nothing listening to ``pre_init``/``post_init`` for the model,
    what ``from_db`` leaves is exactly ``values`` in the instance's ``__dict__`` and a
    loaded ``_state``, written here directly (``__init__`` visits every field, deferred
    ones too; benchmarks/RESULTS.md, issue 35 part K)."""
    if _plain_init(model) and not _init_listened(model):
        new = model.__new__(model)
        state = new._state = ModelState()
        state.adding = False
        state.db = alias()
        new.__dict__.update(values)
        if more:
            new.__dict__.update(more)
        return new
    values = {**values, **more}
    places = _row_of(model)[0]
    names = sorted(values, key=places.__getitem__)
    return model.from_db(alias(), names, [values[name] for name in names])


def _init_listened(model: type[Model]) -> bool:
    """Whether a receiver of ``pre_init`` or ``post_init`` listens to ``model``. A signal's
    receivers are looked up (``has_listeners``) only when it has any: two are asked before
    every body, and a project rarely connects either."""
    return bool(pre_init.receivers and pre_init.has_listeners(model)) or bool(
        post_init.receivers and post_init.has_listeners(model)
    )


@functools.cache
def _plain_init(model: type[Model]) -> bool:
    """``model`` is built by Django's own ``__init__`` and ``from_db``, and each concrete
    field's attribute stores a value as ``__init__``'s ``setattr`` does: in ``__dict__``
    (a plain field has no setter; a foreign key's only clears a cache a new instance lacks)."""
    if model.__init__ is not Model.__init__ or model.from_db.__func__ is not Model.from_db.__func__:  # type: ignore[attr-defined]
        return False
    return all(
        type(model.__dict__.get(f.attname)) in (DeferredAttribute, ForeignKeyDeferredAttribute)
        for f in model._meta.concrete_fields
    )


@functools.cache
def _row_of(model: type[Model]) -> tuple[dict[str, int], tuple[Any, ...], tuple[tuple[int, Any], ...]]:
    """``model``'s concrete fields: each attname's place in a row, the constant defaults, and
    the places of the defaults to call for each instance."""
    fields = model._meta.concrete_fields
    called = tuple((index, f) for index, f in enumerate(fields) if f.has_default() and callable(f.default))
    made = {index for index, _ in called}
    constant = tuple(None if index in made else f.get_default() for index, f in enumerate(fields))
    return {f.attname: index for index, f in enumerate(fields)}, constant, called


# --- an INSERT compiled once ------------------------------------------------------------------


@dataclass(frozen=True)
class Insert:
    """One model's ``INSERT INTO ... VALUES (...)`` as Django writes it, and the fields whose
    values fill its placeholders, in their order."""

    sql: str
    fields: tuple[Field[Any, Any], ...]

    @classmethod
    def of(cls, instance: Model) -> Insert:
        meta = instance._meta
        fields = [
            f for f in meta.local_concrete_fields if f is not meta.auto_field and not getattr(f, "generated", False)
        ]
        query = InsertQuery(type(instance))
        query.insert_values(fields, [instance])
        ((sql, _),) = query.get_compiler(connection=connection).as_sql()
        # A field set to an expression (the new run's id) is written into the SQL itself.
        bound = tuple(f for f in fields if not hasattr(f.pre_save(instance, True), "resolve_expression"))
        return cls(sql, bound)

    def params(self, instance: Model) -> list[Any]:
        """The parameters for ``instance``, prepared as Django's own insert prepares them."""
        on = wrapper()
        return [field.get_db_prep_save(field.pre_save(instance, True), on) for field in self.fields]

    def template(self, instance: Model, *varying: str) -> Template:
        """The statement for rows like ``instance`` that differ only in the fields ``varying``:
        every other value is prepared once, here, and a plain constant (None, a bool, an int,
        a str) is written into the SQL as a literal. psycopg caches the conversion of a
        statement of at most 50 parameters and parses a longer one again on every execution."""
        slots = {field.attname for field in self.fields if field.attname in varying}
        assert slots == set(varying), f"not bound parameters of this insert: {set(varying) - slots}"
        pieces = self.sql.split("%s")
        assert len(pieces) == len(self.fields) + 1 and "%%" not in self.sql, self.sql
        sql = [pieces[0]]
        prepared: list[Any] = []
        places: dict[str, tuple[int, Field[Any, Any]]] = {}
        for field, value, piece in zip(self.fields, self.params(instance), pieces[1:], strict=True):
            if field.attname not in varying and (value is None or isinstance(value, bool | int | str)):
                # A literal's % would read as a placeholder's.
                sql.append(psycopg_sql.Literal(value).as_string(None).replace("%", "%%"))
            else:
                if field.attname in varying:
                    places[field.attname] = (len(prepared), field)
                prepared.append(value)
                sql.append("%s")
            sql.append(piece)
        return Template("".join(sql), tuple(prepared), places)


@dataclass(frozen=True)
class Template:
    """An ``Insert`` whose constants are written into its SQL or prepared once, but for the
    fields ``varying``."""

    sql: str
    prepared: tuple[Any, ...]
    varying: dict[str, tuple[int, Field[Any, Any]]]

    def params(self, **values: Any) -> list[Any]:
        row, on = list(self.prepared), wrapper()
        for name, value in values.items():
            index, field = self.varying[name]
            row[index] = field.get_db_prep_save(value, on)
        return row
