"""A Django task as a fan-out member: ``batch.add(some_task, *args, **kwargs)`` in a ``@fan_out``.

A task of pgflow's backend becomes a child run (as ``batch.add_run`` makes one), started when
the batch opens and counted as succeeded when it finishes, failed when it gives up. A task of
another backend is refused for now, naming the backend.
"""

from __future__ import annotations

from typing import Any, cast

from ..workflow import Workflow
from . import workflows
from .backend import PgflowBackend, PgflowTask, stored_input
from .compat import Task


def child_of(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[type[Workflow], dict[str, Any], Any]:
    """``(workflow class, input, key)`` of the child run that runs ``task(*args, **kwargs)``."""
    if not isinstance(task, Task):
        raise TypeError(f"batch.add() takes a django.tasks Task here, got {task!r}")
    backend: Any = task.get_backend()
    if not isinstance(backend, PgflowBackend):
        raise TypeError(
            f"batch.add({task.module_path}): its backend {task.backend!r} is {type(backend).__name__}; a fan-out "
            "takes tasks of pgflow.tasks.PgflowBackend (each a child run), django-q2 tasks, or batch.add_run"
        )
    backend.validate_task(task)  # refuses any but a PgflowTask
    given = cast(PgflowTask, task).key
    key = given(*args, **kwargs) if callable(given) else given
    try:
        data = stored_input(task, args, kwargs)
    except TypeError as exc:
        raise TypeError(f"batch.add({task.module_path}): its args and kwargs must be JSON: {exc}") from None
    return workflows.variant_of(task), data, key
