"""Running a run's steps in the test's own process.

    run = Onboarding.start(subject=user, input={"plan": "pro"})
    run = run_workflow(run, signals={"payment_received": {"amount": 10}})
    assert run.status == "finished"

The same engine code a worker runs (prepare, body, policies, transitions) runs here, so a
test sees what production would.
"""

from __future__ import annotations

import traceback
from typing import Any

from .. import schedules, store
from ..core.states import RunStatus, StepStatus
from ..fanout import djangotasks, member_finished, member_function, resolve_step
from ..fanout.builder import MEMBER_OPTIONS, TASK_KEY
from ..models import BatchMember, Schedule, Step, WorkflowRun
from ..runtime.runner import Runner
from ..signals import signal
from ..workflow import Workflow

MAX_ATTEMPTS = 1000  # a run that needs more in one call is looping: stop and return it


def run_workflow(
    run: WorkflowRun | int,
    *,
    skip_waits: bool = True,
    signals: dict[str, Any] | None = None,
) -> WorkflowRun:
    """Run ``run``'s steps here until it is finished, cancelled, paused, or waiting on a signal
    not given in ``signals`` (``{name: payload}``; a list of payloads delivers one per wait).
    With ``skip_waits`` a delayed step runs at once. Fan-out members run inline. Returns the
    refreshed run."""
    run_id = run.pk if isinstance(run, WorkflowRun) else run
    pending = {name: list(value) if isinstance(value, list) else [value] for name, value in (signals or {}).items()}
    runner = Runner()
    for _ in range(MAX_ATTEMPTS):
        current = WorkflowRun.objects.get(pk=run_id)
        if current.status != RunStatus.RUNNING:
            break
        step = Step.objects.filter(run_id=run_id, status__in=["scheduled", "waiting", "in_progress"]).first()
        if step is None:
            break
        if step.status == StepStatus.WAITING:
            if not _deliver(current, step, pending, skip_waits=skip_waits):
                break
            continue
        if step.status == StepStatus.IN_PROGRESS:
            break  # a worker elsewhere holds it
        if step.scheduled_at > store.now() and not skip_waits:
            break
        held = store.claim_step(step.pk, worker=store.TESTING_WORKER)
        if held is not None:
            runner.execute(held)
    return WorkflowRun.objects.get(pk=run_id)


def _deliver(run: WorkflowRun, step: Step, pending: dict[str, list[Any]], *, skip_waits: bool) -> bool:
    """Move a waiting step on: its batch's members inline, or a signal from ``pending``."""
    if step.batch_id is not None:
        return run_inline(step, skip_waits=skip_waits)
    definition = run.workflow().steps().get(step.step_name)
    name = definition.wait_for if definition else None
    if not name or not pending.get(name):
        return False
    signal(run, name, pending[name].pop(0), actor=store.TESTING_WORKER)
    return True


def run_inline(step: Step, *, skip_waits: bool = True) -> bool:
    """Run a waiting step's pending members here, in order, then resolve the step (for
    :func:`run_workflow`; a child run's delays are skipped with ``skip_waits``). Returns True
    when the step moved on."""
    if step.batch_id is not None:
        pending = BatchMember.objects.filter(batch_id=step.batch_id, status=BatchMember.Status.PENDING)
        for member in pending.order_by("position"):
            if member.child_id is not None:
                # Its end counts the member (a paused child keeps it pending).
                run_workflow(member.child_id, skip_waits=skip_waits)
                continue
            succeeded, error = _call(member)
            member_finished(member.batch_id, member.position, succeeded=succeeded, error=error)
    if Step.objects.filter(pk=step.pk, status=StepStatus.WAITING).exists():
        resolve_step(step.pk)  # finished before (its resolution lost) or its batch vanished
    return not Step.objects.filter(pk=step.pk, status=StepStatus.WAITING).exists()


def _call(member: BatchMember) -> tuple[bool, str | None]:
    kwargs = {k: v for k, v in member.kwargs.items() if k not in MEMBER_OPTIONS}
    try:
        if TASK_KEY in member.kwargs:  # a task of another django.tasks backend
            djangotasks.call_inline(member)
        else:
            member_function(member.func)(*member.args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a member's failure is its result
        # The shape django-q2 saves a failure in: "message : traceback".
        return False, f"{exc} : {traceback.format_exc()}"
    return True, None


def fire_schedule(schedule: Any, name: str | None = None) -> WorkflowRun | None:
    """Fire a schedule's next tick now, without waiting for it: what a worker does when the
    tick comes due (overlap policy included). ``schedule`` is a ``Schedule`` row or its id,
    or a workflow class with the ``name`` of one of its declared schedules (synced first).
    Returns the run started, or None when the overlap policy started none."""
    if isinstance(schedule, type) and issubclass(schedule, Workflow):
        if name is None:
            raise TypeError("fire_schedule(WorkflowClass, name): name the schedule to fire")
        schedules.sync()
        row = Schedule.objects.get(workflow_class=schedule.workflow_path(), name=name)
    else:
        row = Schedule.objects.get(pk=schedule.pk if isinstance(schedule, Schedule) else schedule)
    if row.next_tick_at is None:
        raise ValueError(f"schedule {row} has no next tick (disabled: {row.disabled_reason or 'no'})")
    started = schedules.fire(row.pk, now=row.next_tick_at)
    return started[-1] if started else None
