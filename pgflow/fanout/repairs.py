"""The sweep's fan-out repairs: what a lost callback, a killed worker or a dead monitor left
behind (``repair_lost``), each one counted or resolved as the member or the winner would have.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef, Q

from .. import store
from ..conf import pgflow_settings
from ..core.events import EventKind
from ..core.states import StepStatus
from ..models import Batch, BatchMember, Event, Step
from .builder import TASK_KEY
from .djangoq import broker_redelivers, member_finished, resolve_step
from .handoff import handoffs

logger = logging.getLogger("pgflow")

# pgflow.testing.run_workflow claims attempts under this worker name; their members run
# inline (run_inline) instead of going to django-q2.
INLINE_WORKER = store.TESTING_WORKER  # batches opened by pgflow.testing run inline
REPAIR_LIMIT = 100  # repairs of each kind per sweep


def repair_lost(*, at: datetime | None = None) -> int:
    """One sweep's repairs; returns how many it made.

    - each kind of member's own (``Handoff.repair``): for a task of another django.tasks
      backend, its result read back with ``get_result``; for django-q2, the two below;
    - a member whose django-q2 task ended for good but whose hook never counted it (the
      monitor died, the database blinked) is counted from django-q2's saved result;
    - a member still pending long after django-q2 would have given up on it (its worker was
      hard-killed, which records nothing; or no cluster consumes the queue) counts as failed,
      once its batch has made no progress for as long;
    - a step still waiting on a batch that finished more than FAN_OUT_GRACE ago is resolved
      (the winning member's process stopped before resolving it);
    - a step whose batch row is gone pauses with FanOutFailed.
    """
    at = at or store.now()
    grace = timedelta(seconds=pgflow_settings.seconds("FAN_OUT_GRACE"))
    done = 0
    for handoff in handoffs().values():
        done += handoff.repair(at=at, grace=grace)
    finished = (
        Step.objects.live()
        .filter(status=StepStatus.WAITING, batch__status=Batch.Status.FINISHED, batch__finished_at__lt=at - grace)
        .order_by("batch__finished_at")
        .values_list("pk", flat=True)[:REPAIR_LIMIT]
    )
    vanished = (
        Step.objects.live()
        .filter(status=StepStatus.WAITING, batch__isnull=True)
        .filter(Exists(Event.objects.filter(step=OuterRef("pk"), event=EventKind.FAN_OUT_OPENED)))
        .order_by("waiting_since")
        .values_list("pk", flat=True)[:REPAIR_LIMIT]
    )
    for step_id in [*finished, *vanished]:
        done += _safely(f"step {step_id}", functools.partial(resolve_step, step_id, at=at))
    return done


def repair_django_q(at: datetime, grace: timedelta) -> int:
    """django-q2 members' repairs: results its hook missed, and members it never ended."""
    return _count_saved_results(at, grace) + _count_stuck(at, grace)


def _safely(what: str, repair: Callable[[], bool]) -> int:
    try:
        return int(bool(repair()))
    except Exception:
        # One broken run must not stop the sweep for the others.
        logger.exception("fan_out: repair of %s failed", what, extra={"action": "sweep_error"})
        return 0


def _count_saved_results(at: datetime, grace: timedelta) -> int:
    from django_q.conf import Conf  # lazy: reads Q_CLUSTER on import; pgflow runs without django-q2
    from django_q.models import Task  # lazy: needs django_q in INSTALLED_APPS

    final = Q(success=True)
    if Conf.ACK_FAILURES or not broker_redelivers():
        final |= Q(success=False)
    elif Conf.MAX_ATTEMPTS > 0:
        final |= Q(success=False, attempt_count__gte=Conf.MAX_ATTEMPTS)
    members = (
        BatchMember.objects.filter(
            status=BatchMember.Status.PENDING, batch__status=Batch.Status.OPEN, enqueued_at__lt=at - grace
        )
        .filter(task_id__in=Task.objects.filter(final).values("id"))
        .order_by("enqueued_at")
        .values_list("batch_id", "position", "task_id")[:REPAIR_LIMIT]
    )
    done = 0
    for batch_id, position, task_id in members:
        task = Task.objects.filter(pk=task_id).first()
        if task is None:
            continue  # pruned since (save_limit)
        done += _safely(
            f"member {position} of batch {batch_id}",
            functools.partial(
                member_finished,
                batch_id,
                position,
                succeeded=bool(task.success),
                error=None if task.success else str(task.result),
                task_id=task.id,
                at=at,
            ),
        )
    return done


def stuck_after(grace: timedelta, timeout: int | None = None) -> timedelta:
    """How long a member may stay pending before it counts as lost: FAN_OUT_GRACE plus every
    attempt django-q2 may give it, each as long as its timeout or the broker's ``retry``
    (after which a task whose worker was killed is delivered again), whichever is longer."""
    from django_q.conf import Conf  # lazy: reads Q_CLUSTER on import; pgflow runs without django-q2

    per_attempt = max(timeout or Conf.TIMEOUT or 0, Conf.RETRY or 0)
    attempts = Conf.MAX_ATTEMPTS if Conf.MAX_ATTEMPTS > 0 else 1
    return grace + timedelta(seconds=per_attempt * attempts)


def _count_stuck(at: datetime, grace: timedelta) -> int:
    cutoff = at - stuck_after(grace)
    progressed = BatchMember.objects.filter(batch=OuterRef("batch"), finished_at__gte=cutoff)
    candidates = (
        BatchMember.objects.filter(
            status=BatchMember.Status.PENDING, batch__status=Batch.Status.OPEN, child__isnull=True
        )
        .exclude(kwargs__has_key=TASK_KEY)  # another django.tasks backend's task: its own repair
        .filter(Q(enqueued_at__lt=cutoff) | Q(enqueued_at__isnull=True, batch__created_at__lt=cutoff))
        .exclude(Exists(progressed))
        # A batch opened by pgflow.testing runs its members inline; nothing enqueues them. An
        # open batch's step is open, so in the live partition (pgflow.store.history).
        .exclude(Exists(Step.objects.live().filter(pk=OuterRef("batch__step_id"), worker=INLINE_WORKER)))
        .select_related("batch")
        .order_by("batch__created_at", "position")[:REPAIR_LIMIT]
    )
    done = 0
    for member in candidates:
        since = member.enqueued_at or member.batch.created_at
        timeout = member.kwargs.get("timeout") if isinstance(member.kwargs, dict) else None
        window = stuck_after(grace, timeout if isinstance(timeout, int) else None)
        if since >= at - window:
            continue  # its own timeout= is longer
        if member.enqueued_at is None:
            error = "was never handed to django-q2: the process that opened the batch stopped before enqueueing it"
        else:
            error = (
                f"no result from django-q2 {_seconds(at - since)} after it was enqueued (longer than its "
                f"timeout and retries allow): its worker was killed, or no qcluster consumes the queue"
            )
        done += _safely(
            f"member {member.position} of batch {member.batch_id}",
            functools.partial(member_finished, member.batch_id, member.position, succeeded=False, error=error, at=at),
        )
    return done


def _seconds(delta: timedelta) -> str:
    return f"{int(delta.total_seconds())}s"
