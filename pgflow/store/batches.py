"""Batches: opening a fan-out's batch with its members, counting each member once, and resolving
the step that waits on the batch, under the run's lock.

``pgflow.fanout`` records the members, hands them to django-q2 and selects the repairs; the
writes are here.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.db.models import F

from .. import db
from ..conf import pgflow_settings
from ..core import errors as error_capture
from ..core.events import EventKind
from ..core.flow import COMPLETE, PAUSE, Outcome
from ..core.states import RunStatus, StepStatus
from ..exceptions import FanOutFailed, WorkflowNotFound
from ..models import Batch, BatchMember, Event, Step, WorkflowRun
from .claims import Claim
from .leases import held_attempt, log_ignored
from .locking import TESTING_WORKER, event, locked, now
from .starting import start_run
from .transitions import apply, close_attempt, park

logger = logging.getLogger("pgflow")

ERROR_LIMIT = 10_000  # characters of a member's error kept
SAMPLE_FAILURES = 5  # failed members named in the fan_out_finished event


def open_batch(
    held: Claim,
    members: Sequence[Any],
    *,
    at: datetime | None = None,
    output: Any = None,
    enqueue: Callable[[uuid.UUID], Any],
    enqueue_now: Callable[[uuid.UUID], bool] | None = None,
) -> tuple[str, bool]:
    """One transaction: the batch, its members (each with ``func``, ``args``, ``kwargs``, and
    ``workflow`` set for a child run), the step parked on it with the body's ``output``,
    ``fan_out_opened``, the child runs started; when there are tasks, ``enqueue_now(batch_id)``
    hands out those enqueued in this transaction (True when that finished the batch: every one
    refused) and ``enqueue(batch_id)`` runs after the commit. Returns ``(outcome word, applied)``."""
    at = at or now()
    with locked(held.run_id) as run:
        step = held_attempt(run, held)
        if step is None:
            log_ignored(
                held,
                "it was ended elsewhere before its batch opened (timed out, lease taken "
                "over, or an operator acted); no batch was opened",
            )
            return "ignored", False
        if run.status != RunStatus.RUNNING:
            # Paused while the body ran: hand no task out. resume() runs the body again.
            close_attempt(step, status=StepStatus.CANCELLED, outcome="paused", at=at)
            return "paused", True
        batch = Batch.objects.create(
            run=run,
            step=step,
            total=len(members),
            created_at=at,
            description=f"{run.workflow_class}#{step.step_name} run {run.pk}"[:400],
            properties={"run_id": run.pk, "step_id": step.pk, "step_name": step.step_name, "attempt": step.attempt},
        )
        rows = BatchMember.objects.bulk_create(
            BatchMember(batch=batch, position=position, func=m.func, args=list(m.args), kwargs=dict(m.kwargs))
            for position, m in enumerate(members)
        )
        park(run, step, at=at, batch_id=batch.pk)
        if output is not None:
            # What the body returned is the step's output, kept on the row until the batch
            # resolves; the batch's counts stay on the batch and in fan_out_finished.
            step.output = output
            step.save(update_fields=["output"])
        children = [(row, m) for row, m in zip(rows, members, strict=True) if getattr(m, "workflow", None)]
        event(
            run,
            EventKind.FAN_OUT_OPENED,
            step=step,
            at=at,
            batch_id=str(batch.pk),
            size=len(members),
            **({"children": len(children)} if children else {}),
        )
        if children and _start_children(run, step, batch, children, at=at):
            return "completed", True
        if not members:
            # Nothing to wait for: the batch finishes now and the step completes in this transaction.
            batch.status, batch.finished_at = Batch.Status.FINISHED, at
            batch.save(update_fields=["status", "finished_at"])
            _resolve(run, step, batch, at=at)
            return "completed", True
        tasks = len(members) > len(children)
        if tasks and step.worker != TESTING_WORKER:  # pgflow.testing runs the members inline
            if enqueue_now is not None and enqueue_now(batch.pk):
                batch.refresh_from_db()
                _resolve(run, step, batch, at=at)
                return "completed", True
            db.on_commit(functools.partial(enqueue, batch.pk), robust=True)
    return "parked", True


def _start_children(
    run: WorkflowRun, step: Step, batch: Batch, children: list[tuple[BatchMember, Any]], *, at: datetime
) -> bool:
    """Start each child run (``batch.add_run``) and link its member; under the parent's lock.
    A ``key=`` naming a run that exists already links that run; one already ended counts at
    once. Returns True when that finished the batch (its step resolved here)."""
    finished = False
    for row, member in children:
        child = start_run(
            member.workflow,
            subject=getattr(member, "subject", None),
            input=member.kwargs.get("input"),
            key=member.kwargs.get("key"),
            parent=run,
        )
        if child.parent_id is None:
            # An existing keyed run (not a child of any run yet) becomes this run's child. Never
            # wait for its lock: the lock order is child, then parent (see pgflow.store.children).
            existing = WorkflowRun.objects.select_for_update(skip_locked=True).filter(pk=child.pk).first()
            if existing is not None and existing.parent_id is None:
                existing.parent = run
                existing.save(update_fields=["parent"])
        row.child = child
        row.save(update_fields=["child"])
        status = WorkflowRun.objects.filter(pk=child.pk).values_list("status", flat=True).first()
        if status in (RunStatus.FINISHED, RunStatus.CANCELLED):  # ended already (no steps, or an existing run)
            _, won = count_member(
                batch.pk,
                row.position,
                succeeded=status == RunStatus.FINISHED,
                error=None if status == RunStatus.FINISHED else f"child run #{child.pk} was cancelled",
                at=at,
            )
            finished = finished or won is not None
    if finished:
        batch.refresh_from_db()
        _resolve(run, step, batch, at=at)
    return finished


def mark_enqueued(member_id: int, task_id: str) -> None:
    """A member was handed to django-q2 as the task ``task_id``."""
    BatchMember.objects.filter(pk=member_id).update(task_id=task_id, enqueued_at=now())


def skip_member(batch_id: uuid.UUID, position: int) -> None:
    """A member whose step no longer waits on its batch never runs: counted as skipped. Its row
    leaves `pending` here, so the hook reporting the task's result counts nothing."""
    BatchMember.objects.filter(batch_id=batch_id, position=position, status=BatchMember.Status.PENDING).update(
        status=BatchMember.Status.SKIPPED, finished_at=now(), error=None
    )


def count_member(
    batch_id: uuid.UUID,
    position: int,
    *,
    succeeded: bool,
    error: str | None = None,
    task_id: str | None = None,
    at: datetime,
) -> tuple[bool, int | None]:
    """Count one member's final result. Returns ``(counted, step_id)``: ``counted`` is False for a
    member counted already or gone with its batch; ``step_id`` is the waiting step when this
    member finished the batch (the caller resolves it, in a transaction of its own)."""
    with db.atomic():
        changes: dict[str, Any] = {
            "status": BatchMember.Status.SUCCEEDED if succeeded else BatchMember.Status.FAILED,
            "finished_at": at,
            "error": None if succeeded else (error or "failed")[:ERROR_LIMIT],
        }
        if task_id:
            changes["task_id"] = task_id
        # The member's row leaves `pending` once: a second report of it (a redelivered task,
        # the sweep racing the hook) updates nothing.
        counted = BatchMember.objects.filter(
            batch_id=batch_id, position=position, status=BatchMember.Status.PENDING
        ).update(**changes)
        if not counted:
            return False, None
        column = "succeeded" if succeeded else "failed"
        Batch.objects.filter(pk=batch_id).update(**{column: F(column) + 1})
        # Single winner: the conditional UPDATE holds the batch row's lock until commit, so of two
        # members finishing together the second sees `finished` and updates nothing.
        won = Batch.objects.filter(
            pk=batch_id, status=Batch.Status.OPEN, succeeded__gte=F("total") - F("failed")
        ).update(status=Batch.Status.FINISHED, finished_at=at)
        step_id = Batch.objects.filter(pk=batch_id).values_list("step_id", flat=True).first() if won else None
    return True, step_id


def resolve_batch_step(step_id: int, *, at: datetime | None = None) -> bool:
    """Under the run's lock, move a step waiting on a finished (or vanished) batch on.
    Returns True when it resolved the step; a step no longer waiting is left alone (logged)."""
    at = at or now()
    run_id = Step.objects.live().filter(pk=step_id).values_list("run_id", flat=True).first()
    if run_id is None:
        return _late(step_id, "the step no longer exists (its run was deleted)")
    try:
        with locked(run_id) as run:
            step = Step.objects.live().select_for_update().filter(pk=step_id).first()
            if step is None or step.status != StepStatus.WAITING:
                return _late(step_id, f"the step is {step.status if step else 'gone'}, not waiting on its batch")
            if step.batch_id is None:
                opened = _opened_batch_id(step)
                if opened is None:
                    return _late(step_id, "the step waits on a signal, not on a batch")
                _resolve_vanished(run, step, opened, at=at)
                return True
            batch = Batch.objects.filter(pk=step.batch_id).first()
            if batch is None:
                _resolve_vanished(run, step, str(step.batch_id), at=at)
                return True
            if batch.status != Batch.Status.FINISHED:
                return _late(step_id, f"its batch {batch.pk} has not finished")
            _resolve(run, step, batch, at=at)
    except WorkflowRun.DoesNotExist:
        return _late(step_id, "its run no longer exists")
    return True


def _late(step_id: int, why: str) -> bool:
    logger.info(
        "fan_out: batch result for step %s not applied: %s",
        step_id,
        why,
        extra={"action": "fan_out_result_ignored", "step_id": step_id},
    )
    return False


def _resolve(run: WorkflowRun, step: Step, batch: Batch, *, at: datetime) -> None:
    failures = [
        {"position": m["position"], "func": m["func"], "error": _first_line(m["error"])}
        for m in batch.members.filter(status=BatchMember.Status.FAILED)
        .order_by("position")
        .values("position", "func", "error")[:SAMPLE_FAILURES]
    ]
    event(
        run,
        EventKind.FAN_OUT_FINISHED,
        step=step,
        at=at,
        batch_id=str(batch.pk),
        total=batch.total,
        succeeded=batch.succeeded,
        failed=batch.failed,
        **({"failures": failures} if failures else {}),
    )
    if not batch.failed:
        apply(run, step, Outcome(kind=COMPLETE), at=at)  # the output parked with the step stays
        return
    error = FanOutFailed(f"{batch.failed} of {batch.total} jobs failed (batch {batch.pk})")
    action = _on_batch_failure(run, step)
    reason = "" if action == PAUSE else f"{error}; on_batch_failure={action!r}"
    apply(
        run,
        step,
        Outcome.for_action(action),
        at=at,
        reason=reason,
        error=error_capture.capture(error, **pgflow_settings.capture_options()),
    )


def _resolve_vanished(run: WorkflowRun, step: Step, batch_id: str, *, at: datetime) -> None:
    # With its batch row gone nobody can tell how the tasks ended: pause whatever
    # on_batch_failure says, for a person to resume (a fresh batch) or skip.
    event(run, EventKind.FAN_OUT_FINISHED, step=step, at=at, batch_id=batch_id, vanished=True)
    error = FanOutFailed(
        f"batch {batch_id} no longer exists (deleted before the step resolved); its outcome is unknown"
    )
    apply(
        run, step, Outcome(kind=PAUSE), at=at, error=error_capture.capture(error, **pgflow_settings.capture_options())
    )


def _on_batch_failure(run: WorkflowRun, step: Step) -> str:
    try:
        definition = run.workflow().steps().get(step.step_name)
    except WorkflowNotFound:
        definition = None
    return getattr(definition, "on_batch_failure", None) or PAUSE


def _opened_batch_id(step: Step) -> str | None:
    """The batch a fan_out attempt opened, from its audit trail (the step's FK is nulled when
    the batch row is deleted)."""
    details = (
        Event.objects.live()
        .filter(step=step, event=EventKind.FAN_OUT_OPENED)
        .order_by("-id")
        .values_list("details", flat=True)
        .first()
    )
    return str(details.get("batch_id")) if isinstance(details, dict) else None


def _first_line(error: str | None) -> str:
    text = (error or "").split(" : Traceback", 1)[0].strip()
    return text.splitlines()[0][:300] if text else ""
