"""A ``TaskResult`` read from a task's run and its attempts (the status table: :mod:`.mapping`)."""

from __future__ import annotations

import traceback
from datetime import datetime
from typing import Any

from ..models import Step, WorkflowRun
from . import mapping
from .compat import TaskError, TaskResult, TaskResultStatus

ATTEMPT_FIELDS = (
    "status",
    "started_at",
    "finished_at",
    "worker",
    "output",
    "error_class",
    "error_message",
    "error_backtrace",
)


def attempts_of(run_id: int) -> list[mapping.Attempt]:
    rows = Step.objects.filter(run_id=run_id).order_by("created_at", "id").values_list(*ATTEMPT_FIELDS)
    return [mapping.Attempt(*row) for row in rows]


def task_result(task: Any, run: WorkflowRun, attempts: list[mapping.Attempt], *, alias: str) -> Any:
    """The TaskResult of ``task``'s run ``run`` as its rows stand."""
    state = mapping.status(run.status, attempts)
    ran = mapping.started(attempts)
    stored = run.input or {}
    result: Any = TaskResult(
        task=task,
        id=str(run.pk),
        status=TaskResultStatus(state),
        enqueued_at=run.created_at,
        started_at=ran[0].started_at if ran else None,
        last_attempted_at=ran[-1].started_at if ran else None,
        finished_at=mapping.finished_at(state, run.finished_at, attempts),
        args=list(stored.get("args", [])),
        kwargs=dict(stored.get("kwargs", {})),
        backend=alias,
        errors=[
            TaskError(
                exception_class_path=mapping.exception_class_path(a.error_class), traceback=mapping.traceback_text(a)
            )
            for a in attempts
            if a.error_class
        ],
        worker_ids=[a.worker for a in ran],
    )
    object.__setattr__(result, "_return_value", mapping.return_value(state, attempts))
    return result


def with_state(
    result: Any,
    status: str,
    *,
    finished_at: datetime | None = None,
    value: Any = None,
    error: BaseException | None = None,
) -> Any:
    """``result`` moved to ``status`` in memory: what a signal's receivers see before the commit,
    with ``error``, the one that failed it, as its last error (the rows have it once committed)."""
    object.__setattr__(result, "status", TaskResultStatus(status))
    if finished_at is not None:
        object.__setattr__(result, "finished_at", finished_at)
    object.__setattr__(result, "_return_value", value)
    if error is not None:
        kind = type(error)
        result.errors.append(
            TaskError(
                exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
                traceback="".join(traceback.format_exception(error)),
            )
        )
    return result
