"""What a task run reads as in Django's terms, from plain values: no Django, no database.

A task is a one-step run (:mod:`pgflow.tasks.workflows`); its ``TaskResult`` is read from the
run's status and its attempts (``Step`` rows, oldest first). docs/reference.md "Django tasks"
has the same table.

=====================================  ==============
run                                    TaskResult
=====================================  ==============
running, its attempt scheduled         READY
running, waiting to be re-attempted    READY
running, its attempt in progress       RUNNING
finished                               SUCCESSFUL
cancelled (policy gave up, operator)   FAILED
paused, its last attempt failed        FAILED (a resume re-attempts it: READY again)
paused otherwise (an operator)         READY (it runs once resumed)
=====================================  ==============
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

READY, RUNNING, SUCCESSFUL, FAILED = "READY", "RUNNING", "SUCCESSFUL", "FAILED"


@dataclass(frozen=True)
class Attempt:
    """The columns of one attempt that a TaskResult reads (``Step``'s field names)."""

    status: str
    started_at: datetime | None = None
    finished_at: datetime | None = None
    worker: str = ""
    output: Any = None
    error_class: str | None = None
    error_message: str | None = None
    error_backtrace: str | None = None


def status(run_status: str, attempts: Sequence[Attempt]) -> str:
    """The ``TaskResultStatus`` value of a run in ``run_status`` with these attempts."""
    if run_status == "finished":
        return SUCCESSFUL
    if run_status == "cancelled":
        return FAILED
    last = attempts[-1] if attempts else None
    if run_status == "paused":
        return FAILED if last is not None and last.status == "failed" else READY
    if last is not None and last.status == "in_progress":
        return RUNNING
    return READY


def finished_at(result_status: str, run_finished_at: datetime | None, attempts: Sequence[Attempt]) -> datetime | None:
    """When the task finished: the run's end, or a paused failed run's last attempt's end."""
    if result_status not in (SUCCESSFUL, FAILED):
        return None
    if run_finished_at is not None:
        return run_finished_at
    return attempts[-1].finished_at if attempts else None


def started(attempts: Sequence[Attempt]) -> list[Attempt]:
    """The attempts a worker started (what ``worker_ids`` and ``TaskContext.attempt`` count)."""
    return [a for a in attempts if a.started_at is not None]


def exception_class_path(error_class: str) -> str:
    """An importable path for a recorded error class: pgflow stores builtins bare (``ValueError``)."""
    return error_class if "." in error_class else f"builtins.{error_class}"


def traceback_text(attempt: Attempt) -> str:
    """The attempt's traceback as Python prints it, ending with ``Class: message``."""
    text = attempt.error_backtrace or ""
    bare = (attempt.error_class or "").rsplit(".", 1)[-1]
    message = attempt.error_message or ""
    last = f"{bare}: {message}" if message else bare
    lines = text.rstrip("\n").splitlines()
    if not lines or not (lines[-1] == last or lines[-1].startswith(f"{bare}:") or lines[-1].endswith(last)):
        lines.append(last)
    return "\n".join(lines) + "\n"


def return_value(result_status: str, attempts: Sequence[Attempt]) -> Any:
    """The output of the completed attempt of a SUCCESSFUL task, else None."""
    if result_status != SUCCESSFUL:
        return None
    for attempt in reversed(attempts):
        if attempt.status == "completed":
            return attempt.output
    return None
