"""The no-op tasks benchmarks/tasks.py enqueues: one on pgflow's backend (TASKS["default"]), one
on django-tasks-db's (TASKS["db"], the dev extras). Imported once Django is set up (``@task``
reads TASKS), by the benchmark and by each worker when it runs the first one."""

from __future__ import annotations

from pgflow.tasks.compat import task


@task
def pgflow_noop() -> None:
    return None


@task(backend="db")
def db_noop() -> None:
    return None
