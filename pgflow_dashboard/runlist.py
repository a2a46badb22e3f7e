"""What the run list shows beyond the run's own columns: for one page of runs, each run's
open attempt (one query for the page), its fan-out's counts and child runs, the live
workers' queues and the paused queues (one query each), turned into the facts :func:`pgflow_dashboard.why.why` and
:func:`pgflow_dashboard.why.doing` read. Reads only, through ``readdb.alias()`` like the
list's own query (the replica inside the list's ``readdb.reading()``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pgflow import readdb
from pgflow.core.flow import OUTCOME_WORDS, PAUSE
from pgflow.exceptions import WorkflowNotFound
from pgflow.models import Batch, QueueState, Step, Worker, WorkflowRun
from pgflow.registry import resolve

from . import runfacts, runpage, timeline
from .why import FAN_OUT_FAILED, doing, short_class, why

OPEN_FIELDS = (
    "run_id",
    "step_name",
    "status",
    "queue",
    "created_at",
    "scheduled_at",
    "started_at",
    "waiting_since",
    "deadline_at",
    "worker",
    "lease_expires_at",
    "batch_id",
    "gate",
    "gate_max",
    "rate_gate",
    "rate_limit",
    "rate_per",
    "throttled_until",
)


def attach(runs: list[WorkflowRun], *, now: datetime) -> None:
    """Sets ``run.doing`` (``(kind, words)`` for the status badge) and ``run.why`` (the
    reason column) on each run of the page."""
    alias = readdb.alias()
    open_ids = [run.pk for run in runs if run.status == "running"]
    open_steps: dict[int, dict[str, Any]] = {}
    if open_ids:
        rows = (
            Step.objects.using(alias)
            .filter(run_id__in=open_ids, status__in=timeline.OPEN)
            .order_by("run_id", "-created_at", "-id")
            .values(*OPEN_FIELDS)
        )
        for row in rows:
            open_steps.setdefault(row["run_id"], row)  # the latest open attempt of each run
        runpage.mark_held(list(open_steps.values()), now=now)
    # A paused run's latest failure says why it paused (the run page reads it the same way).
    paused_ids = [run.pk for run in runs if run.status == "paused"]
    failures: dict[int, dict[str, Any]] = {}
    if paused_ids:
        failed = (
            Step.objects.using(alias)
            .filter(run_id__in=paused_ids, error_class__isnull=False)
            .order_by("run_id", "-created_at", "-id")
            .values("run_id", "step_name", "attempt", "error_class", "error_message", "outcome", "batch_id")
        )
        for row in failed:
            failures.setdefault(row["run_id"], dict(row))
    # A failed fan-out reads as its first failed member's own error (one query for the page).
    members = runfacts.first_failed_members(
        (row["batch_id"] for row in failures.values() if short_class(row["error_class"]) == FAN_OUT_FAILED),
        using=alias,
    )
    live: dict[str, int] = {}
    paused_queues: list[str] = []
    if open_steps:
        for queues in Worker.objects.using(alias).live(now).values_list("queues", flat=True):
            for queue in queues or ():
                live[queue] = live.get(queue, 0) + 1
        paused_queues = list(QueueState.objects.using(alias).filter(paused=True).values_list("queue", flat=True))
    # An open fan-out's counts, and a child batch's children: one query each for the page.
    batch_ids = [step["batch_id"] for step in open_steps.values() if step["batch_id"]]
    batches = {
        pk: {"total": total, "succeeded": succeeded, "failed": failed}
        for pk, total, succeeded, failed in Batch.objects.using(alias)
        .filter(pk__in=batch_ids)
        .values_list("id", "total", "succeeded", "failed")
    }
    children = {
        step["run_id"]: step["children"]
        for step in runpage.with_children(list(open_steps.values()))
        if "children" in step
    }
    waits: dict[tuple[str, str], dict[str, Any]] = {}
    for run in runs:
        step = open_steps.get(run.pk)
        if step is not None:
            key = (run.workflow_class, step["step_name"])
            if key not in waits:
                waits[key] = _waits(*key)
            step = {**step, **waits[key]}
            if step["batch_id"]:
                step["batch"] = batches.get(step["batch_id"]) or {"total": 0, "succeeded": 0, "failed": 0}
                step["children"] = children.get(run.pk)
        facts = {
            "status": run.status,
            "created_at": run.created_at,
            "finished_at": run.finished_at,
            "paused_at": run.updated_at,
            "paused_reason": run.paused_reason,
            "last_error": (cause := _pause_cause(failures.get(run.pk))),
            "member_error": members.get(cause["batch_id"]) if cause else None,
            "open_step": step,
            "live_queues": live,
            "paused_queues": paused_queues,
        }
        run.doing = doing(facts, now=now)  # type: ignore[attr-defined]
        run.why = why(facts, now=now) if run.status != "finished" else ""  # type: ignore[attr-defined]


def _pause_cause(failure: dict[str, Any] | None) -> dict[str, Any] | None:
    """The latest failure when it is the one that paused the run (its outcome says so)."""
    if failure is None or failure["outcome"] != OUTCOME_WORDS[PAUSE]:
        return None
    return failure


def _waits(workflow_class: str, step_name: str) -> dict[str, Any]:
    try:
        definition = resolve(workflow_class).steps().get(step_name)
    except WorkflowNotFound:
        return {}
    if definition is None:
        return {}
    return {"wait_for": definition.wait_for, "on_timeout": definition.on_timeout}
