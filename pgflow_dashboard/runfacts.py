"""The facts :func:`pgflow_dashboard.why.why` (and the MCP's ``explain_run``) read for one
run, as plain values: a handful of bounded queries, reads only."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pgflow.core.events import RUN_ENDS, EventKind
from pgflow.core.flow import OUTCOME_WORDS, REATTEMPT
from pgflow.exceptions import WorkflowNotFound
from pgflow.models import Batch, BatchMember, Event, QueueState, Worker, WorkflowRun

from . import runpage, timeline
from .why import FAN_OUT_FAILED, member_error, short_class

MAX_ATTEMPTS = 200  # the latest attempts read: the open one and the latest failure are among them


def facts(run: WorkflowRun, *, now: datetime) -> dict[str, Any]:
    steps, _total = runpage.latest_steps(run, runpage.STEP_FIELDS, limit=MAX_ATTEMPTS)
    runpage.mark_held(steps, now=now)
    phases = dict.fromkeys(timeline.PHASES, 0.0)
    for step in steps:
        for kind, seconds in timeline.durations(step, now=now).items():
            phases[kind] += seconds or 0.0
    failed = [step for step in steps if step["error_class"]]
    # The latest failure still explains the run when nothing came after it but fresh
    # attempts of the same step (a reattempt in flight).
    last_error = None
    member = None
    if failed:
        latest = failed[-1]
        later = steps[steps.index(latest) + 1 :]
        if not later or (
            latest["outcome"] == OUTCOME_WORDS[REATTEMPT]
            and all(step["step_name"] == latest["step_name"] for step in later)
        ):
            last_error = {
                key: latest[key] for key in ("step_name", "attempt", "error_class", "error_message", "outcome")
            }
            if short_class(latest["error_class"]) == FAN_OUT_FAILED and latest["batch_id"]:
                member = first_failed_member(latest["batch_id"])
    open_step = next((step for step in reversed(steps) if step["status"] in timeline.OPEN), None)
    if open_step is not None:
        open_step = dict(open_step)
        open_step.update(_waits(run, open_step["step_name"]))
        if open_step["batch_id"]:
            batch = Batch.objects.filter(pk=open_step["batch_id"]).values("total", "succeeded", "failed").first()
            open_step["batch"] = batch
            open_step["children"] = runpage.with_children([open_step])[0].get("children")
    live_queues: dict[str, int] = {}
    for queues in Worker.objects.live(now).values_list("queues", flat=True):
        for queue in queues or []:
            live_queues[queue] = live_queues.get(queue, 0) + 1
    end = (
        Event.objects.filter(run=run, event__in=sorted(RUN_ENDS))
        .order_by("-created_at", "-id")
        .values_list("details", flat=True)
        .first()
    ) or {}
    paused_queues = (
        list(QueueState.objects.filter(paused=True, queue=open_step["queue"]).values_list("queue", flat=True))
        if open_step is not None
        else []
    )
    return {
        "status": run.status,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "paused_at": run.updated_at,
        "paused_reason": run.paused_reason,
        "end_reason": end.get("reason"),
        "phases": phases,
        "last_error": last_error,
        "member_error": member,
        "open_step": open_step,
        "live_queues": live_queues,
        "paused_queues": paused_queues,
        "definition_changed": runpage.definition(run).changed,
        "rerun_of": _rerun_of(run),
    }


def first_failed_member(batch_id: Any) -> dict[str, Any] | None:
    """The first failed member of a batch: its position, function and own error."""
    return first_failed_members([batch_id]).get(batch_id)


def first_failed_members(batch_ids: Iterable[Any], *, using: str | None = None) -> dict[Any, dict[str, Any]]:
    """For each batch with a failed member, its first (by position): ``{batch_id: {"position",
    "func", "error_class", "error_message"}}``, the error parsed by :func:`why.member_error`.
    What a ``FanOutFailed`` stands for on the run page, the run list and insights' stuck
    groups; one query whatever the number of batches."""
    wanted = {batch_id for batch_id in batch_ids if batch_id is not None}
    if not wanted:
        return {}
    rows = (
        BatchMember.objects.using(using)
        .filter(batch_id__in=wanted, status=BatchMember.Status.FAILED)
        .order_by("batch_id", "position")
        .distinct("batch_id")
        .values("batch_id", "position", "func", "error")
    )
    found = {}
    for row in rows:
        error_class, message = member_error(row["error"])
        found[row["batch_id"]] = {
            "position": row["position"],
            "func": row["func"],
            "error_class": error_class,
            "error_message": message,
        }
    return found


def _rerun_of(run: WorkflowRun) -> dict[str, Any] | None:
    """The run this one re-runs and the step it started from (its ``rerun_of`` event)."""
    if run.rerun_of_id is None:
        return None
    details = Event.objects.filter(run=run, event=EventKind.RERUN_OF).values_list("details", flat=True).first() or {}
    return {"run_id": run.rerun_of_id, "step_name": details.get("step_name", "?")}


def _waits(run: WorkflowRun, step_name: str) -> dict[str, Any]:
    try:
        definition = run.workflow().steps().get(step_name)
    except WorkflowNotFound:
        return {}
    if definition is None:
        return {}
    return {"wait_for": definition.wait_for, "on_timeout": definition.on_timeout}
