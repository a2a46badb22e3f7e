"""Signals: the durable mailbox that steps declared with ``wait_for=`` read from.

A signal is stored under the run's lock, so it either lands before a step parks (and the
step finds it when it comes due) or after (and it wakes the parked step): never lost, never
consumed twice, consumed in arrival order. This module validates what a caller sends and
selects the stale waits for the sweep; the writes are ``pgflow.store.mailbox``'s.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import store
from .conf import pgflow_settings
from .core import jsonvalue
from .core.states import StepStatus
from .exceptions import InputTooLarge, WorkflowNotFound
from .models import Signal, Step, WorkflowRun
from .registry import resolve

if TYPE_CHECKING:
    pass

NAME_LIMIT = 200


def signal(run_or_id: WorkflowRun | int, name: str, payload: Any = None, *, actor: Any = None) -> Signal:
    """Deliver the signal ``name`` to a run; wakes its step if that step waits for it.

    Raises ``WorkflowRun.DoesNotExist`` for an unknown run, ``InvalidTransition`` for a
    finished or cancelled run, ``TypeError`` for a payload that is not JSON-serialisable,
    ``ValueError`` for a name or payload PostgreSQL cannot store, ``InputTooLarge`` past
    ``MAX_INPUT_BYTES`` (nothing is stored then). A paused run keeps the signal for when it resumes.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_LIMIT or jsonvalue.text_problem(name):
        raise ValueError(
            f"a signal name must be a non-empty string of at most {NAME_LIMIT} characters "
            f"(no NUL, no lone surrogate), got {name!r}"
        )
    size = len(jsonvalue.encode(payload, "signal payload").encode())
    limit = pgflow_settings.MAX_INPUT_BYTES
    if size > limit:
        raise InputTooLarge(
            f"signal payload is {size} bytes as JSON; the limit is {limit} "
            f"(PGFLOW['MAX_INPUT_BYTES'], which bounds inputs and signal payloads alike)"
        )
    run_id = run_or_id.pk if isinstance(run_or_id, WorkflowRun) else run_or_id
    return store.deliver(run_id, name, payload, size=size, actor=actor)


def repair_waits(*, at: datetime, limit: int = 500) -> int:
    """Wake signal waits whose step no longer waits for a signal (the sweep calls this).

    Reads each (class, step) pair of the waiting attempts once, so the cost follows the
    number of distinct waiting steps, not of waiting runs.
    """
    pairs = (
        Step.objects.live()
        .filter(status=StepStatus.WAITING, batch__isnull=True)
        .values_list("run__workflow_class", "step_name")
        .distinct()
    )
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
        ids = (
            Step.objects.live()
            .filter(
                status=StepStatus.WAITING, batch__isnull=True, step_name=step_name, run__workflow_class=workflow_class
            )
            .values_list("pk", "run_id")[:limit]
        )
        for step_id, run_id in list(ids):
            woken += store.wake_stale(run_id, step_id, at=at)
    return woken
