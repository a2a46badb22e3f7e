"""The ``batch`` a fan_out body gets: it records ``batch.add`` / ``batch.add_run`` calls and
checks each one (an importable task path, the django-q2 options a member may set, JSON
arguments) before anything is stored."""

from __future__ import annotations

import inspect
import pydoc
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from ..core import jsonvalue
from ..models import WorkflowRun
from ..workflow import Workflow

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
# The key of a member's kwargs that marks a task of another django.tasks backend (not a name a
# django-q2 task's keyword argument can take: batch.add refuses it there).
TASK_KEY = "django.tasks"
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
FUNC_LIMIT = 256  # django-q2's Task.func column


@dataclass(frozen=True, kw_only=True)
class Member:
    """One recorded ``batch.add``: what django-q2 (or another backend) will be asked to run."""

    func: str  # a dotted path: django-q2's worker imports it with pydoc.locate (a child: its class's)
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]  # a child: its input and key
    workflow: type[Workflow] | None = None  # batch.add_run: the child run's class
    subject: Any = None  # batch.add_run: the child run's subject
    handoff: str = "django_q"  # its Handoff's kind (pgflow.fanout.handoff); a child run has none


class BatchBuilder:
    """The ``batch`` a fan_out body gets. It records the tasks to run; the batch opens once the
    body returns. It owns no callbacks: the workflow resumes when the batch has finished."""

    __slots__ = ("_members", "_sealed")
    _members: list[Member]
    _sealed: bool

    def __init__(self) -> None:
        object.__setattr__(self, "_members", [])
        object.__setattr__(self, "_sealed", False)

    def add(self, func: str | Callable[..., Any] | Any, /, *args: Any, **kwargs: Any) -> None:
        """Add a django-q2 task: ``func`` a dotted path or a module-level function, then its
        arguments, as ``django_q.tasks.async_task`` takes them (``timeout=`` and ``cluster=``
        among the keyword arguments are django-q2 options, as there). Arguments must be
        JSON-serialisable: they are stored until the task is enqueued (a tuple comes back a list).
        ``func`` may be a Django task (``@task``): of ``pgflow.tasks.PgflowBackend`` it runs as a
        child run, as ``add_run`` adds one; of another backend (django-tasks-db, say) it is
        enqueued there as the batch opens and counts when that backend's worker finishes it.
        """
        if self._sealed:
            raise RuntimeError("this fan_out batch has already opened; add its tasks inside the fan_out body")
        if _is_django_task(func):
            # lazy: Django's task framework is an extra (django-pgflow[tasks] on 5.2); only a task needs it
            from ..tasks.fanout import member_of

            self._members.append(member_of(func, args, kwargs))
            return
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


def _is_django_task(func: Any) -> bool:
    # A django.tasks / django_tasks Task (not callable itself: it has .call and .enqueue).
    return not callable(func) and callable(getattr(func, "enqueue", None)) and hasattr(func, "module_path")


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
    if name == TASK_KEY:
        raise TypeError(f"batch.add({path}): the keyword argument {TASK_KEY!r} is pgflow's own; rename it")
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
