"""Starting a run: its row, its ``started`` event and its first attempt, in the caller's transaction."""

from __future__ import annotations

import functools
import logging
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.contrib.contenttypes.models import ContentType
from django.db import DatabaseError, IntegrityError
from django.db.models import Model
from django.db.models.expressions import RawSQL

from .. import db, evaluation, observability, tenants
from ..conf import pgflow_settings
from ..core import attributes as attribute_rules
from ..core import jsonvalue
from ..core.definitions import scheduled_plainly
from ..core.events import EventKind
from ..core.limits import NO_GATES
from ..db import connection
from ..exceptions import InputTooLarge, SingletonConflict
from ..models import Event, Step, WorkflowRun
from . import offers
from .cursors import control_cursor, lost_by_pooler, preparing_cursor
from .locking import CHANNEL, SYSTEM, event, now
from .rows import ATTEMPT_VALUES, Insert, Template, attempt_values
from .scheduling import delay_of, finish_run, schedule_attempt

if TYPE_CHECKING:
    from datetime import datetime

    from ..core.definitions import StepDefinition
    from ..workflow import Workflow

logger = logging.getLogger("pgflow")


# --- starting --------------------------------------------------------------------------------


def start_run(
    workflow: type[Workflow],
    *,
    subject: Any = None,
    input: Any = None,
    key: str | None = None,
    parent: WorkflowRun | None = None,
    due_at: datetime | None = None,
    attributes: Any = None,
    actor: Any = None,
) -> WorkflowRun:
    """Create a run and its first attempt in the caller's transaction (see Workflow.start);
    ``parent``: the run whose fan_out started it as a child (``batch.add_run``); ``due_at``:
    the first attempt is due then instead of after its step's wait (a ``django.tasks``
    task's ``run_after``: a task due now takes the plain start's one statement); ``attributes``:
    the run's flat tags (``pgflow.core.attributes``), one more column of its row; ``actor``:
    who started it (a user: the requester an approval's ``self_approval=False`` refuses),
    recorded in its ``started`` event (None: "system")."""
    payload = _checked_input(input)
    tags = attribute_rules.checked(attributes, "start(attributes=...)")
    subject_type, subject_id = _checked_subject(subject)
    if key is not None and (not isinstance(key, str) or not key or len(key) > 255 or jsonvalue.text_problem(key)):
        raise ValueError(
            f"key must be a non-empty string of at most 255 characters (no NUL, no lone surrogate) or None, got {key!r}"
        )
    path = workflow.workflow_path()
    at = now()
    first = workflow.steps().first()
    # A child belongs to its parent's tenant, whatever is current where its batch opened.
    tenant = parent.tenant if parent is not None else tenants.current()
    run = WorkflowRun(
        workflow_class=path,
        input=payload,
        key=key,
        subject_type=subject_type,
        subject_id=subject_id,
        definition_digest=workflow.definition_digest(),
        current_step=first.name if first is not None else None,
        created_at=at,
        updated_at=at,
        parent=parent,
        tenant=tenant,
        attributes=tags,
    )  # its traceparent is set just before its insert, which also counts it (metrics)
    due_later = due_at is not None and due_at > at
    if (
        key is None
        and actor is None  # the plain statement's started event is the system's
        and first is not None
        and not due_later
        and scheduled_plainly(first, singleton=workflow.singleton, delay_worked_out=due_at is not None)
    ):
        return _created(_start_plain(workflow, run, first))
    with db.atomic():
        if key is not None:
            existing = WorkflowRun.objects.filter(workflow_class=path, key=key).first()
            if existing:
                return existing
        # A savepoint only with a key: a racing start with the same key loses cleanly. Each
        # statement saved here is a round trip off every start (and off its start latency).
        with db.atomic() if key is not None else nullcontext():
            try:
                run.traceparent = observability.run_starting(path)
                run.save(force_insert=True)
            except IntegrityError:
                if key is None:
                    raise
                raced = True  # another start of the key committed first: its run, once out of the savepoint
            else:
                raced = False
                if workflow.singleton is not None:
                    take_singleton(workflow, run)
        if raced:
            return WorkflowRun.objects.get(workflow_class=path, key=key)
        details: dict[str, Any] = {"parent": parent.pk} if parent else {}
        event(run, EventKind.STARTED, at=at, actor=actor, workflow=path, key=key, **details)
        if first is None:
            finish_run(run, at, reason="the workflow has no steps")
            return _created(run)
        # The run's row already names its first step (set above): no UPDATE after this insert.
        if due_at is None:
            delay = delay_of(workflow, run, first, at, dict)
        else:
            delay = (due_at - at).total_seconds() if due_later else None
        schedule_attempt(run, workflow, first, at=at, delay=delay, attempt=1)
    return _created(run)


# Marks the run objects start_run made, on the object itself (not a column): the run of an
# existing key, or of a racing start that committed it first, is returned unmarked.
_CREATED = "_pgflow_created"


def _created(run: WorkflowRun) -> WorkflowRun:
    run.__dict__[_CREATED] = True
    return run


def created(run: WorkflowRun) -> bool:
    """Whether ``run`` is one ``start_run`` just made, not the run an existing key named (a
    clock compared with ``created_at`` cannot tell a racing start's run from one's own)."""
    return bool(run.__dict__.get(_CREATED, False))


def _start_plain(workflow: type[Workflow], run: WorkflowRun, first: StepDefinition) -> WorkflowRun:
    """The common start (no key, no singleton, a first step due now and ungated) in one
    statement: ``run`` (not saved yet), its ``started`` event, its first attempt and the
    NOTIFY. The same rows as the general path, in two round trips fewer than its separate
    INSERTs; every round trip is on the start latency (a process wake-up each on a busy machine)."""
    path, parent = run.workflow_class, run.parent
    run.traceparent = observability.run_starting(path)
    details: dict[str, Any] = {"workflow": path, "key": None, **({"parent": parent.pk} if parent else {})}
    attempt = attempt_values(workflow, first)
    on = db.wrapper()
    alone = on.get_autocommit() and not on.in_atomic_block
    early = pgflow_settings.WAKE_BEFORE_FLUSH and alone
    statement = _plain_start_statement(early=early)
    params = [
        *statement.run.params(run),
        *statement.event.params(details=details),
        *statement.step.params(**attempt),
    ]
    # Its parameters sent apart, and the statement prepared (PGFLOW["PREPARE_START"]):
    # quoting its parameters into the SQL, and parsing and planning its three INSERTs,
    # were each a large part of a start in a process that had been idle.
    cursor = preparing_cursor()
    # An idle worker's offer (pgflow.store.offers) is taken only by a start that is its own
    # transaction: in the caller's, the offer's row would stay locked until it ends.
    at, queue = run.created_at, attempt["queue"]
    take = [alone and pgflow_settings.HAND_OFF and offers.fits(run.input, run.attributes), queue, at, queue, at, at]
    values = [*take, *params, queue]
    try:
        cursor.execute(statement.sql, values)
    except DatabaseError as exc:
        # A pooler lost the prepared statement: it failed before running, so an autocommit
        # start runs again unprepared; in the caller's transaction, which the error aborted,
        # the error stands (the next transaction's starts are unprepared).
        if not lost_by_pooler(exc) or not alone:
            raise
        cursor.execute(statement.sql, values)
    (run.pk,) = cursor.fetchone()[:1]
    run._state.adding = False
    run._state.db = on.alias
    if early:
        _flush()
    return run


# A transactional logical-decoding message: the least that writes WAL and takes a
# transaction id, so its commit waits for the disk (and a synchronous standby) on
# synchronous_commit's own terms, flushing the WAL before it, the start's commit included.
# A commit with neither (SELECT 1, an xid alone) waits for nothing.
_FLUSH = "SELECT pg_logical_emit_message(true, 'pgflow', 'start')"


def _flush() -> None:
    """After an autocommit plain start whose commit did not wait for the disk (its statement
    turned synchronous_commit off for its own transaction, so its NOTIFY went out at once and
    the worker's claim overlaps the flush): a second transaction whose commit does wait, for
    WAL that includes the start's. The flush was most of an idle start's latency."""
    # The statement's errors as any query's: Django's.
    with connection.wrap_database_errors:
        control_cursor().execute(_FLUSH)


@dataclass(frozen=True)
class _PlainStart:
    sql: str
    run: Insert
    event: Template  # the started event: its details vary
    step: Template  # the first attempt: its step, queue and priority vary


@functools.cache
def _plain_start_statement(*, early: bool = False) -> _PlainStart:
    """The plain start's statement, compiled once: compiling its three INSERTs again on every
    start was paid on the start latency. ``early``: an autocommit start's, whose transaction
    (its own) commits without waiting for the disk (``_flush`` waits after): set in the
    statement rather than by a BEGIN and a SET LOCAL before it, each a statement the server
    wakes for on the start latency."""
    # The INSERTs compiled once for both: a process's first autocommit start after starts
    # inside atomic() compiled them again, on its latency.
    compiled = _plain_start_compiled()
    return _PlainStart(
        compiled.sql + (", set_config('synchronous_commit', 'off', true)" if early else "") + " FROM new_run",
        compiled.run,
        compiled.event,
        compiled.step,
    )


@functools.cache
def _plain_start_compiled() -> _PlainStart:
    """``_plain_start_statement``'s parts; its SQL up to its SELECT list's end."""
    # The event and the attempt take the run's id and its created_at from the run's row, and
    # their constants are literals (Insert.template): the statement stays well within the 50
    # parameters whose conversion psycopg caches (it parsed it again on every start past that).
    new_run, run_created = RawSQL("(SELECT id FROM new_run)", []), RawSQL("(SELECT created_at FROM new_run)", [])
    at = now()
    run = Insert.of(WorkflowRun(workflow_class="", created_at=at, updated_at=at))
    # The other values of the event and the attempt are the same for every plain start: made
    # into parameters once (three model instances and ~50 field preparations a start were
    # most of its Python).
    started = Event(
        run_id=new_run, step=None, event=str(EventKind.STARTED), actor=SYSTEM, details={}, created_at=run_created
    )
    # Claimed by the worker whose offer the statement took (offers.TAKE), scheduled if none.
    attempt = Step(
        run_id=new_run,
        step_name="",
        attempt=1,
        queue="",
        priority=0,
        created_at=run_created,
        scheduled_at=run_created,
        **{column: RawSQL(value, []) for column, value in offers.TAKEN_VALUES.items()},  # noqa: S611 - constants
        **NO_GATES.columns(),
    )
    event = Insert.of(started).template(started, "details")
    step = Insert.of(attempt).template(attempt, *ATTEMPT_VALUES)
    # The NOTIFY names the queue and the new attempt (pgflow.store.locking.read_note), so an
    # idle worker can claim that attempt by its id.
    # An attempt handed to an idle worker carries its claim in the notification (read_note).
    sql = (
        f"WITH {offers.TAKE}, new_run AS ({run.sql} RETURNING {offers.RUN_RETURNING}), new_event AS ({event.sql}), "
        f"new_step AS ({step.sql} RETURNING {offers.STEP_RETURNING}) "
        # The channel a literal, a constant: one parameter fewer.
        f"SELECT id, pg_notify('{CHANNEL}', %s || ' ' || (SELECT id FROM new_step) || coalesce(' ' || "
        f"{offers.HANDED}, ''))"
    )
    return _PlainStart(sql, run, event, step)


def take_singleton(workflow: type[Workflow], run: WorkflowRun) -> None:
    """Give the new run (a start's or a re-run's) its singleton key. With ``on_conflict="skip"`` another open run of the
    key refuses it (checked under a lock on the key, so two racing starts cannot both pass);
    with ``"queue"`` its attempts wait at the claim for the key's gate."""
    key = evaluation.singleton_key(workflow(run=run))
    if key is None:
        return
    run.singleton_key = key
    run.save(update_fields=["singleton_key"])
    if workflow.singleton.on_conflict != "skip":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 20))", [f"{run.workflow_class}:{key}"])
    other = (
        WorkflowRun.objects.open()
        .filter(workflow_class=run.workflow_class, singleton_key=key)
        .exclude(pk=run.pk)
        .order_by("id")
        .first()
    )
    if other is not None:
        raise SingletonConflict(
            f"{workflow.__name__} is a singleton per key and run #{other.pk} with key {key!r} is still "
            f"{other.status}; this start was refused (Singleton on_conflict='skip')",
            open_run=other,
        )


def _checked_input(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"input must be a dict (JSON object) or None, got {type(value).__name__}")
    encoded = jsonvalue.encode(value, "input")
    limit = pgflow_settings.MAX_INPUT_BYTES
    size = len(encoded.encode())
    if size > limit:
        raise InputTooLarge(f"input is {size} bytes as JSON; the limit is {limit} (PGFLOW['MAX_INPUT_BYTES'])")
    return value


def _checked_subject(subject: Any) -> tuple[ContentType | None, str | None]:
    if subject is None:
        return None, None
    if not isinstance(subject, Model):
        raise TypeError(f"subject must be a saved model instance or None, got {type(subject).__name__}")
    if subject.pk is None or subject._state.adding:
        raise ValueError(f"subject must be a saved model instance; this {type(subject).__name__} has no primary key")
    # pgflow's database's content type (ids differ between databases): the run's row points there.
    return ContentType.objects.db_manager(db.alias()).get_for_model(subject), str(subject.pk)
