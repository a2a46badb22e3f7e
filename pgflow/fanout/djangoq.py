"""Fan-out: a step that hands a group of django-q2 tasks out and waits for them as one batch.

    @fan_out(on_batch_failure="pause")
    def notify_vendors(self, batch):
        for vendor_id in self.input["vendors"]:
            batch.add("shop.tasks.notify_vendor", vendor_id)

1. The body (in the worker, outside any transaction) gets a :class:`BatchBuilder` that only
   records its ``add`` calls. A flow-control verb or an exception in the body ends the step
   before any batch exists.
2. Open (one transaction, under the run's lock): the ``Batch`` row, one ``BatchMember`` per
   task, the step parked ``waiting`` on the batch and ``fan_out_opened``. The django-q2 tasks
   are enqueued only once that commits, so a task never runs for a batch a rollback undid.
   An empty batch finishes and completes the step right there.
3. Count: every member task carries :func:`member_hook` as its django-q2 result hook. A
   member counts once, when its task ends for good: it succeeded, or it failed and django-q2
   will not run it again. The member that brings the count to the total wins the batch (a
   conditional UPDATE, so exactly one of two members finishing together does).
4. Resolve (the winner, under the run's lock): no failure completes the step and advances;
   any failure applies the step's ``on_batch_failure`` with ``FanOutFailed`` recorded. A step
   no longer waiting (skipped, cancelled, paused by an operator) is left alone.
5. The sweep (:func:`repair_lost`) resolves what a lost callback left behind.

A reattempt or a resume of a fan_out runs the body again and opens a fresh batch, and
django-q2 may run a task more than once: member tasks must be idempotent.
"""

from __future__ import annotations

import functools
import inspect
import logging
import pydoc
import re
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from django.db.models import Exists, OuterRef, Q

from .. import observability, store
from ..conf import pgflow_settings
from ..core import jsonvalue
from ..core.events import EventKind
from ..core.flow import FlowControl
from ..core.states import StepStatus
from ..evaluation import invoke, settle
from ..failures import fail
from ..models import Batch, BatchMember, Event, Step

if TYPE_CHECKING:
    from ..store import Prepared
    from ..workflow import Workflow

logger = logging.getLogger("pgflow")

HOOK = "pgflow.fanout.member_hook"  # the django-q2 result hook of every member task
RUNNER = "pgflow.fanout.run_member"  # the django-q2 function of every member task: it calls the member's own
TASK_NAME = "pgflow-{batch}-{position}"  # a member's django-q2 task name: finds the member without its task id
_TASK_NAME = re.compile(r"pgflow-(?P<batch>[0-9a-f]{32})-(?P<position>\d+)")
# pgflow.testing.run_workflow claims attempts under this worker name; their members run
# inline (run_inline) instead of going to django-q2.
INLINE_WORKER = store.TESTING_WORKER  # batches opened by pgflow.testing run inline
REPAIR_LIMIT = 100  # repairs of each kind per sweep
ERROR_LIMIT = 10_000  # characters of a member's error kept
SAMPLE_FAILURES = 5  # failed members named in the fan_out_finished event

CALLBACK_MESSAGE = (
    "a fan_out step owns its batch's callbacks (pgflow resumes the workflow once every task has "
    "finished); do the follow-up work in the next step"
)
CALLBACKS = ("on_complete", "on_success", "on_failure", "on_finish", "hook", "chain")
# async_task options a member may give among its keyword arguments, as async_task takes them.
MEMBER_OPTIONS = ("timeout", "cluster")
# async_task options pgflow sets on every member: the hook must fire once per attempt, with
# the result saved in the database and the member's task named after it.
MANAGED_OPTIONS = (
    "group",
    "task_name",
    "save",
    "cached",
    "sync",
    "ack_failure",
    "broker",
    "iter_count",
    "iter_cached",
    "q_options",
)
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
FUNC_LIMIT = 256  # django-q2's Task.func column


# --- the builder ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Member:
    """One recorded ``batch.add``: what django-q2 will be asked to run."""

    func: str  # a dotted path: django-q2's worker imports it with pydoc.locate (a child: its class's)
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]  # a child: its input and key
    workflow: type[Workflow] | None = None  # batch.add_run: the child run's class
    subject: Any = None  # batch.add_run: the child run's subject


class BatchBuilder:
    """The ``batch`` a fan_out body gets. It records the tasks to run; the batch opens once the
    body returns. It owns no callbacks: the workflow resumes when the batch has finished."""

    __slots__ = ("_members", "_sealed")
    _members: list[Member]
    _sealed: bool

    def __init__(self) -> None:
        object.__setattr__(self, "_members", [])
        object.__setattr__(self, "_sealed", False)

    def add(self, func: str | Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        """Add a django-q2 task: ``func`` a dotted path or a module-level function, then its
        arguments, as ``django_q.tasks.async_task`` takes them (``timeout=`` and ``cluster=``
        among the keyword arguments are django-q2 options, as there). Arguments must be
        JSON-serialisable: they are stored until the task is enqueued (a tuple comes back a list).
        """
        if self._sealed:
            raise RuntimeError("this fan_out batch has already opened; add its tasks inside the fan_out body")
        path = task_path(func)
        for name in kwargs:
            _check_option(name, kwargs[name], path)
        for index, value in enumerate(args, start=1):
            _check_json(value, f"argument {index}", path)
        for name, value in kwargs.items():
            _check_json(value, f"keyword argument {name!r}", path)
        self._members.append(Member(func=path, args=tuple(args), kwargs=dict(kwargs)))

    def add_run(
        self, workflow: type[Workflow], /, *, subject: Any = None, input: Any = None, key: str | None = None
    ) -> None:
        """Add a child run of ``workflow`` (a Workflow subclass) as a member: it starts when the
        batch opens, as ``workflow.start(subject=..., input=..., key=...)`` would, and counts
        as succeeded when it finishes, failed when it is cancelled. ``key`` makes it
        idempotent: a resumed or reattempted fan_out that adds the same key links the run
        started the first time. No django-q2 cluster is needed for child runs."""
        if self._sealed:
            raise RuntimeError("this fan_out batch has already opened; add its runs inside the fan_out body")
        from ..models import WorkflowRun
        from ..workflow import Workflow

        if not (isinstance(workflow, type) and issubclass(workflow, Workflow)) or not workflow.steps():
            raise TypeError(
                f"batch.add_run() takes a Workflow subclass with at least one step (as Workflow.start does), "
                f"got {workflow!r}"
            )
        what = f"batch.add_run({workflow.__qualname__})"
        if input is not None and not isinstance(input, dict):
            raise TypeError(f"{what}: input must be a dict (JSON object) or None, got {type(input).__name__}")
        reason = jsonvalue.problem(input)
        if reason is not None:
            raise TypeError(f"{what}: input must be JSON-serialisable, got {reason}")
        if key is not None and (not isinstance(key, str) or not key or len(key) > 255):
            raise ValueError(f"{what}: key must be a non-empty string of at most 255 characters or None, got {key!r}")
        if subject is not None and (
            isinstance(subject, WorkflowRun) or getattr(subject, "pk", None) is None or not hasattr(subject, "_meta")
        ):
            raise TypeError(f"{what}: subject must be a saved model instance or None, got {subject!r}")
        self._members.append(
            Member(
                func=workflow.workflow_path(),
                args=(),
                kwargs={"input": input, "key": key},
                workflow=workflow,
                subject=subject,
            )
        )

    @property
    def size(self) -> int:
        """How many members (tasks and child runs) have been added."""
        return len(self._members)

    @property
    def members(self) -> tuple[Member, ...]:
        return tuple(self._members)

    def seal(self) -> None:
        """The body returned: later adds (from a builder kept around) are refused."""
        object.__setattr__(self, "_sealed", True)

    def on_complete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"batch.on_complete: {CALLBACK_MESSAGE}")

    def on_success(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"batch.on_success: {CALLBACK_MESSAGE}")

    def on_failure(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"batch.on_failure: {CALLBACK_MESSAGE}")

    def on_finish(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"batch.on_finish: {CALLBACK_MESSAGE}")

    def hook(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"batch.hook: {CALLBACK_MESSAGE}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in CALLBACKS:
            raise TypeError(f"batch.{name}: {CALLBACK_MESSAGE}")
        raise AttributeError(
            f"the fan_out batch has no setting {name!r}; add tasks with batch.add(func, *args, **kwargs)"
        )

    def __repr__(self) -> str:
        return f"<BatchBuilder size={self.size}>"


def task_path(func: str | Callable[..., Any]) -> str:
    """The dotted path django-q2's worker imports ``func`` by; refuses what it could not import."""
    accepted = (
        "a dotted path ('shop.tasks.notify_vendor') or a module-level function, as django_q.tasks.async_task takes them"
    )
    path: str | None
    if isinstance(func, str):
        if not _DOTTED.fullmatch(func):
            raise ValueError(f"batch.add() takes {accepted}; {func!r} is not a dotted path")
        target = _locate(func)
        if target is None:
            raise ValueError(
                f"batch.add(): {func!r} does not import (django-q2's worker resolves it with "
                f"pydoc.locate); check the module and the function name"
            )
        if not callable(target):
            raise TypeError(f"batch.add(): {func!r} names a {type(target).__name__} object, not a function")
        path = func
    elif callable(func):
        path = _path_of(func)
        if path is None:
            raise TypeError(
                f"batch.add() takes {accepted}; got {func!r}, which the django-q2 worker cannot import by "
                f"its path (a lambda, a function defined inside another, a bound method of an instance, "
                f"a partial or a callable object)"
            )
    else:
        raise TypeError(f"batch.add() takes {accepted}; got {type(func).__name__} {func!r}")
    if len(path) > FUNC_LIMIT:
        raise ValueError(f"batch.add(): the task path {path!r} is longer than {FUNC_LIMIT} characters")
    return path


def _path_of(func: Callable[..., Any]) -> str | None:
    """``module.qualname`` of a callable that imports back as itself, else None."""
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__" or "<" in qualname:
        return None
    if inspect.ismethod(func) and not isinstance(func.__self__, type):
        return None  # its instance would be lost: only a classmethod's class imports
    path = f"{module}.{qualname}"
    try:
        same = _locate(path) == func  # == and not `is`: a classmethod binds anew on each access
    except Exception:  # noqa: BLE001 - an object with a broken __eq__ is not a task
        return None
    return path if same else None


def _locate(path: str) -> Any:
    try:
        return pydoc.locate(path)
    except pydoc.ErrorDuringImport as exc:
        raise ValueError(f"batch.add(): importing {path!r} failed: {exc.value!r}") from None


def _check_option(name: str, value: Any, path: str) -> None:
    if name in CALLBACKS:
        raise TypeError(f"batch.add({path}): {name}=: {CALLBACK_MESSAGE}")
    if name in MANAGED_OPTIONS:
        raise TypeError(
            f"batch.add({path}): {name}= is set by pgflow for every fan_out task; the django-q2 "
            f"options a task may take are {', '.join(f'{o}=' for o in MEMBER_OPTIONS)}"
        )
    if name == "timeout" and not (type(value) is int and value > 0):
        raise ValueError(
            f"batch.add({path}): timeout= (django-q2's) must be a positive whole number of seconds, got {value!r}"
        )
    if name == "cluster" and not (isinstance(value, str) and value):
        raise ValueError(f"batch.add({path}): cluster= (django-q2's) must be a cluster name, got {value!r}")


def _check_json(value: Any, what: str, path: str) -> None:
    reason = jsonvalue.problem(value)
    if reason is not None:
        raise TypeError(
            f"batch.add({path}): {what} must be JSON-serialisable (it is stored until django-q2 "
            f"runs the task), got {type(value).__name__}: {reason}"
        )


# --- the step: run the body, open the batch ------------------------------------------------


def execute(prepared: Prepared) -> tuple[str, bool]:
    """Run a fan_out attempt the runner prepared: ``(outcome word, applied)``."""
    builder = BatchBuilder()
    try:
        # An async body is awaited here, in this thread: it only records its batch.add calls.
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
    """Open the batch (``store.open_batch``); its tasks go to django-q2 after the commit."""
    return store.open_batch(prepared.claim, members, at=at, output=output, enqueue=enqueue)


def enqueue(batch_id: uuid.UUID) -> int:
    """Hand the batch's members to django-q2; returns how many were enqueued. A member whose
    enqueue raises (a broker error, or the task's own error in django-q2's sync mode) counts
    as failed at once."""
    from django_q.tasks import async_task

    enqueued = 0
    members = list(
        BatchMember.objects.filter(
            batch_id=batch_id, status=BatchMember.Status.PENDING, enqueued_at__isnull=True, child__isnull=True
        ).order_by("position")
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
    from django_q.conf import Conf

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
    from django_q.conf import Conf

    if Conf.ACK_FAILURES or not _broker_redelivers():
        return True
    return Conf.MAX_ATTEMPTS > 0 and attempt_count >= Conf.MAX_ATTEMPTS


def _broker_redelivers() -> bool:
    from django_q.conf import Conf

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


# --- the sweep --------------------------------------------------------------------------------


def repair_lost(*, at: datetime | None = None) -> int:
    """One sweep's repairs; returns how many it made.

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
    done = _count_saved_results(at, grace)
    done += _count_stuck(at, grace)
    finished = (
        Step.objects.filter(
            status=StepStatus.WAITING, batch__status=Batch.Status.FINISHED, batch__finished_at__lt=at - grace
        )
        .order_by("batch__finished_at")
        .values_list("pk", flat=True)[:REPAIR_LIMIT]
    )
    vanished = (
        Step.objects.filter(status=StepStatus.WAITING, batch__isnull=True)
        .filter(Exists(Event.objects.filter(step=OuterRef("pk"), event=EventKind.FAN_OUT_OPENED)))
        .order_by("waiting_since")
        .values_list("pk", flat=True)[:REPAIR_LIMIT]
    )
    for step_id in [*finished, *vanished]:
        done += _safely(f"step {step_id}", functools.partial(resolve_step, step_id, at=at))
    return done


def _safely(what: str, repair: Callable[[], bool]) -> int:
    try:
        return int(bool(repair()))
    except Exception:
        # One broken run must not stop the sweep for the others.
        logger.exception("fan_out: repair of %s failed", what, extra={"action": "sweep_error"})
        return 0


def _count_saved_results(at: datetime, grace: timedelta) -> int:
    from django_q.conf import Conf
    from django_q.models import Task

    final = Q(success=True)
    if Conf.ACK_FAILURES or not _broker_redelivers():
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
    from django_q.conf import Conf

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
        .filter(Q(enqueued_at__lt=cutoff) | Q(enqueued_at__isnull=True, batch__created_at__lt=cutoff))
        .exclude(Exists(progressed))
        # A batch opened by pgflow.testing runs its members inline; nothing enqueues them.
        .exclude(batch__step__worker=INLINE_WORKER)
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


# --- pgflow.testing -------------------------------------------------------------------------


def run_inline(step: Step) -> bool:
    """Run a waiting step's pending members here, in order, then resolve the step (for
    ``pgflow.testing.run_workflow``). Returns True when the step moved on."""
    if step.batch_id is not None:
        from ..testing import run_workflow

        pending = BatchMember.objects.filter(batch_id=step.batch_id, status=BatchMember.Status.PENDING)
        for member in pending.order_by("position"):
            if member.child_id is not None:
                run_workflow(member.child_id)  # its end counts the member (a paused child keeps it pending)
                continue
            succeeded, error = _call(member)
            member_finished(member.batch_id, member.position, succeeded=succeeded, error=error)
    if Step.objects.filter(pk=step.pk, status=StepStatus.WAITING).exists():
        resolve_step(step.pk)  # finished before (its resolution lost) or its batch vanished
    return not Step.objects.filter(pk=step.pk, status=StepStatus.WAITING).exists()


def _call(member: BatchMember) -> tuple[bool, str | None]:
    kwargs = {k: v for k, v in member.kwargs.items() if k not in MEMBER_OPTIONS}
    try:
        member_function(member.func)(*member.args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a member's failure is its result
        # The shape django-q2 saves a failure in: "message : traceback".
        return False, f"{exc} : {traceback.format_exc()}"
    return True, None
