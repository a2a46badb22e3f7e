"""Holding and losing a claimed attempt: its lease heartbeated (``heartbeat``), handed back
at shutdown (``hand_back``), its worker back after losing its connection (``reconnected``),
and a lost lease or connection (``recover_lost``, ``connection_lost``): the attempt
re-scheduled, or its run paused past MAX_LOST_ATTEMPTS.
``held_attempt`` is the fencing check every later write of a claimed attempt makes (its
claim token). Taking the attempts is in ``claims``.
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from ..conf import pgflow_settings
from ..core.events import SYSTEM, EventKind
from ..core.flow import HANDED_BACK, LOST
from ..core.states import RunStatus, StepStatus
from ..db import connection
from ..models import Step, WorkflowRun
from .claims import Claim
from .locking import event, locked, now
from .scheduling import reschedule_same
from .transitions import close_attempt, pause_run

logger = logging.getLogger("pgflow")


def heartbeat(tokens: list[uuid.UUID], *, at: datetime | None = None) -> int:
    """Extend the lease of every attempt still held under ``tokens``; returns how many."""
    if not tokens:
        return 0
    until = (at or now()) + timedelta(seconds=pgflow_settings.seconds("LEASE"))
    # SKIP LOCKED: a row locked now is being finished, and waiting on it could deadlock
    # with a batch of finishes that locks rows in another order.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgflow_step_live SET lease_expires_at = %s WHERE id IN (SELECT id FROM pgflow_step_live "
            "WHERE claim_token = ANY(%s) AND status = 'in_progress' ORDER BY id FOR UPDATE SKIP LOCKED)",
            [until, list(tokens)],
        )
        return cursor.rowcount


def held_attempt(run: WorkflowRun, held: Claim) -> Step | None:
    """The claimed attempt, locked, if it is still in progress under our token."""
    return (
        Step.objects.live()
        .select_for_update()
        .filter(pk=held.step_id, run=run, status=StepStatus.IN_PROGRESS, claim_token=held.token)
        .first()
    )


def log_ignored(held: Claim, why: str) -> None:
    logger.warning(
        "late completion ignored: run=%s step=%s attempt=%s: %s",
        held.run_id,
        held.step_name,
        held.attempt,
        why,
        extra={"action": "late_completion_ignored", "run_id": held.run_id},
    )


def hand_back(held: list[Claim], *, at: datetime | None = None) -> int:
    """A shutting-down worker gives its unfinished attempts back: each closes and a fresh
    attempt is due at once for another worker. Returns how many were handed back."""
    at = at or now()
    count = 0
    for item in held:
        with locked(item.run_id) as run:
            step = held_attempt(run, item)
            if step is None:
                continue
            close_attempt(step, status=StepStatus.CANCELLED, outcome=HANDED_BACK, at=at)
            event(run, EventKind.HANDED_BACK, step=step, at=at)
            if run.status == RunStatus.RUNNING:
                reschedule_same(run, step, at=at)
                run.save(update_fields=["current_step", "updated_at"])
            count += 1
    return count


def recover_lost(step_id: int, *, at: datetime) -> bool:
    """An attempt whose worker stopped heartbeating: close it as lost, then a fresh attempt
    due now, or a pause once the step lost its worker MAX_LOST_ATTEMPTS times in a row."""
    run_id = Step.objects.live().filter(pk=step_id).values_list("run_id", flat=True).first()
    if run_id is None:
        return False
    with locked(run_id) as run:
        step = (
            Step.objects.live()
            .select_for_update()
            .filter(pk=step_id, status=StepStatus.IN_PROGRESS, lease_expires_at__lt=at)
            .first()
        )
        if step is None:
            return False  # it finished or heartbeated since we looked
        error = {
            "error_class": "pgflow.LeaseExpired",
            "error_message": f"worker {step.worker or '?'} stopped heartbeating; the lease ran out at "
            f"{step.lease_expires_at:%Y-%m-%d %H:%M:%S %Z}",
            "error_backtrace": "",
            "error_causes": [],
        }
        lost = _close_lost(run, step, at=at, error=error, why="its body may crash the worker process")
    logger.warning(
        "run=%s step=%s attempt=%s lost its worker %s (%d in a row)",
        run_id,
        step.step_name,
        step.attempt,
        step.worker,
        lost,
        extra={"action": "lease_lost", "run_id": run_id},
    )
    return True


def reconnected(tokens: list[uuid.UUID], *, worker: str, away_seconds: float, at: datetime | None = None) -> int:
    """The worker holding ``tokens`` lost its database connection and is back: a RECONNECTED
    event on the run of each attempt still held under them (its timeline then shows the
    gap). Only the audit trail is written: no state changes, so no run lock; returns how many."""
    if not tokens:
        return 0
    details = {"worker": worker, "away_seconds": round(away_seconds, 1)}
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgflow_event_live (run_id, step_id, event, actor, details, created_at) "
            "SELECT run_id, id, %s, %s, %s::jsonb, %s FROM pgflow_step_live "
            "WHERE claim_token = ANY(%s) AND status = 'in_progress' ORDER BY id",
            [EventKind.RECONNECTED.value, SYSTEM, json.dumps(details), at or now(), tokens],
        )
        return cursor.rowcount


def connection_lost(held: Claim, error: dict[str, Any], *, at: datetime | None = None) -> bool:
    """A body that failed only because the database went away under it (a restart, a
    failover: its connection died) is re-attempted as a lost worker's is, not failed through
    its policies: the attempt closes as lost with the body's error, and a fresh attempt is due
    now, or the run pauses once the step was lost MAX_LOST_ATTEMPTS times in a row (a body
    that kills its own connection every time). False when the attempt was no longer ours."""
    at = at or now()
    with locked(held.run_id) as run:
        step = held_attempt(run, held)
        if step is None:
            return False
        lost = _close_lost(run, step, at=at, error=error, why="the database went away under it each time")
    logger.warning(
        "run=%s step=%s attempt=%s lost its database connection (%d lost in a row): %s",
        held.run_id,
        held.step_name,
        held.attempt,
        lost,
        error.get("error_message", ""),
        extra={"action": "connection_lost", "run_id": held.run_id},
    )
    return True


def _close_lost(run: WorkflowRun, step: Step, *, at: datetime, error: dict[str, Any], why: str) -> int:
    """Close ``step`` (locked with ``run``) as lost, then a fresh attempt due now, or a pause
    past MAX_LOST_ATTEMPTS lost in a row; returns how many in a row."""
    close_attempt(step, status=StepStatus.FAILED, outcome=LOST, at=at, error=error)
    lost = _lost_in_a_row(step)
    limit = pgflow_settings.MAX_LOST_ATTEMPTS
    event(run, EventKind.LEASE_LOST, step=step, at=at, worker=step.worker, lost_in_a_row=lost)
    if run.status != RunStatus.RUNNING:
        return lost  # paused while it ran: resume() schedules the fresh attempt
    if lost >= limit:
        reason = f"step {step.step_name} lost its worker {lost} times in a row (MAX_LOST_ATTEMPTS={limit}); {why}"
        pause_run(run, at, step=step, reason=reason)
    else:
        reschedule_same(run, step, at=at)
        run.save(update_fields=["current_step", "updated_at"])
    return lost


def _lost_in_a_row(step: Step) -> int:
    outcomes = (
        Step.objects.live()
        .filter(run_id=step.run_id, step_name=step.step_name)
        .order_by("-created_at", "-id")
        .values_list("outcome", flat=True)
    )
    count = 0
    for outcome in outcomes:
        if outcome != LOST:
            break
        count += 1
    return count
