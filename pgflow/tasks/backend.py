"""``PgflowBackend``: Django's task framework on pgflow's durable runs.

``TASKS = {"default": {"BACKEND": "pgflow.tasks.PgflowBackend", "QUEUES": [...], "OPTIONS": {...}}}``.
``enqueue()`` starts a one-step run (:mod:`.workflows`) in the caller's transaction, so the task
exists only if that transaction commits; ``pgflow_worker`` runs it; ``get_result()`` reads it back
from any process (:mod:`.results`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .. import db, store
from ..core.limits import Limit, Rate, Singleton
from ..core.policy import OnException
from ..core.ticks import Schedule
from ..exceptions import WorkflowNotFound
from ..models import WorkflowRun
from ..registry import resolve
from . import results, workflows
from . import taskoptions as task_options
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResultDoesNotExist,
    task_enqueued,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PgflowTask(Task):
    """A Django ``Task`` with pgflow's options (docs/reference.md "Django tasks")."""

    max_attempts: int | None = None
    backoff: Callable[..., Any] | None = None
    timeout: timedelta | None = None
    key: str | Callable[..., Any] | None = None
    concurrency: Limit | None = None
    rate: Rate | None = None
    singleton: Singleton | None = None
    on_exception: tuple[OnException, ...] | None = None
    schedules: tuple[Schedule, ...] | None = None

    def __post_init__(self) -> None:
        Task.__post_init__(self)  # the backend's validate_task (no zero-argument super() with slots)
        if isinstance(self.get_backend(), PgflowBackend):
            workflows.workflow_of(self)


def _new_task(**values: Any) -> PgflowTask:
    """``task_class`` of the backend: Django's ``@task`` calls it with the task's fields and, on the
    backport, any other ``@task(...)`` keywords; pgflow's are checked here, naming what is accepted."""
    fields = {"priority", "func", "backend", "queue_name", "run_after", "takes_context"}
    given = {name: value for name, value in values.items() if name not in fields}
    func = values.get("func")
    where = f"@task on {getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)!r}"
    backend = _backend(values.get("backend", "default"))
    merged = {
        **backend.defaults,
        **task_options.checked(getattr(func, task_options.MARK, {}), where),
        **task_options.checked(given, where),
    }
    return PgflowTask(**{name: value for name, value in values.items() if name in fields}, **merged)


def _backend(alias: str) -> PgflowBackend:
    # lazy: the handler is Django's, made per alias from TASKS once settings are read
    from .compat import task_backends

    backend = task_backends[alias]
    assert isinstance(backend, PgflowBackend), f"TASKS[{alias!r}] is {type(backend).__name__}"
    return backend


class PgflowBackend(BaseTaskBackend):
    """Every ``@task`` of this backend is a durable pgflow run."""

    task_class = staticmethod(_new_task)  # type: ignore[assignment]
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        try:
            self.defaults = task_options.checked(self.options, f"TASKS[{alias!r}]['OPTIONS']")
        except InvalidTask as exc:
            raise ImproperlyConfigured(str(exc)) from None

    def validate_task(self, task: Any) -> None:
        super().validate_task(task)
        if not isinstance(task, PgflowTask):
            raise InvalidTask(
                f"{task.module_path} is a {type(task).__name__}; PgflowBackend runs the tasks its own @task makes "
                "(define it with @task(backend=...) naming this backend)"
            )

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        key = task.key(*args, **kwargs) if callable(task.key) else task.key
        try:
            stored = stored_input(task, args, kwargs)
        except TypeError as exc:
            raise InvalidTask(f"{task.module_path}: its args and kwargs must be JSON: {exc}") from None
        run = store.start_run(workflows.variant_of(task), input=stored, key=key, due_at=task.run_after)
        new = store.created(run)  # not the run of an existing key, nor a racing enqueue's
        result = results.task_result(task, run, [] if new else results.attempts_of(run.pk), alias=self.alias)
        if new:
            # Sent once the run is visible to workers (at once outside a transaction).
            db.on_commit(lambda: task_enqueued.send(type(self), task_result=result))
        return result

    def get_result(self, result_id: str) -> Any:
        try:
            pk = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(f"no task result {result_id!r}: ids are run ids (whole numbers)") from None
        run = WorkflowRun.objects.filter(pk=pk).first()
        if run is None:
            raise TaskResultDoesNotExist(f"no task result {result_id!r}")
        try:
            workflow = resolve(run.workflow_class)
        except WorkflowNotFound as exc:
            raise TaskResultDoesNotExist(
                f"run #{pk} is of {run.workflow_class}, which does not import: {exc}"
            ) from None
        if not issubclass(workflow, workflows.TaskWorkflow):
            raise TaskResultDoesNotExist(f"run #{pk} is a run of the workflow {run.workflow_class}, not a task")
        task = workflows.stored_task(workflow._pgflow_task, run.input or {})
        return results.task_result(task, run, results.attempts_of(pk), alias=self.alias)


def stored_input(task: Any, args: Any, kwargs: Any) -> dict[str, Any]:
    """The run's input: the call and the task's per-enqueue fields, as get_result reads them back
    (JSON: tuples as lists); a value JSON cannot hold raises TypeError."""
    value = {
        "args": list(args),
        "kwargs": dict(kwargs),
        "queue_name": task.queue_name,
        "priority": task.priority,
        "run_after": task.run_after.isoformat() if task.run_after else None,
    }
    loaded: dict[str, Any] = json.loads(json.dumps(value))
    return loaded
