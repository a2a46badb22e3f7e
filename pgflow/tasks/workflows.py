"""A task as a pgflow workflow: one generated ``Workflow`` subclass per task, whose single step
(``task``) calls the task's function with the args and kwargs the run stores.

The class takes the function's module and qualified name, so ``WorkflowRun.workflow_class`` is
the task's ``module_path`` and the dashboard, metrics and MCP list the run by the task's name.
A worker finds the class by importing that path: the module's ``@task`` makes and registers it.
"""

from __future__ import annotations

import json
import threading
from typing import Any, ClassVar

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .. import registry
from ..conf import pgflow_settings
from ..core import jsonvalue
from ..core.policy import OnException
from ..workflow import Workflow, step
from ..workflow.building import WorkflowType
from . import mapping, results
from .compat import TaskContext, task_finished, task_started

DJANGO_DEFAULT_QUEUE = "default"  # Django's DEFAULT_TASK_QUEUE_NAME

STEP = "task"
_lock = threading.Lock()
# module_path -> (the options the class was made from, the class); variants per (queue, priority)
_made: dict[str, tuple[tuple[Any, ...], type[Workflow]]] = {}
_variants: dict[tuple[str, str, int], type[Workflow]] = {}


class TaskWorkflow(Workflow):
    """The base of every task's class (it has no step, so it is not registered itself)."""

    _pgflow_task: ClassVar[Any] = None  # the PgflowTask the class runs
    _pgflow_alias: ClassVar[str] = "default"  # its backend's alias in TASKS


def _options_key(task: Any) -> tuple[Any, ...]:
    # What the worker runs by; not the queue, priority or run_after, which .using() changes per
    # enqueue (variant_of): the class keeps the declared task's.
    return (
        task.backend,
        task.takes_context,
        task.func,
        *(repr(getattr(task, name)) for name in ("max_attempts", "timeout", "concurrency", "rate", "singleton")),
        repr(task.schedules),
        task.backoff,
        tuple(task.on_exception or ()),
    )


def pgflow_queue(queue_name: str) -> str:
    """The pgflow queue of a Django queue name: Django's "default" is PGFLOW["QUEUE"], which a
    plain ``pgflow_worker`` takes; any other name is a queue of its own."""
    return str(pgflow_settings.QUEUE) if queue_name == DJANGO_DEFAULT_QUEUE else queue_name


def workflow_of(task: Any) -> type[Workflow]:
    """The registered class of ``task``, made (and registered) when its options changed."""
    key = _options_key(task)
    with _lock:
        made = _made.get(task.module_path)
        if made is not None and made[0] == key:
            return made[1]
        cls = _make(task)
        _made[task.module_path] = (key, cls)
        for variant in [v for v in _variants if v[0] == task.module_path]:
            del _variants[variant]
        return cls


def variant_of(task: Any) -> type[Workflow]:
    """The class to start ``task`` with: the registered one, or (for a ``task.using()`` with another
    queue or priority) a subclass of the same path whose first attempt takes them. The registered
    class stays the registered one, so re-attempts go to the task's declared queue and priority."""
    cls = workflow_of(task)
    priority = int(task.priority)  # Django takes a whole float (5.0); a step's priority is an int
    if (pgflow_queue(task.queue_name), priority) == (cls.queue, cls.priority):
        return cls
    with _lock:
        wanted = (task.module_path, task.queue_name, priority)
        found = _variants.get(wanted)
        if found is None:
            namespace: dict[str, Any] = {
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "queue": pgflow_queue(task.queue_name),
                "priority": priority,
            }
            found = WorkflowType(cls.__name__, (cls,), namespace)
            registry.register(cls)  # making the variant registered it under the same path: undo that
            _variants[wanted] = found
        return found


def _make(task: Any) -> type[Workflow]:
    def body(self: TaskWorkflow) -> Any:
        return run_task(self)

    body.__name__ = body.__qualname__ = STEP
    # No wait declared: the backend starts a task due at its run_after (store.start_run's
    # due_at), so a task due now takes the plain start's one statement.
    step_options: dict[str, Any] = {
        # Any error, SystemExit too, as Django's own backends fail a task on any: a blanket
        # policy matches Exception only, and what it leaves pauses the run.
        "on_exception": [
            *(task.on_exception or ()),
            OnException(BaseException, handler=_after_failure, report="always"),
        ],
    }
    if task.timeout is not None:
        step_options["timeout"] = task.timeout
    namespace: dict[str, Any] = {
        "__module__": task.func.__module__,
        "__qualname__": task.func.__qualname__,
        "__doc__": f"The task {task.module_path}, run by pgflow.tasks.PgflowBackend.",
        "queue": pgflow_queue(task.queue_name),
        "priority": int(task.priority),  # as in variant_of
        "concurrency": task.concurrency,
        "rate": task.rate,
        "singleton": task.singleton,
        "schedules": list(task.schedules or ()),
        "_pgflow_task": task,
        "_pgflow_alias": task.backend,
        STEP: step(**step_options)(body),
    }
    return WorkflowType(task.func.__name__, (TaskWorkflow,), namespace)


def task_of(workflow: TaskWorkflow) -> Any:
    """The task as it was enqueued (its queue, priority and run_after as stored on the run)."""
    return stored_task(type(workflow)._pgflow_task, workflow.input)


def stored_task(task: Any, stored: dict[str, Any]) -> Any:
    run_after = stored.get("run_after")
    return task.using(
        priority=stored.get("priority", task.priority),
        queue_name=stored.get("queue_name", task.queue_name),
        run_after=parse_datetime(run_after) if run_after else None,
    )


def _result(workflow: TaskWorkflow) -> Any:
    run = workflow.run
    run.refresh_from_db(fields=["status", "finished_at", "created_at", "input"])
    return results.task_result(task_of(workflow), run, results.attempts_of(run.pk), alias=type(workflow)._pgflow_alias)


def run_task(workflow: TaskWorkflow) -> Any:
    """The step's body: the task's function, between Django's task_started and task_finished."""
    task = task_of(workflow)
    result = _result(workflow)
    task_started.send(sender=_backend_class(), task_result=result)
    args, kwargs = workflow.input.get("args", []), workflow.input.get("kwargs", {})
    if task.takes_context:
        raw = task.call(TaskContext(task_result=result), *args, **kwargs)
    else:
        raw = task.call(*args, **kwargs)
    # What get_result will read (tuples as lists). A value the run cannot store fails the task
    # here, before task_finished says it succeeded: not JSON (json's own TypeError, "Object of
    # type function is not JSON serializable"), NaN, a NUL character.
    value = json.loads(jsonvalue.encode(raw, f"the return value of task {task.module_path}"))
    task_finished.send(
        sender=_backend_class(),
        task_result=results.with_state(result, mapping.SUCCESSFUL, finished_at=timezone.now(), value=value),
    )
    return value


def _after_failure(workflow: TaskWorkflow, error: BaseException) -> None:
    """The task's last policy: re-attempt while ``max_attempts`` and ``backoff`` allow, else cancel
    the run (the task reads FAILED), sending task_finished."""
    task = type(workflow)._pgflow_task
    result = _result(workflow)
    attempt = workflow.attempt or 1
    if attempt < (task.max_attempts or 1):
        wait = task.backoff(error, result) if task.backoff is not None else 0
        if wait is not None:
            workflow.reattempt(wait=max(float(wait), 0.0) or None)
    task_finished.send(
        sender=_backend_class(),
        task_result=results.with_state(result, mapping.FAILED, finished_at=timezone.now(), error=error),
    )
    workflow.cancel()


def _backend_class() -> type:
    # cycle: backend -> here (the backend makes these classes; the signals name it as their sender)
    from .backend import PgflowBackend

    return PgflowBackend
