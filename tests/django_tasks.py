"""Tasks of Django's task framework, defined with Django's own ``@task``, run by pgflow's
backend (tests/acceptance/test_django_tasks.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pgflow
from pgflow import OnException
from pgflow.tasks import options

try:
    from django.tasks import TaskContext, task
    from django.tasks.signals import task_finished, task_started
except ImportError:  # Django 5.2: the backport
    from django_tasks import TaskContext, task  # type: ignore[no-redef]
    from django_tasks.signals import task_finished, task_started  # type: ignore[no-redef]


def _mark(line: str) -> None:
    # Each body appends a line to the marks file the acceptance tests read (PGFLOW_TEST_MARKS).
    path = os.environ.get("PGFLOW_TEST_MARKS")
    if path:
        with Path(path).open("a") as out:
            out.write(line + "\n")


def _heard(kind: str) -> Any:
    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        if task_result.task.name in ("add", "failing", "not_storable"):
            # The errors a receiver reads: the one that failed the task is among them.
            errors = ",".join(error.exception_class_path for error in task_result.errors)
            _mark(f"signal {kind} {task_result.task.name} {task_result.id} {task_result.status} [{errors}]")

    return receiver


_started, _finished = _heard("started"), _heard("finished")
task_started.connect(_started)
task_finished.connect(_finished)


@task()
def add(a: int, b: int) -> int:
    _mark(f"add {a} {b}")
    return a + b


@task
def complex_value(name: str) -> Any:
    return {"name": name, "pair": (1, 2), "nested": [{"x": None, "y": 1.5}], "ok": True}


@task()
def not_storable() -> Any:
    return {"ratio": float("nan")}  # JSON to Python's json module, not to PostgreSQL's jsonb


@task()
def not_json() -> Any:
    return lambda: True


@task()
def failing() -> None:
    raise ValueError("This task failed due to ValueError")


def _two_seconds(exception: BaseException, task_result: Any) -> float:
    return 0.2 * task_result.attempts


@options(max_attempts=3, backoff=_two_seconds)
@task(takes_context=True)
def flaky(context: TaskContext, succeed_on: int) -> int:
    _mark(f"flaky attempt {context.attempt}")
    if context.attempt < succeed_on:
        raise ConnectionError(f"attempt {context.attempt} failed")
    return context.attempt


@task(takes_context=True)
def context_of(context: TaskContext) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt, "status": str(context.task_result.status)}


@options(key=lambda order_id: f"receipt:{order_id}")
@task
def receipt(order_id: int) -> int:
    _mark(f"receipt {order_id}")
    return order_id


@task(priority=10, queue_name="urgent")
def urgent(n: int) -> int:
    _mark(f"urgent {n}")
    return n


@task()
def plain(n: int) -> int:
    _mark(f"plain {n}")
    return n


@task()
async def async_double(n: int) -> int:
    return n * 2


@options(on_exception=OnException(LookupError, action="pause"), timeout=30)
@task
def needs_flag(flag: str) -> str:
    # Pauses (a policy of its own) until the operator has made the file, then succeeds.
    if not Path(flag).exists():
        raise LookupError(f"no {flag} yet")
    return "done"


@task
def slow(seconds: float) -> None:
    time.sleep(seconds)


@options(timeout=0.5)
@task
def too_slow() -> None:
    time.sleep(5)


class TaskFanOut(pgflow.Workflow):
    """A fan-out whose members are Django tasks of pgflow's backend: each a child run."""

    @pgflow.fan_out(on_batch_failure="cancel")
    def spread(self, batch: Any) -> None:
        for n in self.input["numbers"]:
            batch.add(add, n, b=1)
        if self.input.get("fail"):
            batch.add(failing)

    @pgflow.step
    def total(self) -> list[int]:
        return sorted(child.outputs["task"] for child in self.children("spread"))


@options(max_attempts=2)
@task
def exits() -> None:
    _mark("exits attempt")
    raise SystemExit("This task failed due to SystemExit")


@task
def interrupted() -> None:
    raise KeyboardInterrupt("This task failed due to KeyboardInterrupt")


# Once a year (as tests/schedule_workflows.py's): post_migrate syncs a declared schedule again
# after every flush, and a tick due while another module's worker runs would start a run there.
@options(schedules=[pgflow.Schedule(name="nightly", cron="0 0 1 1 *", input={"args": [20], "kwargs": {"b": 22}})])
@task
def scheduled_add(a: int, b: int) -> int:
    return a + b


# Tasks of another backend: TASKS["db"] is django-tasks-db's DatabaseBackend (the dev extras),
# run by its own `manage.py db_worker` (tests/acceptance/test_django_tasks_fanout.py).


@task(backend="db")
def db_add(a: int, b: int) -> int:
    _mark(f"db_add {a} {b}")
    return a + b


@task(backend="db")
def db_failing() -> None:
    raise ValueError("This db task failed due to ValueError")


class DbTaskFanOut(pgflow.Workflow):
    """A fan-out whose members are django-tasks-db tasks: enqueued there, counted when they finish."""

    @pgflow.fan_out(on_batch_failure="cancel")
    def spread(self, batch: Any) -> None:
        for n in self.input["numbers"]:
            batch.add(db_add, n, b=1)
        if self.input.get("fail"):
            batch.add(db_failing)

    @pgflow.step
    def total(self) -> str:
        _mark(f"total after {len(self.input['numbers'])}")
        return "done"


@task
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))
