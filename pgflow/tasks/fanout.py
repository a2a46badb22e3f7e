"""A Django task as a fan-out member: ``batch.add(some_task, *args, **kwargs)`` in a ``@fan_out``.

A task of pgflow's backend becomes a child run (as ``batch.add_run`` makes one), started when
the batch opens and counted as succeeded when it finishes, failed when it gives up. A task of
another backend (django-tasks-db, say) is enqueued on that backend as the batch opens and
counted when it finishes (:mod:`pgflow.fanout.djangotasks`).
"""

from __future__ import annotations

from typing import Any, cast

from ..fanout.builder import TASK_KEY, Member
from ..fanout.djangotasks import KIND
from ..fanout.djangotasks import problem as task_problem
from . import workflows
from .backend import PgflowBackend, PgflowTask, stored_input
from .compat import InvalidTask, Task


def member_of(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Member:
    """The member that runs ``task(*args, **kwargs)``: a child run of pgflow's backend's task,
    else the task to enqueue on its own backend."""
    if not isinstance(task, Task):
        raise TypeError(f"batch.add() takes a django.tasks Task here, got {task!r}")
    what = f"batch.add({task.module_path})"
    backend: Any = task.get_backend()
    try:
        backend.validate_task(task)  # pgflow's refuses any but a PgflowTask; each backend its own rules
    except InvalidTask as exc:
        raise TypeError(f"{what}: its backend {task.backend!r} refuses it: {exc}") from None
    try:
        data = stored_input(task, args, kwargs)
    except TypeError as exc:
        raise TypeError(f"{what}: its args and kwargs must be JSON: {exc}") from None
    if not isinstance(backend, PgflowBackend):
        if not backend.supports_get_result:
            raise TypeError(
                f"{what}: its backend {task.backend!r} ({type(backend).__name__}) cannot read a result back "
                "(supports_get_result is False), so a member whose finish was missed could never be counted; "
                "a fan-out takes tasks of backends that store their results (pgflow's, django-tasks-db, ...)"
            )
        reason = task_problem(task)
        if reason is not None:
            raise TypeError(f"{what}: {reason}")
        call = {name: data[name] for name in ("queue_name", "priority", "run_after")}
        return Member(
            func=task.module_path,
            args=tuple(data["args"]),
            kwargs={TASK_KEY: {"backend": task.backend, **call, "kwargs": data["kwargs"]}},
            handoff=KIND,
        )
    given = cast(PgflowTask, task).key
    key = given(*args, **kwargs) if callable(given) else given
    workflow = workflows.variant_of(task)
    return Member(func=workflow.workflow_path(), args=(), kwargs={"input": data, "key": key}, workflow=workflow)
