"""Signals: the durable mailbox that steps declared with ``wait_for=`` read from.

A signal is stored under the run's lock, so it either lands before a step parks (and the
step finds it when it comes due) or after (and it wakes the parked step): never lost, never
consumed twice, consumed in arrival order.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import observability, store
from .conf import pgflow_settings
from .core import jsonvalue
from .core.flow import CANCEL, PAUSE, SKIP, Outcome
from .core.states import TERMINAL_RUN, StepStatus
from .exceptions import InputTooLarge, InvalidTransition, WorkflowNotFound
from .models import Signal, Step, WorkflowRun
from .registry import resolve

if TYPE_CHECKING:
    from .core.definitions import StepDefinition

NAME_LIMIT = 200


def signal(run_or_id: WorkflowRun | int, name: str, payload: Any = None, *, actor: Any = None) -> Signal:
    """Deliver the signal ``name`` to a run; wakes its step if that step waits for it.

    Raises ``WorkflowRun.DoesNotExist`` for an unknown run, ``InvalidTransition`` for a
    finished or cancelled run, ``TypeError`` for a payload that is not JSON-serialisable,
    ``ValueError`` for a name or payload PostgreSQL cannot store, ``InputTooLarge`` past
    ``MAX_INPUT_BYTES`` (nothing is stored then). A paused run keeps the signal for when it resumes.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_LIMIT or jsonvalue.text_problem(name):
        raise ValueError(f"a signal name must be a non-empty string of at most {NAME_LIMIT} characters "
                         f"(no NUL, no lone surrogate), got {name!r}")
    size = len(jsonvalue.encode(payload, "signal payload").encode())
    limit = pgflow_settings.MAX_INPUT_BYTES
    if size > limit:
        raise InputTooLarge(f"signal payload is {size} bytes as JSON; the limit is {limit} "
                            f"(PGFLOW['MAX_INPUT_BYTES'], which bounds inputs and signal payloads alike)")
    run_id = run_or_id.pk if isinstance(run_or_id, WorkflowRun) else run_or_id
    at = store.now()
    with store.locked(run_id) as run:
        if run.status in TERMINAL_RUN:
            raise InvalidTransition(f"run {run.pk} is {run.status}: it takes no more signals")
        received = Signal.objects.create(run=run, name=name, payload=payload, received_at=at)
        store.event(run, "signal_received", actor=actor, at=at, name=name, payload_bytes=size)
        observability.signal_sent(run, name)
        step = store.open_attempt(run)
        if step is not None and step.status == StepStatus.WAITING and step.batch_id is None:
            waits_for = _waits_for(run, step)
            if waits_for == name:
                store.wake(step, at=at)
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
    store.event(run, "definition_changed", step=step, at=at, step_name=step.step_name,
                change="the step no longer waits for a signal: its waiting attempt runs now")
    store.wake(step, at=at)


def repair_waits(*, at: datetime, limit: int = 500) -> int:
    """Wake signal waits whose step no longer waits for a signal (the sweep calls this).

    Reads each (class, step) pair of the waiting attempts once, so the cost follows the
    number of distinct waiting steps, not of waiting runs.
    """
    pairs = (Step.objects.filter(status=StepStatus.WAITING, batch__isnull=True)
             .values_list("run__workflow_class", "step_name").distinct())
    stale = []
    for workflow_class, step_name in pairs:
        try:
            definition = resolve(workflow_class).steps().get(step_name)
        except WorkflowNotFound:
            continue
        if definition is None or not definition.wait_for:
            stale.append((workflow_class, step_name))
    woken = 0
    for workflow_class, step_name in stale:
        ids = (Step.objects.filter(status=StepStatus.WAITING, batch__isnull=True, step_name=step_name,
                                   run__workflow_class=workflow_class).values_list("pk", "run_id")[:limit])
        for step_id, run_id in list(ids):
            with store.locked(run_id) as run:
                step = Step.objects.select_for_update().filter(pk=step_id, status=StepStatus.WAITING).first()
                if step is not None and _waits_for(run, step) is None:
                    _wake_stale(run, step, at=at)
                    woken += 1
    return woken


def take_signal(run: WorkflowRun, step: Step, definition: StepDefinition, *, at: datetime) -> Signal | None:
    """The signal this attempt runs with: one carried over from an earlier attempt of the
    step, else the oldest pending one of its name, consumed now. Under the run lock."""
    if step.signal_id is not None:
        return Signal.objects.get(pk=step.signal_id)
    pending = (Signal.objects.select_for_update()
               .filter(run=run, name=definition.wait_for, consumed_at__isnull=True)
               .order_by("received_at", "id").first())
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
    run_id = Step.objects.filter(pk=step_id).values_list("run_id", flat=True).first()
    if run_id is None:
        return False
    with store.locked(run_id) as run:
        step = Step.objects.select_for_update().filter(
            pk=step_id, status=StepStatus.WAITING, deadline_at__lte=at, batch__isnull=True).first()
        if step is None:
            return False  # woken or ended since the sweep looked
        try:
            definition = run.workflow().steps().get(step.step_name)
        except WorkflowNotFound:
            definition = None
        action = definition.on_timeout if definition else "pause"
        name = definition.wait_for if definition else "?"
        reason = (f"step {step.step_name} waited for signal {name!r} past its deadline "
                  f"({step.deadline_at:%Y-%m-%d %H:%M:%S %Z})")
        store.event(run, "timed_out", step=step, at=at, signal=name, action=action)
        store.apply(run, step, Outcome(kind=_TIMEOUT_OUTCOMES[action]), at=at, reason=reason)
    return True
