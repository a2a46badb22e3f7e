"""Fan-out members that are tasks of another ``django.tasks`` backend (django-tasks-db, say).

- Hand out (:meth:`DjangoTasksHandoff.enqueue_now`): each task is enqueued on its backend inside
  the transaction that opens the batch, each in a savepoint; the member records the task
  result's id (``task_id``). A backend that stores its tasks in this database (django-tasks-db)
  then has its row only if the batch commits. A backend outside the database may run the task
  before the batch's commit: its finish then finds no member and the sweep counts it.
  A task its backend refuses there counts as failed at once. With ``PGFLOW["DATABASE"]``
  elsewhere, a backend that stores its tasks in the project's database is outside pgflow's:
  its enqueue commits on its own, as any outside backend's.
- Count (:func:`on_task_finished`): Django's ``task_finished`` signal, in that backend's worker
  process (pgflow's app connects it in every process where pgflow is installed), counts the
  member through ``store.count_member`` (the member row leaves ``pending`` once: exactly once).
- Repair (:meth:`DjangoTasksHandoff.repair`): the sweep reads ``get_result`` of members open
  longer than FAN_OUT_GRACE (a worker that died between saving the result and the signal, a
  handler that was not connected) and counts those that finished.

The task runs even when its step no longer waits on the batch (pgflow cannot wrap another
backend's task): its result is then counted on a batch nobody resolves. A task whose backend's
worker died mid-run and never finishes it keeps its member, and the batch, open.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from .. import db, observability, store
from ..models import Batch, BatchMember
from .builder import TASK_KEY
from .djangoq import member_finished

logger = logging.getLogger("pgflow")

KIND = "django_tasks"
REPAIR_LIMIT = 100  # members read back per sweep
TASK_ID_LIMIT = 64  # BatchMember.task_id
FUNC_LIMIT = 300  # BatchMember.func
SUCCESSFUL, FAILED = "SUCCESSFUL", "FAILED"


def problem(task: Any) -> str | None:
    """Why ``task`` cannot be a member (it must import back by its path when it is enqueued), or None."""
    path = task.module_path
    if len(path) > FUNC_LIMIT:
        return f"its path is longer than {FUNC_LIMIT} characters"
    try:
        found = import_string(path)
    except ImportError:
        found = None
    if getattr(found, "func", None) is not task.func:
        return f"{path!r} does not import back as this task (define it at module level with @task)"
    return None


def _task_of(member: BatchMember) -> tuple[Any, list[Any], dict[str, Any]]:
    """The task as ``batch.add`` was given it (queue, priority, run_after), its args and kwargs."""
    stored = member.kwargs[TASK_KEY]
    task = import_string(member.func)
    if task.backend != stored["backend"]:
        raise LookupError(f"{member.func} is now a task of backend {task.backend!r}, not {stored['backend']!r}")
    run_after = parse_datetime(stored["run_after"]) if stored.get("run_after") else None
    task = task.using(queue_name=stored["queue_name"], priority=stored["priority"], run_after=run_after)
    return task, list(member.args), dict(stored.get("kwargs") or {})


def call_inline(member: BatchMember) -> Any:
    """Run the member's task here (``pgflow.testing.run_workflow``, which runs members inline)."""
    task, args, kwargs = _task_of(member)
    if task.takes_context:
        raise TypeError(f"{member.func} takes a TaskContext, which only its backend's worker gives; run that worker")
    return task.call(*args, **kwargs)


def _members(batch_id: uuid.UUID | None = None) -> Any:
    rows = BatchMember.objects.filter(status=BatchMember.Status.PENDING, kwargs__has_key=TASK_KEY)
    return rows if batch_id is None else rows.filter(batch_id=batch_id)


class DjangoTasksHandoff:
    """Members that are tasks of another django.tasks backend (pgflow.fanout.handoff.Handoff)."""

    kind = KIND

    def enqueue_now(self, batch_id: uuid.UUID) -> bool:
        """Enqueue each member on its backend, in the batch's own transaction. True when that
        finished the batch (every member refused): the caller resolves its step."""
        finished = False
        at = store.now()
        for member in _members(batch_id).filter(enqueued_at__isnull=True).order_by("position"):
            try:
                with db.atomic():  # a savepoint: a refused enqueue undoes its own writes only
                    task, args, kwargs = _task_of(member)
                    result = task.enqueue(*args, **kwargs)
                    result_id = str(result.id)
                    if len(result_id) > TASK_ID_LIMIT:
                        raise ValueError(f"its result id {result_id!r} is longer than {TASK_ID_LIMIT} characters")
                    store.mark_enqueued(member.pk, result_id)
            except Exception as exc:  # noqa: BLE001 - one member's refusal must not strand the others
                logger.warning(
                    "fan_out: batch %s member %s (%s) could not be enqueued: %s",
                    batch_id,
                    member.position,
                    member.func,
                    exc,
                    extra={"action": "fan_out_enqueue_failed", "batch_id": str(batch_id)},
                )
                error = f"could not be enqueued on its backend: {type(exc).__name__}: {exc}"
                counted, step_id = store.count_member(batch_id, member.position, succeeded=False, error=error, at=at)
                if counted:
                    observability.member_finished(batch_id, member.position, succeeded=False, at=at)
                finished = finished or step_id is not None
        return finished

    def enqueue_after_commit(self, batch_id: uuid.UUID) -> int:
        return 0  # enqueued in the batch's transaction

    def repair(self, *, at: datetime, grace: timedelta) -> int:
        """Count the members whose finish no signal reported, from their backend's ``get_result``."""
        rows = list(
            _members()
            .filter(batch__status=Batch.Status.OPEN, enqueued_at__lt=at - grace, task_id__isnull=False)
            .order_by("enqueued_at")
            .values_list("batch_id", "position", "task_id", "kwargs")[:REPAIR_LIMIT]
        )
        if not rows:
            return 0
        # lazy: Django's task framework is an extra (django-pgflow[tasks] on 5.2); only tasks need it
        from ..tasks.compat import TaskResultDoesNotExist, task_backends

        done = 0
        for batch_id, position, task_id, kwargs in rows:
            alias = kwargs[TASK_KEY]["backend"]
            try:
                succeeded, failure = outcome(task_backends[alias].get_result(task_id))
            except TaskResultDoesNotExist:
                succeeded = False
                failure = f"its result {task_id} no longer exists in backend {alias!r} (deleted before it was counted)"
            except Exception:
                # A backend removed from TASKS, or down: try again on the next sweep.
                logger.exception(
                    "fan_out: reading task %s of backend %r failed", task_id, alias, extra={"action": "sweep_error"}
                )
                continue
            if succeeded is None:
                continue
            try:
                done += member_finished(batch_id, position, succeeded=succeeded, error=failure, at=at)
            except Exception:
                # One member that cannot be counted must not hold up the others, first in line each sweep.
                logger.exception(
                    "fan_out: counting member %s of batch %s failed",
                    position,
                    batch_id,
                    extra={"action": "sweep_error"},
                )
        return done


DJANGO_TASKS = DjangoTasksHandoff()


def outcome(result: Any) -> tuple[bool | None, str | None]:
    """``(succeeded, error)`` of a task result: ``succeeded`` None while it has not finished."""
    status = str(getattr(result.status, "value", result.status))
    if status == SUCCESSFUL:
        return True, None
    if status != FAILED:
        return None, None
    errors = list(result.errors or ())
    if not errors:
        return False, "the task failed (its backend recorded no error)"
    last = errors[-1]
    text = (last.traceback or "").rstrip("\n")
    summary = text.splitlines()[-1] if text else last.exception_class_path
    # "message : traceback", the shape a django-q2 member's failure is kept in
    return False, f"{summary} : {text}" if text else summary


def on_task_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    """Django's ``task_finished`` receiver: count the member this task result is, if any.
    Never raises: the backend's worker sends the signal and must run on."""
    try:
        # lazy: Django's task framework is an extra (django-pgflow[tasks] on 5.2); pgflow's own
        # backend's tasks are child runs, counted as runs
        from ..tasks.backend import PgflowBackend

        if isinstance(sender, type) and issubclass(sender, PgflowBackend):
            return
        task_finished(task_result)
    except Exception:
        logger.exception(
            "fan_out: counting task %s failed; the sweep will count it",
            getattr(task_result, "id", "?"),
            extra={"action": "fan_out_signal_error"},
        )


def task_finished(result: Any) -> bool:
    """Count the member ``result`` (a finished TaskResult) is; False when it is none, or counted."""
    succeeded, error = outcome(result)
    if succeeded is None:
        return False
    found = _members().filter(task_id=str(result.id)).values_list("batch_id", "position", "kwargs").first()
    if found is None or found[2][TASK_KEY]["backend"] != result.backend:
        return False
    return member_finished(found[0], found[1], succeeded=succeeded, error=error)


def connect() -> None:
    """Connect :func:`on_task_finished` (pgflow's ``AppConfig.ready``), where Django has a task framework."""
    try:
        # lazy: Django's task framework is an extra (django-pgflow[tasks] on 5.2)
        from ..tasks.compat import task_finished as signal
    except ImportError:
        return
    signal.connect(on_task_finished, dispatch_uid="pgflow.fanout.djangotasks")
