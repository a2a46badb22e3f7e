"""The django-q2 side of a fan_out: run the body and open the batch, hand the members to
django-q2, run each member's task (``run_member``) and count it when it ends for good
(``member_hook``); the member that finishes the batch resolves its step.

``HOOK`` and ``RUNNER`` are stored in django-q2's rows, as ``pgflow.fanout.*`` paths: the
package re-exports both functions so those rows keep importing.
"""

from __future__ import annotations

import logging
import pydoc
import re
import traceback
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.apps import apps

from .. import observability, store, tenants
from ..core import jsonvalue
from ..core.flow import FlowControl
from ..core.states import StepStatus
from ..evaluation import invoke, settle
from ..failures import fail
from ..models import BatchMember, Step
from .builder import TASK_KEY, BatchBuilder, Member
from .handoff import used

if TYPE_CHECKING:
    from ..store import Prepared

logger = logging.getLogger("pgflow")

HOOK = "pgflow.fanout.member_hook"  # the django-q2 result hook of every member task
RUNNER = "pgflow.fanout.run_member"  # the django-q2 function of every member task: it calls the member's own
TASK_NAME = "pgflow-{batch}-{position}"  # a member's django-q2 task name: finds the member without its task id
_TASK_NAME = re.compile(r"pgflow-(?P<batch>[0-9a-f]{32})-(?P<position>\d+)")


# --- the step: run the body, open the batch ------------------------------------------------


def execute(prepared: Prepared) -> tuple[str, bool]:
    """Run a fan_out attempt the runner prepared: ``(outcome word, applied)``."""
    builder = BatchBuilder()
    try:
        # An async body is awaited here, in this thread: it only records its batch.add calls.
        with tenants.context_of(prepared.workflow):  # the run's tenant context, as any body's
            returned = settle(invoke(prepared.workflow, prepared.definition, builder))
    except FlowControl as control:
        applied = store.finish(prepared.claim, control.outcome)
        return (control.outcome.word if applied else "ignored"), applied
    except Exception as exc:  # noqa: BLE001 - a failing body goes through the policies like any step's
        return _fail(prepared, exc)
    finally:
        builder.seal()
    try:
        jsonvalue.encode(returned, f"the output of fan_out {prepared.definition.name!r}")
    except (TypeError, ValueError) as exc:
        return _fail(prepared, exc)
    return open_batch(prepared, builder.members, output=returned)


def _fail(prepared: Prepared, error: BaseException) -> tuple[str, bool]:
    outcome, applied = fail(prepared, error, finish=_finish_one)
    return (outcome.word if applied else "ignored"), applied


def _finish_one(item: store.Finished) -> bool:
    return store.finish(item.claim, item.outcome, error=item.error)


def open_batch(
    prepared: Prepared, members: tuple[Member, ...], *, at: datetime | None = None, output: Any = None
) -> tuple[str, bool]:
    """Open the batch (``store.open_batch``); each kind of member is handed out by its
    :class:`~pgflow.fanout.handoff.Handoff`: inside that transaction, or after its commit."""
    kinds = used({m.handoff for m in members if m.workflow is None})

    def now(batch_id: uuid.UUID) -> bool:
        return any([h.enqueue_now(batch_id) for h in kinds])  # a list: every kind hands its members out

    def later(batch_id: uuid.UUID) -> int:
        return sum(h.enqueue_after_commit(batch_id) for h in kinds)

    return store.open_batch(prepared.claim, members, at=at, output=output, enqueue=later, enqueue_now=now)


class DjangoQHandoff:
    """django-q2 members (:class:`~pgflow.fanout.handoff.Handoff`): enqueued once the batch
    committed, counted by their result hook, repaired from django-q2's saved results."""

    kind = "django_q"

    def enqueue_now(self, batch_id: uuid.UUID) -> bool:
        return False  # a broker outside our transaction: after the commit only

    def enqueue_after_commit(self, batch_id: uuid.UUID) -> int:
        return enqueue(batch_id)

    def repair(self, *, at: datetime, grace: timedelta) -> int:
        # Without django-q2 no member was handed to it (the checks refuse such a fan-out), and
        # the tables its repairs read do not exist.
        if not apps.is_installed("django_q"):
            return 0
        from .repairs import repair_django_q  # cycle: repairs -> here

        return repair_django_q(at, grace)


DJANGO_Q = DjangoQHandoff()


def enqueue(batch_id: uuid.UUID) -> int:
    """Hand the batch's members to django-q2; returns how many were enqueued. A member whose
    enqueue raises (a broker error, or the task's own error in django-q2's sync mode) counts
    as failed at once."""
    from django_q.tasks import async_task  # lazy: its models need django_q in INSTALLED_APPS

    enqueued = 0
    members = list(
        BatchMember.objects.filter(
            batch_id=batch_id, status=BatchMember.Status.PENDING, enqueued_at__isnull=True, child__isnull=True
        )
        .exclude(kwargs__has_key=TASK_KEY)  # another django.tasks backend's: handed out already
        .order_by("position")
    )
    for member in members:
        options = {
            "hook": HOOK,
            "group": str(batch_id),
            "task_name": task_name(batch_id, member.position),
            "save": True,
            "cached": False,
        }
        try:
            task_id = async_task(
                RUNNER, str(batch_id), member.position, member.func, *member.args, q_options=options, **member.kwargs
            )
        except Exception as exc:  # noqa: BLE001 - one member's enqueue must not strand the others
            logger.warning(
                "fan_out: batch %s member %s could not be enqueued: %s",
                batch_id,
                member.position,
                exc,
                extra={"action": "fan_out_enqueue_failed", "batch_id": str(batch_id)},
            )
            # In sync mode django-q2 runs the task inside async_task and re-raises its error.
            how = "failed in django-q2's sync mode" if _sync_mode() else "could not be handed to django-q2"
            member_finished(
                batch_id,
                member.position,
                succeeded=False,
                error=f"{how}: {type(exc).__name__}: {exc} : {traceback.format_exc()}",
            )
            continue
        store.mark_enqueued(member.pk, task_id)
        enqueued += 1
    return enqueued


def run_member(batch_id: str, position: int, func: str, /, *args: Any, **kwargs: Any) -> Any:
    """What django-q2 runs for a member: the member's ``func``, unless its step no longer waits
    on this batch (the run was cancelled or paused, the step skipped or ended): then the task
    does nothing and says so in its result. A resumed fan_out opens a fresh batch, so running
    the old one's members would run them twice."""
    if not Step.objects.filter(batch_id=batch_id, status=StepStatus.WAITING).exists():
        # Counted as skipped, not succeeded: it never ran. Its row leaves `pending` here, so
        # the hook reporting the task's (successful) result counts nothing.
        store.skip_member(uuid.UUID(str(batch_id)), position)
        logger.info(
            "fan_out: batch %s member %s not run: its step no longer waits on the batch",
            batch_id,
            position,
            extra={"action": "fan_out_member_skipped", "batch_id": str(batch_id)},
        )
        return {"pgflow": "not run: the step no longer waits on this batch (cancelled, paused or skipped)"}
    return member_function(func)(*args, **kwargs)


def member_function(path: str) -> Callable[..., Any]:
    """The function a member's dotted path names, imported as django-q2's worker would.

    ``batch.add`` checked the path when the batch opened; by the time the task runs the code
    may have changed (a deploy renamed or removed it), and the member then fails naming the
    path rather than with ``'NoneType' object is not callable``.
    """
    try:
        found = pydoc.locate(path)
    except pydoc.ErrorDuringImport as exc:
        raise ImportError(
            f"the fan_out task {path!r} no longer imports: importing it raised {type(exc.value).__name__}: {exc.value}"
        ) from exc.value
    if found is None:
        raise ImportError(
            f"the fan_out task {path!r} no longer imports: no such module or function "
            f"(renamed or removed since the batch opened?)"
        )
    if not callable(found):
        raise TypeError(f"the fan_out task {path!r} names a {type(found).__name__} object, not a function")
    return found


def _sync_mode() -> bool:
    from django_q.conf import Conf  # lazy: reads Q_CLUSTER on import; pgflow runs without django-q2

    return bool(Conf.SYNC)


def task_name(batch_id: uuid.UUID, position: int) -> str:
    return TASK_NAME.format(batch=uuid.UUID(str(batch_id)).hex, position=position)


# --- counting members -----------------------------------------------------------------------


def member_hook(task: Any) -> None:
    """django-q2's result hook (``hook=`` of every member task), called in the cluster's monitor
    each time an attempt's result is saved. Only the attempt that ends the task for good counts."""
    match = _TASK_NAME.fullmatch(task.name or "")
    if match is None:
        logger.warning(
            "fan_out: django-q2 task %s (%s) is not a fan_out member",
            task.id,
            task.name,
            extra={"action": "fan_out_unknown_task"},
        )
        return
    if not task.success and not failure_is_final(task.attempt_count):
        logger.info(
            "fan_out: member %s failed attempt %s; django-q2 will run it again",
            task.name,
            task.attempt_count,
            extra={"action": "fan_out_member_retried"},
        )
        return
    member_finished(
        uuid.UUID(match["batch"]),
        int(match["position"]),
        succeeded=bool(task.success),
        error=None if task.success else str(task.result),
        task_id=task.id,
    )


def failure_is_final(attempt_count: int) -> bool:
    """Whether django-q2 gives up on a task whose attempt number ``attempt_count`` just failed.

    The monitor acknowledges (removes from the queue) a failed task when ``ack_failures`` is
    set, or once ``max_attempts`` attempts are saved; an unacknowledged one is delivered again
    after ``retry`` seconds by a broker that redelivers (ORM, SQS, IronMQ, MongoDB). Redis
    pops a task for good, so a failure there is never retried.
    """
    from django_q.conf import Conf  # lazy: reads Q_CLUSTER on import; pgflow runs without django-q2

    if Conf.ACK_FAILURES or not broker_redelivers():
        return True
    return Conf.MAX_ATTEMPTS > 0 and attempt_count >= Conf.MAX_ATTEMPTS


def broker_redelivers() -> bool:
    from django_q.conf import Conf  # lazy: reads Q_CLUSTER on import; pgflow runs without django-q2

    return bool(Conf.BROKER_CLASS or Conf.IRON_MQ or isinstance(Conf.SQS, dict) or Conf.ORM or Conf.MONGO)


def member_finished(
    batch_id: uuid.UUID,
    position: int,
    *,
    succeeded: bool,
    error: str | None = None,
    task_id: str | None = None,
    at: datetime | None = None,
) -> bool:
    """Count one member's final result; the member that finishes the batch resolves its step.
    Returns False (and logs) for a member counted already or gone with its batch."""
    at = at or store.now()
    counted, step_id = store.count_member(batch_id, position, succeeded=succeeded, error=error, task_id=task_id, at=at)
    if not counted:
        logger.info(
            "fan_out: late result of batch %s member %s ignored: counted already, or its batch is gone",
            batch_id,
            position,
            extra={"action": "fan_out_late_result", "batch_id": str(batch_id)},
        )
        return False
    observability.member_finished(batch_id, position, succeeded=succeeded, at=at)
    if step_id is not None:
        # A separate transaction, after the counts committed: a crash in between leaves a finished
        # batch with its step waiting, which the sweep resolves after FAN_OUT_GRACE.
        resolve_step(step_id, at=at)
    return True


def resolve_step(step_id: int, *, at: datetime | None = None) -> bool:
    """Move a step waiting on a finished (or vanished) batch on (``store.resolve_batch_step``)."""
    return store.resolve_batch_step(step_id, at=at)
