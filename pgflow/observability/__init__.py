"""Traces, metrics and alerts: the engine's few calls into its telemetry.

The engine calls only the functions below, one per place (start, the worker's attempt,
the runner's outcome, signals, fan-out members, the sweep), so what is measured lives here
and the engine stays readable. Each is a no-op when its extra (``[otel]``, ``[metrics]``) is
not installed or not configured, and none of them raises into the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..registry import resolve
from . import metrics, tracing

if TYPE_CHECKING:
    from ..models import WorkflowRun
    from ..runtime.runner import Result
    from ..store import Claim

logger = logging.getLogger("pgflow")


def run_starting(workflow_class: str) -> str | None:
    """Inside ``start()``'s transaction: counts the run on commit; returns the traceparent to store."""
    metrics.run_started(workflow_class)
    return tracing.current_traceparent()


def attempt(held: Claim, *, worker: str, execute: Callable[[Claim], Result]) -> Result:
    """Run one claimed attempt (``execute``) inside its span, ended with the outcome."""
    with tracing.attempt(held, worker=worker) as span:
        result = execute(held)
        if span is not None:
            span.ended(result.outcome)
    return result


async def attempt_async(held: Claim, *, worker: str, execute: Callable[[Claim], Awaitable[Result]]) -> Result:
    """``attempt`` for an async body: the span is current in its task while it awaits."""
    with tracing.attempt(held, worker=worker) as span:
        result = await execute(held)
        if span is not None:
            span.ended(result.outcome)
    return result


def attempt_failed(error: BaseException) -> None:
    """A body raised: the error goes on the current attempt's span."""
    tracing.record_failure(error)


def attempt_ended(held: Claim, outcome: str, *, applied: bool) -> None:
    """An attempt's final result (the runner's log line): counted in the worker's metrics."""
    if not metrics.counting():
        return
    try:
        metrics.attempt_ended(held, outcome, applied=applied, last_step=_is_last(held))
    except Exception:  # telemetry never breaks a step
        logger.exception("metrics: counting an attempt failed", extra={"action": "metrics_failed"})


def _is_last(held: Claim) -> bool:
    try:
        steps = resolve(held.run_fields.get("workflow_class", "")).steps()
    except Exception:  # noqa: BLE001 - a class gone is not the metrics' business
        return False
    return steps.get(held.step_name) is not None and steps.next_after(held.step_name) is None


def signal_sent(run: WorkflowRun, name: str) -> None:
    """Inside ``pgflow.signal()``'s transaction: counted on commit, and a span linked to the run's trace."""
    metrics.signal_received(run.workflow_class, name)
    tracing.linked(
        f"pgflow signal {name}",
        traceparent=run.traceparent,
        attributes={"pgflow.run_id": run.pk, "pgflow.workflow_class": run.workflow_class, "pgflow.signal": name},
    )


def member_finished(batch_id: Any, position: int, *, succeeded: bool, at: Any) -> None:
    """A fan-out member's final result: a span from its enqueue to ``at``, linked to its run's trace."""
    if not tracing.enabled():
        return
    from ..models import BatchMember  # lazy: app registry; pgflow.observability imports before the models load

    member = (
        BatchMember.objects.filter(batch_id=batch_id, position=position)
        .values("func", "enqueued_at", "batch__run_id", "batch__run__workflow_class", "batch__run__traceparent")
        .first()
    )
    if member is None:
        return
    tracing.linked(
        f"pgflow member {member['func']}",
        traceparent=member["batch__run__traceparent"],
        attributes={
            "pgflow.run_id": member["batch__run_id"],
            "pgflow.workflow_class": member["batch__run__workflow_class"],
            "pgflow.member": position,
            "pgflow.outcome": "succeeded" if succeeded else "failed",
        },
        start=member["enqueued_at"],
        end=at,
    )
