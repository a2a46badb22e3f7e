"""Operator controls: pause, resume, cancel and skip a run's step, each checked against
``core.states.CONTROLS`` and recorded with its actor."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..core.events import EventKind
from ..core.states import RunStatus, StepStatus, control_error
from ..exceptions import InvalidTransition, StepNotFound
from ..models import Step, WorkflowRun
from .locking import actor_name, event, locked, now, open_attempt
from .scheduling import (
    advance,
    after_removed,
    definition_changed,
    delay_of,
    finish_run,
    missing_step_message,
    next_by_history,
    outputs_of,
    schedule_attempt,
)
from .transitions import cancel_run, close_attempt, pause_run

if TYPE_CHECKING:
    from ..core.definitions import StepDefinition
    from ..workflow import Workflow

logger = logging.getLogger("pgflow")


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
            close_attempt(step, status=StepStatus.CANCELLED, outcome="paused", at=at)
        pause_run(run, at, actor=actor, step=step, reason=f"paused by {actor_name(actor)}")
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
            if definition is not None and definition_changed(run, workflow) and _passed_over(run, workflow, definition):
                definition = next_by_history(run, workflow, None, at=at)
                if definition is None:
                    finish_run(run, at, reason="every step of the changed definition has run")
                    return _refresh(into, run)
            if definition is None:
                _resume_missing(run, workflow, at=at)
            else:
                last = (
                    Step.objects.live()
                    .filter(run=run, step_name=definition.name)
                    .order_by("-created_at", "-id")
                    .first()
                )
                # A step the run never reached (it was paused as the step before ended) still
                # owes its wait, counted from now; a fresh attempt of a tried step is due now.
                delay = None if last else delay_of(workflow, run, definition, at, lambda: outputs_of(run))
                schedule_attempt(
                    run, workflow, definition, at=at, delay=delay, signal_id=last.signal_id if last else None
                )
                run.save(update_fields=["current_step", "updated_at"])
    return _refresh(into, run)


def _passed_over(run: WorkflowRun, workflow: type[Workflow], definition: StepDefinition) -> bool:
    """Whether a step before ``definition`` in the current list never completed or was skipped in this run."""
    before = [d.name for d in workflow.steps()][: workflow.steps().index(definition.name) or 0]
    done = set(
        Step.objects.live()
        .filter(run=run, status__in=[StepStatus.COMPLETED, StepStatus.SKIPPED], step_name__in=before)
        .values_list("step_name", flat=True)
    )
    return len(done) < len(before)


def _unpause(run: WorkflowRun, at: datetime, *, actor: Any) -> None:
    run.status = RunStatus.RUNNING
    run.paused_reason = ""
    run.updated_at = at
    run.save(update_fields=["status", "paused_reason", "updated_at"])
    event(run, EventKind.RESUMED, at=at, actor=actor)


def _resume_missing(run: WorkflowRun, workflow: type[Workflow], *, at: datetime) -> None:
    name = run.current_step or ""
    steps = workflow.steps()
    if name in steps.removed or not name:
        nxt = after_removed(run, steps)
        if nxt is None:
            finish_run(run, at)
            return
        schedule_attempt(run, workflow, nxt, at=at)
        run.save(update_fields=["current_step", "updated_at"])
        return
    raise StepNotFound(missing_step_message(run, name))


def cancel(run_id: int, *, actor: Any = None, into: WorkflowRun | None = None) -> WorkflowRun:
    """Cancel a running or paused run; its open attempt (even one in progress) closes now,
    so a body still running applies nothing when it returns."""
    with locked(run_id) as run:
        at = now()  # once the lock is held: after any claim that committed first
        _check(run, "cancel")
        step = open_attempt(run)
        if step is not None:
            close_attempt(step, status=StepStatus.CANCELLED, outcome="cancelled", at=at)
        cancel_run(run, at, actor=actor, step=step, reason=f"cancelled by {actor_name(actor)}")
    return _refresh(into, run)


def skip_step(
    run_id: int, *, actor: Any = None, step: str | None = None, into: WorkflowRun | None = None
) -> WorkflowRun:
    """Skip the run's current step and move on; a paused run resumes with the next step.
    ``step``: the step the caller means to skip; refused if the run is at another by now."""
    with locked(run_id) as run:
        at = now()  # once the lock is held: after any claim that committed first
        _check(run, "skip_step")
        if step is not None and run.current_step != step:
            # The page or the dry run the operator acted on is out of date, or this is a repeat.
            raise InvalidTransition(
                f"run {run.pk}: its current step is {run.current_step!r}, not {step!r}; nothing was skipped"
            )
        if run.status == RunStatus.PAUSED:
            _unpause(run, at, actor=actor)
        attempt = open_attempt(run)
        name = run.current_step
        if attempt is not None:
            close_attempt(attempt, status=StepStatus.SKIPPED, outcome="skipped", at=at)
        event(
            run,
            EventKind.SKIPPED,
            step=attempt,
            at=at,
            actor=actor,
            reason=f"skipped by {actor_name(actor)}",
            step_name=name,
        )
        if name is None:
            finish_run(run, at)
        else:
            advance(run, name, at=at)
    return _refresh(into, run)
