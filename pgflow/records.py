"""A run's parts as plain values, the same for every reader that answers in JSON: the
command line (``manage.py pgflow``) and the MCP server."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .core.states import RunStatus, StepStatus
from .exceptions import PgflowError
from .models import Batch, Signal, WorkflowRun


def subject_label(run: WorkflowRun) -> str | None:
    """``app_label.model:id`` of the run's subject, or None when it has none."""
    if run.subject_type_id is None or run.subject_id is None:
        return None
    content_type = run.subject_type
    return f"{content_type.app_label}.{content_type.model}:{run.subject_id}" if content_type else run.subject_id


def signal_rows(signals: Iterable[Signal]) -> list[dict[str, Any]]:
    return [
        {"name": s.name, "payload": s.payload, "received_at": s.received_at, "consumed_at": s.consumed_at}
        for s in signals
    ]


def batch_rows(batches: Iterable[Batch]) -> list[dict[str, Any]]:
    return [
        {
            "id": b.pk,
            "description": b.description,
            "status": b.status,
            "total": b.total,
            "succeeded": b.succeeded,
            "failed": b.failed,
            "created_at": b.created_at,
            "finished_at": b.finished_at,
        }
        for b in batches
    ]


def signal_effect(run: WorkflowRun, name: str) -> str:
    """What sending signal ``name`` to ``run`` would do, for a dry run's answer."""
    step = run.step_set.filter(status=StepStatus.WAITING, batch__isnull=True).first()
    if step is not None and run.status == RunStatus.RUNNING:
        try:
            definition = run.workflow().steps().get(step.step_name)
        except PgflowError:
            definition = None
        if definition is not None and definition.wait_for == name:
            return f"it wakes step {step.step_name}, which waits for it"
    return "it is kept until a step waiting for that name consumes it"
