"""Closing an attempt and moving its run on: ``apply`` turns every way an attempt ends into the
run's next state; parking and waking an attempt that waits."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import db
from ..core import jsonvalue
from ..core.events import EventKind
from ..core.flow import CANCEL, COMPLETE, FINISH, PAUSE, REATTEMPT, SKIP, Outcome, attempt_status
from ..core.states import OPEN_STEP, RunStatus, StepStatus
from ..exceptions import InvalidTransition, StepNotFound, WorkflowNotFound
from ..models import Step, WorkflowRun
from .locking import event, notify
from .scheduling import WaitFailed, advance, finish_run, reschedule_same

if TYPE_CHECKING:
    pass

logger = logging.getLogger("pgflow")


# --- closing an attempt ----------------------------------------------------------------------


def close_attempt(
    step: Step, *, status: str, outcome: str, at: datetime, output: Any = None, error: dict[str, Any] | None = None
) -> None:
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


def apply(
    run: WorkflowRun,
    step: Step,
    outcome: Outcome,
    *,
    at: datetime,
    actor: Any = None,
    output: Any = None,
    error: dict[str, Any] | None = None,
    reason: str = "",
    attributes: dict[str, Any] | None = None,
) -> None:
    """Close the open attempt ``step`` with ``outcome`` and move the run on. Under ``locked``.
    ``attributes``: what the body's ``set_attributes()`` set (checked there), merged into the
    run's with an ``attributes_set`` event; not for an attempt that failed.

    The one place an attempt's end turns into the run's next state, whoever ended it: the
    body, a policy, a timeout, a signal wait's deadline, a batch, or an operator.
    """
    if step.status not in OPEN_STEP:
        # Every caller holds the attempt open under the run lock; a second outcome for one
        # attempt is a bug that must not move the run twice.
        raise InvalidTransition(
            f"attempt {step.pk} of run {run.pk} is already {step.status}: it takes no second outcome ({outcome.word})"
        )
    if error is not None:
        error = jsonvalue.storable(error)  # a message with a NUL or a lone surrogate still records
    status = attempt_status(outcome, failed=error is not None)
    close_attempt(step, status=status, outcome=outcome.word, at=at, output=output, error=error)
    if attributes and error is None:
        set_attributes(run, attributes, step=step, at=at, actor=actor)
    if error is not None:
        event(
            run,
            EventKind.STEP_FAILED,
            step=step,
            at=at,
            actor=actor,
            error_class=error.get("error_class"),
            action=outcome.word,
        )
    paused = run.status == RunStatus.PAUSED  # an operator paused it while the body ran
    if outcome.kind == COMPLETE:
        event(run, EventKind.STEP_COMPLETED, step=step, at=at, actor=actor)
        _advance_or_pause_on_missing(run, step, at=at, schedule=not paused)
    elif outcome.kind == SKIP:
        details: dict[str, Any] = {"reason": reason} if reason else {}
        event(run, EventKind.SKIPPED, step=step, at=at, actor=actor, **details)
        _advance_or_pause_on_missing(run, step, at=at, schedule=not paused)
    elif outcome.kind == FINISH:
        finish_run(run, at, reason=f"finish() in step {step.step_name}", actor=actor)
    elif outcome.kind == CANCEL:
        cancel_run(run, at, actor=actor, step=step, reason=reason)
    elif outcome.kind == PAUSE:
        pause_run(run, at, actor=actor, step=step, reason=reason or _pause_reason(step, error))
    elif outcome.kind == REATTEMPT:
        event(run, EventKind.REATTEMPTED, step=step, at=at, actor=actor, wait=outcome.wait)
        if not paused:
            reschedule_same(run, step, at=at, delay=outcome.wait)
            run.save(update_fields=["current_step", "updated_at"])


def set_attributes(
    run: WorkflowRun, attributes: dict[str, Any], *, at: datetime, step: Step | None = None, actor: Any = None
) -> None:
    """Merge ``attributes`` (checked) over the run's, with an ``attributes_set`` event. Under ``locked``."""
    run.attributes = {**(run.attributes or {}), **attributes}
    run.save(update_fields=["attributes"])
    event(run, EventKind.ATTRIBUTES_SET, step=step, at=at, actor=actor, attributes=attributes)


def _advance_or_pause_on_missing(run: WorkflowRun, step: Step, *, at: datetime, schedule: bool) -> None:
    try:
        with db.atomic():  # a savepoint: a failure here leaves the attempt's close in place
            advance(run, step.step_name, at=at, schedule=schedule)
    except (StepNotFound, WorkflowNotFound, WaitFailed) as exc:
        if isinstance(exc, WaitFailed):  # the run is on the step whose wait failed
            run.current_step = exc.step_name
            run.save(update_fields=["current_step"])
        pause_run(run, at, step=step, reason=str(exc))


def _pause_reason(step: Step, error: dict[str, Any] | None) -> str:
    if error:
        return (
            f"step {step.step_name} #{step.attempt} failed: {error.get('error_class')}: "
            f"{(error.get('error_message') or '')[:300]}"
        )
    return f"step {step.step_name} #{step.attempt} paused the run"


def pause_run(run: WorkflowRun, at: datetime, *, actor: Any = None, step: Step | None = None, reason: str = "") -> None:
    reason = jsonvalue.storable(reason)
    run.status = RunStatus.PAUSED
    run.paused_reason = reason[:2000]
    run.updated_at = at
    run.save(update_fields=["status", "paused_reason", "updated_at"])
    event(run, EventKind.PAUSED, step=step, at=at, actor=actor, **({"reason": reason[:500]} if reason else {}))


def cancel_run(
    run: WorkflowRun, at: datetime, *, actor: Any = None, step: Step | None = None, reason: str = ""
) -> None:
    reason = jsonvalue.storable(reason)
    run.status = RunStatus.CANCELLED
    run.finished_at = at
    run.updated_at = at
    run.paused_reason = ""
    run.save(update_fields=["status", "finished_at", "updated_at", "paused_reason"])
    event(run, EventKind.CANCELLED, step=step, at=at, actor=actor, **({"reason": reason} if reason else {}))
    from . import children  # cycle: children -> batches -> leases -> here

    if run.parent_id is not None:
        children.child_ended(run, at=at, reason=reason)
    children.parent_cancelled(run)


def park(run: WorkflowRun, step: Step, *, at: datetime, deadline: float | None = None, batch_id: Any = None) -> None:
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
