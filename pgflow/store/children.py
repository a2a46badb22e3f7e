"""Child runs: a fan_out's members started with ``batch.add_run`` (see ``batches.open_batch``).

A child counts as its member once it ends: succeeded when it finishes, failed when it is
cancelled (a paused child keeps the batch open). That happens in the child's own finishing
transaction, so the member is counted exactly once, and the child that finishes the batch
resolves the parent's step there, under the parent's lock.

Lock order: **child, then parent**. A transaction may hold a child's lock and take its
parent's (the child ended); it never holds a parent's lock while waiting for a child's.
So cancelling a parent cancels its children after the parent's transaction commits, each
in a transaction of its own, and a parent opening a batch with an existing keyed run never
waits for that run's lock (``skip_locked``). A crash between the two leaves open children
of a cancelled parent, or a child that ended without its member counted: the sweep's
``repair_children`` finishes both.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from .. import db
from ..core.states import OPEN_RUN, RunStatus
from ..exceptions import InvalidTransition, WorkflowNotFound
from ..models import BatchMember, WorkflowRun
from .batches import count_member, resolve_batch_step
from .controls import cancel
from .locking import locked

logger = logging.getLogger("pgflow")

CANCEL = "cancel"
ABANDON = "abandon"
ON_PARENT_CANCEL = (CANCEL, ABANDON)
REPAIR_LIMIT = 100


def child_ended(run: WorkflowRun, *, at: datetime, reason: str = "") -> None:
    """Count the member(s) ``run`` stands for; under ``run``'s lock, as its status became final."""
    succeeded = run.status == RunStatus.FINISHED
    error = None if succeeded else f"child run #{run.pk} was cancelled" + (f": {reason}" if reason else "")
    members = BatchMember.objects.filter(child_id=run.pk, status=BatchMember.Status.PENDING)
    for batch_id, position in members.values_list("batch_id", "position"):
        counted, step_id = count_member(batch_id, position, succeeded=succeeded, error=error, at=at)
        if step_id is not None:
            resolve_batch_step(step_id, at=at)  # takes the parent's lock: child, then parent


def parent_cancelled(run: WorkflowRun) -> None:
    """``run`` is being cancelled: once that commits, cancel its open children."""
    if WorkflowRun.objects.filter(parent_id=run.pk, status__in=list(OPEN_RUN)).exists():
        db.on_commit(lambda: cancel_children(run.pk), robust=True)


def cancel_children(parent_id: int) -> int:
    """Cancel the open children of a cancelled parent, each in its own transaction, unless the
    parent's class or the child's says ``on_parent_cancel = "abandon"``. Returns how many."""
    parent = WorkflowRun.objects.filter(pk=parent_id).first()
    if parent is None or parent.status != RunStatus.CANCELLED or _abandons(parent):
        return 0
    done = 0
    for child in WorkflowRun.objects.filter(parent_id=parent_id, status__in=list(OPEN_RUN)).order_by("id"):
        if _abandons(child):
            continue
        try:
            cancel(child.pk, actor=f"parent run #{parent_id}")
        except InvalidTransition:
            continue  # it ended meanwhile
        done += 1
    return done


def _abandons(run: WorkflowRun) -> bool:
    try:
        return getattr(run.workflow(), "on_parent_cancel", CANCEL) == ABANDON
    except WorkflowNotFound:
        return False


def repair_children(*, at: datetime, grace: timedelta) -> int:
    """The sweep's repairs: a child that ended more than ``grace`` ago with its member still
    pending is counted; open children of a parent cancelled that long ago are cancelled."""
    done = 0
    ended = (
        BatchMember.objects.filter(
            status=BatchMember.Status.PENDING,
            child__status__in=[RunStatus.FINISHED, RunStatus.CANCELLED],
            child__finished_at__lt=at - grace,
        )
        .order_by("child__finished_at")
        .values_list("child_id", flat=True)[:REPAIR_LIMIT]
    )
    for child_id in dict.fromkeys(ended):
        done += _safely(f"child run {child_id}", lambda child_id=child_id: _count_ended(child_id, at))
    for parent_id in _cancelled_parents(at - grace):
        done += _safely(f"children of run {parent_id}", lambda parent_id=parent_id: cancel_children(parent_id))
    return done


# Where this process's last pass over cancelled parents stopped. A parent whose open children
# all abandon it keeps matching for ever, so taking the first REPAIR_LIMIT each pass would let
# a hundred such parents starve every other; each pass goes on from the last, and wraps round.
_parents_after = 0


def _cancelled_parents(before: datetime) -> list[int]:
    global _parents_after
    parents = list(
        WorkflowRun.objects.filter(
            status=RunStatus.CANCELLED,
            finished_at__lt=before,
            children__status__in=list(OPEN_RUN),
            pk__gt=_parents_after,
        )
        .order_by("pk")
        .values_list("pk", flat=True)
        .distinct()[:REPAIR_LIMIT]
    )
    _parents_after = parents[-1] if len(parents) == REPAIR_LIMIT else 0
    return parents


def _count_ended(child_id: int, at: datetime) -> int:
    with locked(child_id) as run:
        if run.status not in (RunStatus.FINISHED, RunStatus.CANCELLED):
            return 0
        child_ended(run, at=at)
    return 1


def _safely(what: str, repair: Any) -> int:
    try:
        return int(repair())
    except Exception:
        logger.exception("children: repair of %s failed", what, extra={"action": "sweep_error"})
        return 0
