"""The one writer of run and step state.

Every transition happens here, once, in a short transaction that holds the run's row lock
(``SELECT … FOR UPDATE`` on ``pgflow_run``) and, for a claimed attempt, checks its claim
token: a worker whose lease was taken over can apply nothing, however late it wakes.
Each transition writes its ``Event`` in the same transaction. NOTIFY is sent inside the
transaction, so PostgreSQL delivers it on commit and drops it on rollback.

Callers outside pgflow use the models' methods (``run.pause()`` …), ``Workflow.start()`` and
``pgflow.signal()``; the worker uses ``claim``/``prepare``/``finish``.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib.contenttypes.models import ContentType
from django.db import IntegrityError, connection, transaction
from django.db.models import Model
from django.utils import timezone

from . import evaluation, observability
from .conf import pgflow_settings
from .core import errors as error_capture
from .core import jsonvalue
from .core.flow import CANCEL, COMPLETE, FINISH, PAUSE, REATTEMPT, SKIP, FlowControl, Outcome, attempt_status
from .core.states import OPEN_STEP, RunStatus, StepStatus, control_error
from .exceptions import InputTooLarge, InvalidTransition, PgflowError, StepNotFound, WorkflowNotFound
from .models import Event, Signal, Step, WorkflowRun

if TYPE_CHECKING:
    from .core.definitions import StepDefinition
    from .workflow import Workflow

logger = logging.getLogger("pgflow")

CHANNEL = "pgflow"  # the NOTIFY channel; the payload is the queue whose step came due
SYSTEM = "system"
TESTING_WORKER = "pgflow.testing"  # the worker name of attempts pgflow.testing runs in-process
_OPEN = sorted(s.value for s in OPEN_STEP)

# Step.outcome words that are not flow-control outcomes.
LOST = "lost"  # the worker stopped heartbeating; a fresh attempt follows
HANDED_BACK = "handed_back"  # the worker shut down before the body ended; a fresh attempt follows


def now() -> datetime:
    return timezone.now()


def actor_name(actor: Any) -> str:
    """``None`` -> ``"system"``; a user -> ``"user:<username>"``; anything else its str()."""
    if actor is None:
        return SYSTEM
    if isinstance(actor, Model) and hasattr(actor, "get_username"):
        return f"user:{actor.get_username()}"
    return str(actor)[:200]


# --- locking ---------------------------------------------------------------------------------


@contextmanager
def locked(run_id: int) -> Iterator[WorkflowRun]:
    """A transaction holding the run's row lock; raises WorkflowRun.DoesNotExist for no run."""
    with transaction.atomic():
        yield WorkflowRun.objects.select_for_update().get(pk=run_id)


def open_attempt(run: WorkflowRun) -> Step | None:
    """The run's open attempt (at most one), locked. Call under ``locked``."""
    return Step.objects.select_for_update().filter(run=run, status__in=_OPEN).first()


def event(run: WorkflowRun, kind: str, /, *, step: Step | None = None, actor: Any = None,
          at: datetime | None = None, **details: Any) -> Event:
    """Write one audit-trail entry; ``details`` must be JSON-serialisable."""
    return Event.objects.create(run=run, step=step, event=kind, actor=actor_name(actor),
                                details=details, created_at=at or now())


def notify(queue: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, queue])


# --- starting --------------------------------------------------------------------------------


def start_run(workflow: type[Workflow], *, subject: Any = None, input: Any = None,
              key: str | None = None) -> WorkflowRun:
    """Create a run and its first attempt in the caller's transaction (see Workflow.start)."""
    payload = _checked_input(input)
    subject_type, subject_id = _checked_subject(subject)
    if key is not None and (not isinstance(key, str) or not key or len(key) > 255
                            or jsonvalue.text_problem(key)):
        raise ValueError(f"key must be a non-empty string of at most 255 characters (no NUL, no lone "
                         f"surrogate) or None, got {key!r}")
    path = workflow.workflow_path()
    at = now()
    with transaction.atomic():
        if key is not None:
            existing = WorkflowRun.objects.filter(workflow_class=path, key=key).first()
            if existing:
                return existing
        try:
            with transaction.atomic():  # a savepoint: a racing start with the same key loses cleanly
                run = WorkflowRun.objects.create(
                    workflow_class=path, input=payload, key=key, subject_type=subject_type, subject_id=subject_id,
                    definition_digest=workflow.definition_digest(), created_at=at, updated_at=at,
                    traceparent=observability.run_starting(path),
                )
        except IntegrityError:
            if key is None:
                raise
            return WorkflowRun.objects.get(workflow_class=path, key=key)
        event(run, "started", at=at, workflow=path, key=key)
        first = workflow.steps().first()
        if first is None:
            _finish_run(run, at, reason="the workflow has no steps")
            return run
        _schedule(run, workflow, first, at=at, delay=delay_of(workflow, run, first, at, dict))
        run.save(update_fields=["current_step", "updated_at"])
    return run


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
    return ContentType.objects.get_for_model(subject), str(subject.pk)


# --- scheduling ------------------------------------------------------------------------------


def _schedule(run: WorkflowRun, workflow: type[Workflow], definition: StepDefinition, *, at: datetime,
              delay: float | None = None, attempt: int | None = None, signal_id: int | None = None) -> Step:
    """Insert the run's next open attempt of ``definition``; NOTIFY when it is due now."""
    if attempt is None:
        attempt = Step.objects.filter(run=run, step_name=definition.name).count() + 1
    queue = workflow.queue_for(definition.name)
    due = at + timedelta(seconds=delay) if delay else at
    step = Step.objects.create(
        run=run, step_name=definition.name, attempt=attempt, queue=queue,
        priority=workflow.priority_for(definition.name), created_at=at, scheduled_at=due, signal_id=signal_id,
    )
    run.current_step = definition.name
    run.updated_at = at
    if due <= at:
        notify(queue)
    return step


def _reschedule_same(run: WorkflowRun, step: Step, *, at: datetime, delay: float | None = None) -> Step | None:
    """A fresh attempt of the step ``step`` was an attempt of (a reattempt, a lost worker, a resume).

    Carries a consumed signal over, so a reattempt of a signal step does not wait again.
    """
    workflow = _workflow_or_none(run)
    if workflow is None:
        return None
    definition = workflow.steps().get(step.step_name)
    if definition is None:
        return None
    return _schedule(run, workflow, definition, at=at, delay=delay, signal_id=step.signal_id)


def _advance(run: WorkflowRun, step_name: str, *, at: datetime, schedule: bool = True) -> None:
    """Move past ``step_name``: schedule the next step, or finish the run when none is left.

    ``schedule=False`` (a paused run) records the next step as current without an attempt;
    ``resume()`` schedules it.
    """
    workflow = run.workflow()
    nxt = _next_step(run, workflow, step_name)
    if nxt is None:
        _finish_run(run, at)
        return
    # The run is on the next step from here on, even if its wait fails below: a resume
    # must schedule that step, not run the completed one again.
    run.current_step = nxt.name
    run.updated_at = at
    run.save(update_fields=["current_step", "updated_at"])
    if schedule:
        _schedule(run, workflow, nxt, at=at, delay=delay_of(workflow, run, nxt, at, lambda: outputs_of(run)))
        run.save(update_fields=["current_step", "updated_at"])


class WaitFailed(PgflowError):
    """A step's ``wait`` / ``wait_until`` method raised or returned something unusable."""

    def __init__(self, message: str, *, step_name: str) -> None:
        super().__init__(message)
        self.step_name = step_name


def delay_of(workflow: type[Workflow], run: WorkflowRun, definition: StepDefinition, at: datetime,
             outputs: Callable[[], dict[str, Any]]) -> float | None:
    """Seconds until ``definition`` is due (its wait / wait_until), None for at once.

    A wait method that fails raises WaitFailed naming the step, so the run can pause with
    the reason instead of the failure escaping the transition.
    """
    if not definition.waits:
        return None
    instance = workflow(run=run, step_name=definition.name, attempt=1, outputs=outputs)
    try:
        return evaluation.delay_seconds(instance, definition, at)
    except Exception as exc:
        raise WaitFailed(f"the wait of step {definition.name!r} failed: {type(exc).__name__}: {exc}",
                         step_name=definition.name) from exc


def _next_step(run: WorkflowRun, workflow: type[Workflow], step_name: str) -> StepDefinition | None:
    steps = workflow.steps()
    if _changed(run, workflow) and (steps.get(step_name) is not None or step_name in steps.removed):
        # (a step that vanished undeclared still pauses the run below, naming it)
        return _next_by_history(run, workflow, step_name, at=now())
    if steps.get(step_name) is not None:
        return steps.next_after(step_name)
    if step_name in steps.removed:
        return _after_removed(run, steps)
    raise StepNotFound(_missing_step_message(run, step_name))


def _changed(run: WorkflowRun, workflow: type[Workflow]) -> bool:
    """Whether the class's step list (names, kinds, order) differs from the one the run began on."""
    return bool(run.definition_digest) and run.definition_digest != workflow.definition_digest()


def _next_by_history(run: WorkflowRun, workflow: type[Workflow], current: str | None, *,
                     at: datetime) -> StepDefinition | None:
    """On a changed definition the run goes by its own history: the next step is the first
    of the current list it has not completed or skipped, so a reordered or inserted step is
    never passed over silently. Where that differs from the step the order alone gives,
    the audit trail says so."""
    steps = workflow.steps()
    done = set(Step.objects.filter(run=run, status__in=[StepStatus.COMPLETED, StepStatus.SKIPPED])
               .values_list("step_name", flat=True))
    if current is not None:
        done.add(current)
    nxt = next((definition for definition in steps if definition.name not in done), None)
    try:
        by_order = steps.next_after(current) if current is not None and current in steps else None
    except StepNotFound:
        by_order = None
    if current is None or (by_order.name if by_order else None) != (nxt.name if nxt else None):
        not_run = [definition.name for definition in steps if definition.name not in done]
        event(run, "definition_changed", at=at, step_name=current, next_step=nxt.name if nxt else None,
              by_order=by_order.name if by_order else None, not_run=not_run,
              change=f"the steps of {run.workflow_class} changed since this run began "
                     f"(digest {run.definition_digest[:12]} -> {workflow.definition_digest()[:12]}); "
                     f"it goes on by its own history with {nxt.name if nxt else 'nothing left: it finishes'}")
    return nxt


def _after_removed(run: WorkflowRun, steps: Any) -> StepDefinition | None:
    """The step after the place a removed step held: after the last step this run closed
    that still exists, or the first step when none does."""
    names = Step.objects.filter(run=run).exclude(status__in=_OPEN).order_by("-created_at", "-id")
    for name in names.values_list("step_name", flat=True):
        if steps.get(name) is not None:
            return steps.next_after(name)
    return steps.first()


def _missing_step_message(run: WorkflowRun, step_name: str) -> str:
    return (f"step {step_name!r} of run {run.pk} is not defined by {run.workflow_class} any more; "
            f"declare it in removed_steps to skip it, or restore it")


def _finish_run(run: WorkflowRun, at: datetime, *, reason: str | None = None, actor: Any = None) -> None:
    run.status = RunStatus.FINISHED
    run.finished_at = at
    run.updated_at = at
    run.current_step = None
    run.paused_reason = ""
    run.save(update_fields=["status", "finished_at", "updated_at", "current_step", "paused_reason"])
    details: dict[str, Any] = {"reason": reason} if reason else {}
    event(run, "finished", at=at, actor=actor, **details)


def _workflow_or_none(run: WorkflowRun) -> type[Workflow] | None:
    try:
        return run.workflow()
    except WorkflowNotFound:
        return None


def outputs_of(run: WorkflowRun) -> dict[str, Any]:
    """``{step_name: output}`` of the run's completed attempts, oldest first."""
    rows = (Step.objects.filter(run=run, status=StepStatus.COMPLETED)
            .order_by("created_at", "id").values_list("step_name", "output"))
    return dict(rows)


# --- closing an attempt ----------------------------------------------------------------------


def _close(step: Step, *, status: str, outcome: str, at: datetime, output: Any = None,
           error: dict[str, Any] | None = None) -> None:
    if step.started_at is not None and at < step.started_at:
        # A cancel that read the clock before a racing claim committed (or a clock behind the
        # claimer's): an attempt never ends before it began.
        at = step.started_at
    step.status = status
    step.outcome = outcome
    step.finished_at = at
    step.claim_token = None
    step.lease_expires_at = None
    fields = ["status", "outcome", "finished_at", "claim_token", "lease_expires_at"]
    if output is not None:
        step.output = output
        fields.append("output")
    if error:
        for column, value in error.items():
            setattr(step, column, value)
        fields.extend(error)
    step.save(update_fields=fields)


def apply(run: WorkflowRun, step: Step, outcome: Outcome, *, at: datetime, actor: Any = None,
          output: Any = None, error: dict[str, Any] | None = None, reason: str = "") -> None:
    """Close the open attempt ``step`` with ``outcome`` and move the run on. Under ``locked``.

    The one place an attempt's end turns into the run's next state, whoever ended it: the
    body, a policy, a timeout, a signal wait's deadline, a batch, or an operator.
    """
    if step.status not in OPEN_STEP:
        # Every caller holds the attempt open under the run lock; a second outcome for one
        # attempt is a bug that must not move the run twice.
        raise InvalidTransition(f"attempt {step.pk} of run {run.pk} is already {step.status}: "
                                f"it takes no second outcome ({outcome.word})")
    if error is not None:
        error = jsonvalue.storable(error)  # a message with a NUL or a lone surrogate still records
    status = attempt_status(outcome, failed=error is not None)
    _close(step, status=status, outcome=outcome.word, at=at, output=output, error=error)
    if error is not None:
        event(run, "step_failed", step=step, at=at, actor=actor, error_class=error.get("error_class"),
              action=outcome.word)
    paused = run.status == RunStatus.PAUSED  # an operator paused it while the body ran
    if outcome.kind == COMPLETE:
        event(run, "step_completed", step=step, at=at, actor=actor)
        _advance_or_pause_on_missing(run, step, at=at, schedule=not paused)
    elif outcome.kind == SKIP:
        details: dict[str, Any] = {"reason": reason} if reason else {}
        event(run, "skipped", step=step, at=at, actor=actor, **details)
        _advance_or_pause_on_missing(run, step, at=at, schedule=not paused)
    elif outcome.kind == FINISH:
        _finish_run(run, at, reason=f"finish() in step {step.step_name}", actor=actor)
    elif outcome.kind == CANCEL:
        _cancel_run(run, at, actor=actor, step=step, reason=reason)
    elif outcome.kind == PAUSE:
        _pause_run(run, at, actor=actor, step=step, reason=reason or _pause_reason(step, error))
    elif outcome.kind == REATTEMPT:
        event(run, "reattempted", step=step, at=at, actor=actor, wait=outcome.wait)
        if not paused:
            _reschedule_same(run, step, at=at, delay=outcome.wait)
            run.save(update_fields=["current_step", "updated_at"])


def _advance_or_pause_on_missing(run: WorkflowRun, step: Step, *, at: datetime, schedule: bool) -> None:
    try:
        with transaction.atomic():  # a savepoint: a failure here leaves the attempt's close in place
            _advance(run, step.step_name, at=at, schedule=schedule)
    except (StepNotFound, WorkflowNotFound, WaitFailed) as exc:
        if isinstance(exc, WaitFailed):  # the run is on the step whose wait failed
            run.current_step = exc.step_name
            run.save(update_fields=["current_step"])
        _pause_run(run, at, step=step, reason=str(exc))


def _pause_reason(step: Step, error: dict[str, Any] | None) -> str:
    if error:
        return f"step {step.step_name} #{step.attempt} failed: {error.get('error_class')}: " \
               f"{(error.get('error_message') or '')[:300]}"
    return f"step {step.step_name} #{step.attempt} paused the run"


def _pause_run(run: WorkflowRun, at: datetime, *, actor: Any = None, step: Step | None = None,
               reason: str = "") -> None:
    reason = jsonvalue.storable(reason)
    run.status = RunStatus.PAUSED
    run.paused_reason = reason[:2000]
    run.updated_at = at
    run.save(update_fields=["status", "paused_reason", "updated_at"])
    event(run, "paused", step=step, at=at, actor=actor, **({"reason": reason[:500]} if reason else {}))


def _cancel_run(run: WorkflowRun, at: datetime, *, actor: Any = None, step: Step | None = None,
                reason: str = "") -> None:
    reason = jsonvalue.storable(reason)
    run.status = RunStatus.CANCELLED
    run.finished_at = at
    run.updated_at = at
    run.paused_reason = ""
    run.save(update_fields=["status", "finished_at", "updated_at", "paused_reason"])
    event(run, "cancelled", step=step, at=at, actor=actor, **({"reason": reason} if reason else {}))


# --- the worker's side: claim, prepare, finish ----------------------------------------------

# The run's columns come back with each claimed attempt, so a plain step needs no other
# read before its body runs.
_RUN_COLUMNS = ("workflow_class", "status", "current_step", "subject_type_id", "subject_id", "input", "key",
                "definition_digest", "created_at", "updated_at", "finished_at", "paused_reason", "traceparent")
# The attempt's own timestamps, for its trace span and metrics (pgflow.observability).
_STEP_COLUMNS = ("created_at", "scheduled_at", "waiting_since", "queue")
# What a claim reads of the attempt (s) and its run (r): Claim's fields, then run_fields.
_CLAIMED = ("s.id, s.run_id, s.step_name, s.attempt, s.claim_token, s.started_at, "
            + ", ".join(f"r.{column}" for column in _RUN_COLUMNS)
            + "".join(f", s.{column}" for column in _STEP_COLUMNS))
_RETURNING = "RETURNING " + _CLAIMED

# Each queue's due attempts in its own ordered scan of the claim index (LATERAL), merged
# and cut to the limit. With ``queue = ANY(...)`` the claim index cannot give the order
# across queues, so PostgreSQL would read and sort every due row of the queues: ~60 ms a
# claim behind a backlog of 100,000 due attempts instead of ~2. Each scan stops at the
# number due (counted, up to the limit, on pgflow_step_due): past the due rows of a
# priority lie its delayed ones, and a scan asked for more than are due walks them all.
# SKIP LOCKED sits in the per-queue scans; a candidate cut by the merge is unlocked when
# the statement ends. The runs are joined to the claimed rows only: joined inside the
# UPDATE, a planner working from stale statistics (a table just truncated or filled) drove
# the claim from every run instead.
_CLAIM_SQL = """
WITH candidates AS (
    SELECT c.id, c.priority, c.scheduled_at
    FROM unnest(%(queues)s::text[]) AS q(name),
    LATERAL (
        SELECT id, priority, scheduled_at FROM pgflow_step
        WHERE status = 'scheduled' AND queue = q.name AND scheduled_at <= %(now)s
        ORDER BY priority DESC, scheduled_at, id
        LIMIT least(%(limit)s, (SELECT count(*) FROM (
            SELECT 1 FROM pgflow_step WHERE status = 'scheduled' AND queue = q.name
                AND timezone('UTC', scheduled_at) <= timezone('UTC', %(now)s::timestamptz)
            ORDER BY timezone('UTC', scheduled_at) LIMIT %(limit)s) AS due_now))
        FOR UPDATE SKIP LOCKED
    ) AS c
), due AS (
    SELECT id FROM candidates ORDER BY priority DESC, scheduled_at, id LIMIT %(limit)s
), claimed AS (
    UPDATE pgflow_step AS s
    SET status = 'in_progress', started_at = %(now)s, worker = %(worker)s, claim_token = gen_random_uuid(),
        lease_expires_at = %(lease_until)s
    FROM due WHERE s.id = due.id
    RETURNING s.id, s.run_id, s.step_name, s.attempt, s.claim_token, s.started_at, s.created_at, s.scheduled_at,
              s.waiting_since, s.queue
)
SELECT """ + _CLAIMED + """ FROM claimed AS s JOIN pgflow_run AS r ON r.id = s.run_id
"""


@dataclass(frozen=True, kw_only=True)
class Claim:
    """An attempt this worker holds: every write for it checks ``token``."""

    step_id: int
    run_id: int
    step_name: str
    attempt: int
    token: uuid.UUID
    started_at: datetime
    run_fields: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    step_fields: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # _STEP_COLUMNS

    def run(self) -> WorkflowRun:
        """The run as it was at the claim (no query); ``refresh_from_db()`` for now."""
        run = WorkflowRun(id=self.run_id, **self.run_fields)
        run._state.adding = False
        run._state.db = "default"
        return run


def _claims(rows: list[tuple[Any, ...]]) -> list[Claim]:
    import json as _json

    claims = []
    for row in rows:
        fields = dict(zip(_RUN_COLUMNS, row[6:6 + len(_RUN_COLUMNS)], strict=True))
        if isinstance(fields["input"], str):  # a raw cursor may hand jsonb back as text
            fields["input"] = _json.loads(fields["input"])
        claims.append(Claim(step_id=row[0], run_id=row[1], step_name=row[2], attempt=row[3], token=row[4],
                            started_at=row[5], run_fields=fields,
                            step_fields=dict(zip(_STEP_COLUMNS, row[6 + len(_RUN_COLUMNS):], strict=True))))
    return claims


def claim(*, worker: str, queues: list[str], limit: int, at: datetime | None = None) -> list[Claim]:
    """Take up to ``limit`` due attempts in one statement (``FOR UPDATE SKIP LOCKED``)."""
    if limit <= 0:
        return []
    at = at or now()
    lease_until = at + timedelta(seconds=pgflow_settings.seconds("LEASE"))
    # One statement is its own transaction: no BEGIN and COMMIT round trips around it.
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, {"queues": queues, "now": at, "limit": limit, "worker": worker,
                                    "lease_until": lease_until})
        rows = cursor.fetchall()
    return _claims(rows)


# The earliest scheduled attempt of each queue (one probe each of pgflow_step_due), then the
# earliest of those.
_NEXT_DUE_SQL = """
SELECT min(first.scheduled_at)
FROM unnest(%(queues)s::text[]) AS q(name),
LATERAL (SELECT scheduled_at FROM pgflow_step WHERE status = 'scheduled' AND queue = q.name
         ORDER BY timezone('UTC', scheduled_at) LIMIT 1) AS first
"""


def next_due(queues: list[str]) -> datetime | None:
    """When the next attempt on ``queues`` comes due (maybe already past); None when none is scheduled."""
    with connection.cursor() as cursor:
        cursor.execute(_NEXT_DUE_SQL, {"queues": queues})
        row = cursor.fetchone()
    return row[0] if row else None


def heartbeat(tokens: list[uuid.UUID], *, at: datetime | None = None) -> int:
    """Extend the lease of every attempt still held under ``tokens``; returns how many."""
    if not tokens:
        return 0
    until = (at or now()) + timedelta(seconds=pgflow_settings.seconds("LEASE"))
    # SKIP LOCKED: a row locked now is being finished, and waiting on it could deadlock
    # with a batch of finishes that locks rows in another order.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgflow_step SET lease_expires_at = %s WHERE id IN (SELECT id FROM pgflow_step "
            "WHERE claim_token = ANY(%s) AND status = 'in_progress' ORDER BY id FOR UPDATE SKIP LOCKED)",
            [until, list(tokens)])
        return cursor.rowcount


def _held(run: WorkflowRun, held: Claim) -> Step | None:
    """The claimed attempt, locked, if it is still in progress under our token."""
    return (Step.objects.select_for_update()
            .filter(pk=held.step_id, run=run, status=StepStatus.IN_PROGRESS, claim_token=held.token).first())


@dataclass(kw_only=True)
class Prepared:
    """A claimed attempt cleared to run its body."""

    claim: Claim
    run: WorkflowRun
    step: Step
    definition: StepDefinition
    workflow: Workflow
    signal: Signal | None = None

    @property
    def deadline(self) -> datetime | None:
        """When the body passes its ``timeout`` (None without one)."""
        if not self.definition.timeout:
            return None
        return self.claim.started_at + timedelta(seconds=self.definition.timeout)


def prepare(held: Claim, *, at: datetime | None = None) -> Prepared | None:
    """Before the body, under the run lock: is the attempt still ours and the run running,
    does a cancel_if or skip_if apply, is the step still defined, is its signal here.

    Returns None when the attempt ended here (skipped, cancelled, parked, or not ours).
    """
    from .signals import take_signal

    at = at or now()
    with locked(held.run_id) as run:
        step = _held(run, held)
        if step is None:
            log_ignored(held, "it is no longer in progress under this claim")
            return None
        if run.status != RunStatus.RUNNING:
            # Not reachable while pause/cancel close open attempts, but never run a stopped run's
            # body, and never close an attempt without saying so in the audit trail.
            _close(step, status=StepStatus.CANCELLED, outcome="cancelled", at=at)
            event(run, "step_cancelled", step=step, at=at, reason=f"the run is {run.status}")
            return None
        try:
            workflow_class = run.workflow()
        except WorkflowNotFound as exc:
            _fail_and_pause(run, step, exc, at=at)
            return None
        steps = workflow_class.steps()
        definition = steps.get(step.step_name)
        if definition is None:
            if step.step_name in steps.removed:
                apply(run, step, Outcome(kind=SKIP), at=at, reason="removed from the workflow")
            else:
                _fail_and_pause(run, step, StepNotFound(_missing_step_message(run, step.step_name)), at=at)
            return None
        workflow = workflow_class(run=run, step_name=step.step_name, attempt=step.attempt,
                                  outputs=lambda: outputs_of(run))
        try:
            cancel = evaluation.should_cancel(workflow)
            skip = not cancel and evaluation.should_skip(workflow, definition)
        except FlowControl as control:  # a verb called in a condition ends the step, as in a body
            apply(run, step, control.outcome, at=at, reason=f"a cancel_if / skip_if of step {step.step_name!r} "
                                                            f"called {control.outcome.kind}()")
            return None
        except Exception as exc:  # noqa: BLE001 - a failing predicate pauses the run, naming it
            _fail_and_pause(run, step, exc, at=at, reason=f"a cancel_if / skip_if of step {step.step_name!r} "
                                                            f"failed: {type(exc).__name__}: {exc}")
            return None
        if cancel:
            apply(run, step, Outcome(kind=CANCEL), at=at, reason="a cancel_if condition held")
            return None
        if skip:
            apply(run, step, Outcome(kind=SKIP), at=at, reason="skip_if")
            return None
        signal = None
        if definition.wait_for:
            signal = take_signal(run, step, definition, at=at)
            if signal is None:
                park(run, step, at=at, deadline=definition.wait_timeout)
                return None
    return Prepared(claim=held, run=run, step=step, definition=definition, workflow=workflow, signal=signal)


def quick_prepare(held: Claim) -> Prepared | None:
    """The prepare of a plain step, with no query: nothing needs the run lock before its
    body (no cancel_if, no skip_if, no signal, no batch) and the claim just read the run.

    Returns None when the attempt needs the full ``prepare``. An operator who pauses or
    cancels from here on is handled when the outcome is applied, as for any running body.
    """
    from .registry import resolve

    run = held.run()
    if run.status != RunStatus.RUNNING:
        return None
    try:
        workflow_class = resolve(run.workflow_class)
    except WorkflowNotFound:
        return None
    definition = workflow_class.steps().get(held.step_name)
    if (definition is None or definition.kind != "step" or definition.skip_if is not None
            or workflow_class.cancel_conditions()):
        return None
    step = Step(id=held.step_id, run_id=held.run_id, step_name=held.step_name, attempt=held.attempt,
                status=StepStatus.IN_PROGRESS, started_at=held.started_at, claim_token=held.token)
    step._state.adding = False
    workflow = workflow_class(run=run, step_name=held.step_name, attempt=held.attempt,
                              outputs=lambda: outputs_of(run))
    return Prepared(claim=held, run=run, step=step, definition=definition, workflow=workflow)


def _fail_and_pause(run: WorkflowRun, step: Step, exc: BaseException, *, at: datetime, reason: str = "") -> None:
    captured = error_capture.capture(exc, **pgflow_settings.capture_options())
    apply(run, step, Outcome(kind=PAUSE), at=at, error=captured, reason=reason or str(exc))


def park(run: WorkflowRun, step: Step, *, at: datetime, deadline: float | None = None,
         batch_id: Any = None) -> None:
    """Park the attempt as ``waiting`` on a signal or a batch. Under ``locked``."""
    step.status = StepStatus.WAITING
    step.claim_token = None
    step.lease_expires_at = None
    fields = ["status", "claim_token", "lease_expires_at"]
    if step.waiting_since is None:
        step.waiting_since = at
        fields.append("waiting_since")
        if deadline:
            step.deadline_at = at + timedelta(seconds=deadline)
            fields.append("deadline_at")
    if batch_id is not None:
        step.batch_id = batch_id
        fields.append("batch")
    step.save(update_fields=fields)


def wake(step: Step, *, at: datetime) -> None:
    """A waiting attempt becomes due now (its signal arrived). Under ``locked``."""
    step.status = StepStatus.SCHEDULED
    step.scheduled_at = at
    step.save(update_fields=["status", "scheduled_at"])
    notify(step.queue)


def finish(held: Claim, outcome: Outcome, *, output: Any = None, error: dict[str, Any] | None = None,
           at: datetime | None = None) -> bool:
    """After the body, under the run lock: apply ``outcome`` if the attempt is still ours.

    Returns False (and logs) for a late completion of an attempt that timed out, was taken
    over after its lease ran out, or was ended by an operator: it is never applied.
    """
    at = at or now()
    with locked(held.run_id) as run:
        step = _held(run, held)
        if step is None:
            log_ignored(held, "it was ended elsewhere (timed out, lease taken over, or an operator acted)")
            return False
        apply(run, step, outcome, at=at, output=output, error=error)
    return True


@dataclass(frozen=True, kw_only=True)
class Finished:
    """One attempt's end, for ``finish_many``."""

    claim: Claim
    outcome: Outcome
    output: Any = None
    error: dict[str, Any] | None = None


def finish_many(items: list[Finished], *, at: datetime | None = None) -> list[bool | None]:
    """``finish`` for many attempts in one transaction (the worker's group commit).

    Locks the runs it can lock now (``SKIP LOCKED``: a run another transaction holds, say a
    webhook's ``signal()`` inside a long ``atomic()``, never holds up the others), checks
    every claim token, applies the common case (a body that returned, on a running run of an
    unchanged definition) with a handful of set-based statements, and everything else
    through ``apply`` one by one. Returns, per item, whether it was applied, or None when its
    run was locked elsewhere: the caller tries it again in a later transaction.

    One outcome per attempt: a second item for an attempt already applied in this batch
    (a completion and a timeout that crossed) is ignored.
    """
    at = at or now()
    applied: list[bool | None] = [False] * len(items)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT id, status, workflow_class, definition_digest FROM pgflow_run WHERE id = ANY(%s) "
                       "ORDER BY id FOR UPDATE SKIP LOCKED", [sorted({item.claim.run_id for item in items})])
        runs = {row[0]: (row[1], row[2], row[3]) for row in cursor.fetchall()}
        missing = sorted({item.claim.run_id for item in items} - runs.keys())
        if missing:  # locked elsewhere, or deleted (retention): only the first come back later
            cursor.execute("SELECT id FROM pgflow_run WHERE id = ANY(%s)", [missing])
            busy = {row[0] for row in cursor.fetchall()}
        else:
            busy = set()
        cursor.execute("SELECT id, claim_token FROM pgflow_step WHERE id = ANY(%s) AND status = 'in_progress' "
                       "ORDER BY id FOR UPDATE",
                       [sorted(item.claim.step_id for item in items if item.claim.run_id in runs)])
        tokens = dict(cursor.fetchall())
        plain, other = [], []
        for index, item in enumerate(items):
            run = runs.get(item.claim.run_id)
            if run is None and item.claim.run_id in busy:
                applied[index] = None  # locked by another transaction: not now
                continue
            if run is None:
                log_ignored(item.claim, "its run no longer exists")
                continue
            if tokens.pop(item.claim.step_id, None) != item.claim.token:
                log_ignored(item.claim, "it was ended elsewhere (timed out, lease taken over, an operator acted, "
                                        "or another outcome of it was applied)")
                continue
            applied[index] = True
            if (item.outcome.kind == COMPLETE and item.error is None and run[0] == RunStatus.RUNNING
                    and _digest(run[1]) == run[2]):
                plain.append((item, run[1]))
            else:
                other.append(item)
        if plain:
            _complete_many(cursor, plain, at=at)
        for item in other:  # the rare cases, one by one, with the full rules
            run_row = WorkflowRun.objects.get(pk=item.claim.run_id)
            step_row = Step.objects.get(pk=item.claim.step_id)
            apply(run_row, step_row, item.outcome, at=at, output=item.output, error=item.error)
    return applied


def _digest(workflow_class: str) -> str | None:
    """The current definition digest of ``workflow_class``; None when it does not import."""
    from .registry import resolve

    try:
        return resolve(workflow_class).definition_digest()
    except WorkflowNotFound:
        return None


_CLOSE_COMPLETED = """
UPDATE pgflow_step AS s
SET status = 'completed', outcome = 'completed', finished_at = GREATEST(%(at)s, s.started_at), claim_token = NULL,
    lease_expires_at = NULL, output = v.output::jsonb
FROM unnest(%(ids)s::bigint[], %(outputs)s::text[]) AS v(id, output)
WHERE s.id = v.id
"""
# The rest of a batch's common case in one statement (one round trip): the next attempts,
# the events, the runs moved on, and a NOTIFY per queue with a step due now. The attempts
# closed by _CLOSE_COMPLETED must be closed by then: the one-open-attempt index is checked
# as each row is inserted.
_ADVANCE = """
WITH next_steps AS (
    INSERT INTO pgflow_step (run_id, step_name, attempt, status, outcome, queue, priority, created_at, scheduled_at,
                             worker)
    SELECT v.run_id, v.step_name, 1, 'scheduled', '', v.queue, v.priority, %(at)s, v.due, ''
    FROM unnest(%(step_runs)s::bigint[], %(step_names)s::text[], %(step_queues)s::text[],
                %(step_priorities)s::int[], %(step_due)s::timestamptz[]) AS v(run_id, step_name, queue, priority, due)
    RETURNING 1
), events AS (
    INSERT INTO pgflow_event (run_id, step_id, event, actor, details, created_at)
    SELECT v.run_id, v.step_id, v.event, 'system', '{}'::jsonb, %(at)s
    FROM unnest(%(event_runs)s::bigint[], %(event_steps)s::bigint[], %(events)s::text[]) WITH ORDINALITY
         AS v(run_id, step_id, event)
    ORDER BY ordinality
    RETURNING 1
), moved AS (
    UPDATE pgflow_run AS r
    SET status = v.status, current_step = v.current_step, finished_at = v.finished_at, updated_at = %(at)s,
        paused_reason = ''
    FROM unnest(%(run_ids)s::bigint[], %(run_statuses)s::text[], %(run_current)s::text[],
                %(run_finished)s::timestamptz[]) AS v(id, status, current_step, finished_at)
    WHERE r.id = v.id
    RETURNING 1
)
SELECT (SELECT count(*) FROM next_steps), (SELECT count(*) FROM events), (SELECT count(*) FROM moved),
       (SELECT count(pg_notify(%(channel)s, queue)) FROM unnest(%(due_queues)s::text[]) AS queue)
"""


def _outputs_with(item: Finished) -> Callable[[], dict[str, Any]]:
    """A loader of the run's outputs plus ``item``'s own, not yet written."""
    return lambda: {**outputs_of(item.claim.run()), item.claim.step_name: item.output}


def _add(columns: dict[str, list[Any]], **values: Any) -> None:
    for name, value in values.items():
        columns[name].append(value)


def _complete_many(cursor: Any, done: list[tuple[Finished, str]], *, at: datetime) -> None:
    """Close completed attempts and move their runs on: two statements for all of them.

    The same transitions ``apply`` makes for a COMPLETE outcome on a running run; a run
    whose next step cannot be worked out (its class or step is gone) goes through
    ``apply`` instead, which pauses it with the reason.
    """
    from .registry import resolve

    # _ADVANCE's array parameters, one list each, filled together per attempt
    advance: dict[str, list[Any]] = {name: [] for name in (
        "step_runs", "step_names", "step_queues", "step_priorities", "step_due",
        "event_runs", "event_steps", "events",
        "run_ids", "run_statuses", "run_current", "run_finished")}
    due_queues: set[str] = set()
    closing, outputs, fallback = [], [], []
    for item, workflow_class in done:
        claim = item.claim
        try:
            workflow = resolve(workflow_class)
            definitions = workflow.steps()
            if definitions.get(claim.step_name) is None:
                raise StepNotFound(claim.step_name)
            nxt = definitions.next_after(claim.step_name)
            # This step's own output is not written yet: the loader adds it to what the rows hold.
            # (Building the run's model costs more than the rest of this loop: only for a wait.)
            delay = delay_of(workflow, claim.run(), nxt, at, _outputs_with(item)) if nxt and nxt.waits else None
        except (StepNotFound, WorkflowNotFound, WaitFailed):
            fallback.append(item)  # apply() pauses the run, naming the failure
            continue
        closing.append(claim.step_id)
        outputs.append(None if item.output is None else json.dumps(item.output))
        _add(advance, event_runs=claim.run_id, event_steps=claim.step_id, events="step_completed")
        if nxt is None:
            _add(advance, run_ids=claim.run_id, run_statuses=RunStatus.FINISHED.value, run_current=None,
                 run_finished=at)
            _add(advance, event_runs=claim.run_id, event_steps=None, events="finished")
            continue
        due = at + timedelta(seconds=delay) if delay else at
        queue = workflow.queue_for(nxt.name)
        _add(advance, step_runs=claim.run_id, step_names=nxt.name, step_queues=queue,
             step_priorities=workflow.priority_for(nxt.name), step_due=due)
        _add(advance, run_ids=claim.run_id, run_statuses=RunStatus.RUNNING.value, run_current=nxt.name,
             run_finished=None)
        if due <= at:
            due_queues.add(queue)
    if closing:
        cursor.execute(_CLOSE_COMPLETED, {"at": at, "ids": closing, "outputs": outputs})
        cursor.execute(_ADVANCE, {"at": at, "channel": CHANNEL, "due_queues": sorted(due_queues), **advance})
    for item in fallback:
        apply(WorkflowRun.objects.get(pk=item.claim.run_id), Step.objects.get(pk=item.claim.step_id), item.outcome,
              at=at, output=item.output)


def log_ignored(held: Claim, why: str) -> None:
    logger.warning("late completion ignored: run=%s step=%s attempt=%s: %s",
                   held.run_id, held.step_name, held.attempt, why,
                   extra={"action": "late_completion_ignored", "run_id": held.run_id})


def hand_back(held: list[Claim], *, at: datetime | None = None) -> int:
    """A shutting-down worker gives its unfinished attempts back: each closes and a fresh
    attempt is due at once for another worker. Returns how many were handed back."""
    at = at or now()
    count = 0
    for item in held:
        with locked(item.run_id) as run:
            step = _held(run, item)
            if step is None:
                continue
            _close(step, status=StepStatus.CANCELLED, outcome=HANDED_BACK, at=at)
            event(run, "handed_back", step=step, at=at)
            if run.status == RunStatus.RUNNING:
                _reschedule_same(run, step, at=at)
                run.save(update_fields=["current_step", "updated_at"])
            count += 1
    return count


# --- operator controls -----------------------------------------------------------------------


def _check(run: WorkflowRun, control: str) -> None:
    message = control_error(control, run.status)
    if message:
        raise InvalidTransition(f"run {run.pk}: {message}")


def _refresh(into: WorkflowRun | None, run: WorkflowRun) -> WorkflowRun:
    if into is None:
        return run
    into.refresh_from_db()
    return into


def pause(run_id: int, *, actor: Any = None, into: WorkflowRun | None = None) -> WorkflowRun:
    """Pause a running run. A scheduled or waiting attempt closes; one in progress finishes
    its body, and the run parks after it."""
    with locked(run_id) as run:
        at = now()  # once the lock is held: after any claim that committed first
        _check(run, "pause")
        step = open_attempt(run)
        if step is not None and step.status != StepStatus.IN_PROGRESS:
            _close(step, status=StepStatus.CANCELLED, outcome="paused", at=at)
        _pause_run(run, at, actor=actor, step=step, reason=f"paused by {actor_name(actor)}")
    return _refresh(into, run)


def resume(run_id: int, *, actor: Any = None, into: WorkflowRun | None = None) -> WorkflowRun:
    """Resume a paused run: a fresh attempt of its current step, due now."""
    at = now()
    with locked(run_id) as run:
        _check(run, "resume")
        _unpause(run, at, actor=actor)
        if open_attempt(run) is None:  # an attempt still in progress will move the run on itself
            workflow = run.workflow()
            definition = workflow.steps().get(run.current_step or "")
            # A step moved before this one that the run never ran comes first (by its history);
            # a current step that vanished keeps its own rule below (removed_steps or a pause).
            if definition is not None and _changed(run, workflow) and _passed_over(run, workflow, definition):
                definition = _next_by_history(run, workflow, None, at=at)
                if definition is None:
                    _finish_run(run, at, reason="every step of the changed definition has run")
                    return _refresh(into, run)
            if definition is None:
                _resume_missing(run, workflow, at=at)
            else:
                last = Step.objects.filter(run=run, step_name=definition.name).order_by("-created_at", "-id").first()
                # A step the run never reached (it was paused as the step before ended) still
                # owes its wait, counted from now; a fresh attempt of a tried step is due now.
                delay = None if last else delay_of(workflow, run, definition, at, lambda: outputs_of(run))
                _schedule(run, workflow, definition, at=at, delay=delay,
                          signal_id=last.signal_id if last else None)
                run.save(update_fields=["current_step", "updated_at"])
    return _refresh(into, run)


def _passed_over(run: WorkflowRun, workflow: type[Workflow], definition: StepDefinition) -> bool:
    """Whether a step before ``definition`` in the current list never completed or was skipped in this run."""
    before = [d.name for d in workflow.steps()][: workflow.steps().index(definition.name) or 0]
    done = set(Step.objects.filter(run=run, status__in=[StepStatus.COMPLETED, StepStatus.SKIPPED],
                                   step_name__in=before).values_list("step_name", flat=True))
    return len(done) < len(before)


def _unpause(run: WorkflowRun, at: datetime, *, actor: Any) -> None:
    run.status = RunStatus.RUNNING
    run.paused_reason = ""
    run.updated_at = at
    run.save(update_fields=["status", "paused_reason", "updated_at"])
    event(run, "resumed", at=at, actor=actor)


def _resume_missing(run: WorkflowRun, workflow: type[Workflow], *, at: datetime) -> None:
    name = run.current_step or ""
    steps = workflow.steps()
    if name in steps.removed or not name:
        nxt = _after_removed(run, steps)
        if nxt is None:
            _finish_run(run, at)
            return
        _schedule(run, workflow, nxt, at=at)
        run.save(update_fields=["current_step", "updated_at"])
        return
    raise StepNotFound(_missing_step_message(run, name))


def cancel(run_id: int, *, actor: Any = None, into: WorkflowRun | None = None) -> WorkflowRun:
    """Cancel a running or paused run; its open attempt (even one in progress) closes now,
    so a body still running applies nothing when it returns."""
    with locked(run_id) as run:
        at = now()  # once the lock is held: after any claim that committed first
        _check(run, "cancel")
        step = open_attempt(run)
        if step is not None:
            _close(step, status=StepStatus.CANCELLED, outcome="cancelled", at=at)
        _cancel_run(run, at, actor=actor, step=step, reason=f"cancelled by {actor_name(actor)}")
    return _refresh(into, run)


def skip_step(run_id: int, *, actor: Any = None, into: WorkflowRun | None = None) -> WorkflowRun:
    """Skip the run's current step and move on; a paused run resumes with the next step."""
    with locked(run_id) as run:
        at = now()  # once the lock is held: after any claim that committed first
        _check(run, "skip_step")
        if run.status == RunStatus.PAUSED:
            _unpause(run, at, actor=actor)
        step = open_attempt(run)
        name = run.current_step
        if step is not None:
            _close(step, status=StepStatus.SKIPPED, outcome="skipped", at=at)
        event(run, "skipped", step=step, at=at, actor=actor, reason=f"skipped by {actor_name(actor)}",
              step_name=name)
        if name is None:
            _finish_run(run, at)
        else:
            _advance(run, name, at=at)
    return _refresh(into, run)


# --- helpers for pgflow.testing --------------------------------------------------------------


def claim_step(step_id: int, *, worker: str, at: datetime | None = None) -> Claim | None:
    """Claim one specific scheduled attempt, due or not (``pgflow.testing`` skips waits)."""
    at = at or now()
    lease_until = at + timedelta(seconds=pgflow_settings.seconds("LEASE"))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgflow_step AS s SET status = 'in_progress', started_at = %(now)s, worker = %(worker)s, "
            "claim_token = gen_random_uuid(), lease_expires_at = %(lease_until)s, "
            "scheduled_at = LEAST(s.scheduled_at, %(now)s) "
            "FROM pgflow_run AS r WHERE s.id = %(id)s AND s.status = 'scheduled' AND r.id = s.run_id "
            + _RETURNING,
            {"id": step_id, "now": at, "worker": worker, "lease_until": lease_until})
        rows = cursor.fetchall()
    claims = _claims(rows)
    return claims[0] if claims else None
