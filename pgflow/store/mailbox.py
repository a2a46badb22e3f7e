"""The mailbox: storing a signal, taking it for the attempt that waits for it, waking a wait, and a
wait's deadline. Each under the run's lock, so a signal lands either before a step parks (and the
step takes it when it comes due) or after (and wakes the parked step): never lost, never taken
twice, taken in arrival order.

``pgflow.signals`` validates what a caller sends and the sweep selects the waits to repair; the
writes are here.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import observability
from ..core.events import EventKind
from ..core.flow import CANCEL, PAUSE, SKIP, Outcome
from ..core.states import TERMINAL_RUN, StepStatus
from ..exceptions import InvalidTransition, WorkflowNotFound
from ..models import Signal, Step, WorkflowRun
from .locking import event, locked, now, open_attempt
from .transitions import apply, wake

if TYPE_CHECKING:
    from ..core.definitions import StepDefinition


def deliver(run_id: int, name: str, payload: Any, *, size: int, actor: Any = None) -> Signal:
    """Store the signal ``name`` for a run and wake its step if that step waits for it.

    Raises ``WorkflowRun.DoesNotExist`` for an unknown run, ``InvalidTransition`` for a
    finished or cancelled one. ``size`` (bytes of the payload as JSON) goes in the audit trail.
    """
    at = now()
    with locked(run_id) as run:
        if run.status in TERMINAL_RUN:
            raise InvalidTransition(f"run {run.pk} is {run.status}: it takes no more signals")
        received = Signal.objects.create(run=run, name=name, payload=payload, received_at=at)
        event(run, EventKind.SIGNAL_RECEIVED, actor=actor, at=at, name=name, payload_bytes=size)
        observability.signal_sent(run, name)
        step = open_attempt(run)
        if step is not None and step.status == StepStatus.WAITING and step.batch_id is None:
            waits_for = _waits_for(run, step)
            if waits_for == name:
                wake(step, at=at)
            elif waits_for is None:
                _wake_stale(run, step, at=at)
    return received


def _waits_for(run: WorkflowRun, step: Step) -> str | None:
    """The signal name the waiting attempt's step waits for now; None when it waits for none
    any more (its definition changed or is gone), "" when the class cannot be loaded."""
    try:
        definition = run.workflow().steps().get(step.step_name)
    except WorkflowNotFound:
        return ""  # nothing to decide until the class is back; the run page shows why
    return definition.wait_for if definition else None


def _wake_stale(run: WorkflowRun, step: Step, *, at: datetime) -> None:
    """A signal wait whose definition no longer waits: due now, where ``prepare`` runs it as
    the step it is now (or skips / pauses on a removed or unknown step), said in the audit trail."""
    event(
        run,
        EventKind.DEFINITION_CHANGED,
        step=step,
        at=at,
        step_name=step.step_name,
        change="the step no longer waits for a signal: its waiting attempt runs now",
    )
    wake(step, at=at)


def wake_stale(run_id: int, step_id: int, *, at: datetime) -> bool:
    """Wake one signal wait whose step no longer waits for a signal; False when it moved on since."""
    with locked(run_id) as run:
        step = Step.objects.live().select_for_update().filter(pk=step_id, status=StepStatus.WAITING).first()
        if step is None or _waits_for(run, step) is not None:
            return False
        _wake_stale(run, step, at=at)
    return True


def take_signal(run: WorkflowRun, step: Step, definition: StepDefinition, *, at: datetime) -> Signal | None:
    """The signal this attempt runs with: one carried over from an earlier attempt of the
    step, else the oldest pending one of its name, consumed now. Under the run lock."""
    if step.signal_id is not None:
        return Signal.objects.get(pk=step.signal_id)
    pending = (
        Signal.objects.select_for_update()
        .filter(run=run, name=definition.wait_for, consumed_at__isnull=True)
        .order_by("received_at", "id")
        .first()
    )
    if pending is None:
        return None
    pending.consumed_at = at
    pending.consumed_by = step
    pending.save(update_fields=["consumed_at", "consumed_by"])
    step.signal = pending
    step.save(update_fields=["signal"])
    return pending


_TIMEOUT_OUTCOMES = {"pause": PAUSE, "cancel": CANCEL, "skip": SKIP}


def time_out(step_id: int, *, at: datetime) -> bool:
    """Apply ``on_timeout`` to a signal wait past its deadline (the sweep calls this)."""
    run_id = Step.objects.live().filter(pk=step_id).values_list("run_id", flat=True).first()
    if run_id is None:
        return False
    with locked(run_id) as run:
        step = (
            Step.objects.live()
            .select_for_update()
            .filter(pk=step_id, status=StepStatus.WAITING, deadline_at__lte=at, batch__isnull=True)
            .first()
        )
        if step is None:
            return False  # woken or ended since the sweep looked
        try:
            definition = run.workflow().steps().get(step.step_name)
        except WorkflowNotFound:
            definition = None
        action = definition.on_timeout if definition else "pause"
        name = definition.wait_for if definition else "?"
        reason = (
            f"step {step.step_name} waited for signal {name!r} past its deadline "
            f"({step.deadline_at:%Y-%m-%d %H:%M:%S %Z})"
        )
        event(run, EventKind.TIMED_OUT, step=step, at=at, signal=name, action=action)
        apply(run, step, Outcome(kind=_TIMEOUT_OUTCOMES[action]), at=at, reason=reason)
    return True
