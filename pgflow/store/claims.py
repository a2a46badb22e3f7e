"""The lease protocol: claiming due attempts, heartbeating their leases, handing them back, and
the claimed attempt's fencing check (its claim token)."""

from __future__ import annotations

import logging
import uuid
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import connection, transaction

from ..conf import pgflow_settings
from ..core.events import EventKind
from ..core.flow import HANDED_BACK, LOST
from ..core.states import RunStatus, StepStatus
from ..models import Step, WorkflowRun
from .locking import event, locked, now
from .scheduling import reschedule_same
from .transitions import close_attempt, pause_run

if TYPE_CHECKING:
    pass

logger = logging.getLogger("pgflow")


# --- the worker's side: claim, prepare, finish ----------------------------------------------

# The run's columns come back with each claimed attempt, so a plain step needs no other
# read before its body runs.
_RUN_COLUMNS = (
    "workflow_class",
    "status",
    "current_step",
    "subject_type_id",
    "subject_id",
    "input",
    "key",
    "definition_digest",
    "created_at",
    "updated_at",
    "finished_at",
    "paused_reason",
    "traceparent",
)
# The attempt's own timestamps, for its trace span and metrics (pgflow.observability).
_STEP_COLUMNS = ("created_at", "scheduled_at", "waiting_since", "queue")
# What a claim reads of the attempt (s) and its run (r): Claim's fields, then run_fields.
_CLAIMED = (
    "s.id, s.run_id, s.step_name, s.attempt, s.claim_token, s.started_at, "
    + ", ".join(f"r.{column}" for column in _RUN_COLUMNS)
    + "".join(f", s.{column}" for column in _STEP_COLUMNS)
)
_RETURNING = "RETURNING " + _CLAIMED

# Each queue's due attempts in its own ordered scan of the claim index (LATERAL), merged
# and cut to the limit. With ``queue = ANY(...)`` the claim index cannot give the order
# across queues, so PostgreSQL would read and sort every due row of the queues: ~60 ms a
# claim behind a backlog of 100,000 due attempts instead of ~2. Each scan stops at the
# number due (counted, up to the limit, on pgflow_step_due): past the due rows of a
# priority lie its delayed ones, and a scan asked for more than are due walks them all.
# SKIP LOCKED sits in the per-queue scans; a candidate cut by the merge is unlocked when
# the statement ends. The runs are joined to the claimed rows only: joined inside the
# UPDATE, a planner working from stale statistics (a table just truncated or filled) drove
# the claim from every run instead.
CLAIM_SQL = (
    """
WITH candidates AS (
    SELECT c.id, c.priority, c.scheduled_at
    FROM unnest(%(queues)s::text[]) AS q(name),
    LATERAL (
        SELECT id, priority, scheduled_at FROM pgflow_step
        WHERE status = 'scheduled' AND queue = q.name AND scheduled_at <= %(now)s
        ORDER BY priority DESC, scheduled_at, id
        LIMIT least(%(limit)s, (SELECT count(*) FROM (
            SELECT 1 FROM pgflow_step WHERE status = 'scheduled' AND queue = q.name
                AND timezone('UTC', scheduled_at) <= timezone('UTC', %(now)s::timestamptz)
            ORDER BY timezone('UTC', scheduled_at) LIMIT %(limit)s) AS due_now))
        FOR UPDATE SKIP LOCKED
    ) AS c
), due AS (
    SELECT id FROM candidates ORDER BY priority DESC, scheduled_at, id LIMIT %(limit)s
), claimed AS (
    UPDATE pgflow_step AS s
    SET status = 'in_progress', started_at = %(now)s, worker = %(worker)s, claim_token = gen_random_uuid(),
        lease_expires_at = %(lease_until)s
    FROM due WHERE s.id = due.id
    RETURNING s.id, s.run_id, s.step_name, s.attempt, s.claim_token, s.started_at, s.created_at, s.scheduled_at,
              s.waiting_since, s.queue
)
SELECT """
    + _CLAIMED
    + """ FROM claimed AS s JOIN pgflow_run AS r ON r.id = s.run_id
"""
)


@dataclass(frozen=True, kw_only=True)
class Claim:
    """An attempt this worker holds: every write for it checks ``token``."""

    step_id: int
    run_id: int
    step_name: str
    attempt: int
    token: uuid.UUID
    started_at: datetime
    run_fields: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    step_fields: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # _STEP_COLUMNS

    def run(self) -> WorkflowRun:
        """The run as it was at the claim (no query); ``refresh_from_db()`` for now."""
        run = WorkflowRun(id=self.run_id, **self.run_fields)
        run._state.adding = False
        run._state.db = "default"
        return run


def _claims(rows: list[tuple[Any, ...]]) -> list[Claim]:
    import json as _json

    claims = []
    for row in rows:
        fields = dict(zip(_RUN_COLUMNS, row[6 : 6 + len(_RUN_COLUMNS)], strict=True))
        if isinstance(fields["input"], str):  # a raw cursor may hand jsonb back as text
            fields["input"] = _json.loads(fields["input"])
        claims.append(
            Claim(
                step_id=row[0],
                run_id=row[1],
                step_name=row[2],
                attempt=row[3],
                token=row[4],
                started_at=row[5],
                run_fields=fields,
                step_fields=dict(zip(_STEP_COLUMNS, row[6 + len(_RUN_COLUMNS) :], strict=True)),
            )
        )
    return claims


def claim(*, worker: str, queues: list[str], limit: int, at: datetime | None = None) -> list[Claim]:
    """Take up to ``limit`` due attempts in one statement (``FOR UPDATE SKIP LOCKED``)."""
    if limit <= 0:
        return []
    at = at or now()
    lease_until = at + timedelta(seconds=pgflow_settings.seconds("LEASE"))
    # One statement is its own transaction: no BEGIN and COMMIT round trips around it.
    with connection.cursor() as cursor:
        _claims_without_flush_wait(cursor)
        cursor.execute(
            CLAIM_SQL, {"queues": queues, "now": at, "limit": limit, "worker": worker, "lease_until": lease_until}
        )
        rows = cursor.fetchall()
    return _claims(rows)


# The claim's commit does not wait for the WAL flush (docs/reliability.md, "The claim's
# commit"): a claim lost with the server's last ~0.6 s of commits leaves its attempt
# scheduled, to be claimed again, which at-least-once allows; any later durable commit (the
# attempt's outcome) flushes the claim before itself, as the WAL is written in order. Set
# once per connection: the worker's claim loop has its own, which writes nothing else that
# must be durable first (a lost hand-back is taken over after the lease).
_NO_FLUSH_WAIT: weakref.WeakSet[Any] = weakref.WeakSet()


def _claims_without_flush_wait(cursor: Any) -> None:
    raw = connection.connection
    if raw is not None and raw not in _NO_FLUSH_WAIT:
        cursor.execute("SET synchronous_commit = off")
        _NO_FLUSH_WAIT.add(raw)


# The earliest scheduled attempt of each queue (one probe each of pgflow_step_due), then the
# earliest of those.
NEXT_DUE_SQL = """
SELECT min(first.scheduled_at)
FROM unnest(%(queues)s::text[]) AS q(name),
LATERAL (SELECT scheduled_at FROM pgflow_step WHERE status = 'scheduled' AND queue = q.name
         ORDER BY timezone('UTC', scheduled_at) LIMIT 1) AS first
"""


def next_due(queues: list[str]) -> datetime | None:
    """When the next attempt on ``queues`` comes due (maybe already past); None when none is scheduled."""
    with connection.cursor() as cursor:
        cursor.execute(NEXT_DUE_SQL, {"queues": queues})
        row = cursor.fetchone()
    return row[0] if row else None


def heartbeat(tokens: list[uuid.UUID], *, at: datetime | None = None) -> int:
    """Extend the lease of every attempt still held under ``tokens``; returns how many."""
    if not tokens:
        return 0
    until = (at or now()) + timedelta(seconds=pgflow_settings.seconds("LEASE"))
    # SKIP LOCKED: a row locked now is being finished, and waiting on it could deadlock
    # with a batch of finishes that locks rows in another order.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgflow_step SET lease_expires_at = %s WHERE id IN (SELECT id FROM pgflow_step "
            "WHERE claim_token = ANY(%s) AND status = 'in_progress' ORDER BY id FOR UPDATE SKIP LOCKED)",
            [until, list(tokens)],
        )
        return cursor.rowcount


def held_attempt(run: WorkflowRun, held: Claim) -> Step | None:
    """The claimed attempt, locked, if it is still in progress under our token."""
    return (
        Step.objects.select_for_update()
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


def claim_step(step_id: int, *, worker: str, at: datetime | None = None) -> Claim | None:
    """Claim one specific scheduled attempt, due or not (``pgflow.testing`` skips waits)."""
    at = at or now()
    lease_until = at + timedelta(seconds=pgflow_settings.seconds("LEASE"))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgflow_step AS s SET status = 'in_progress', started_at = %(now)s, worker = %(worker)s, "
            "claim_token = gen_random_uuid(), lease_expires_at = %(lease_until)s, "
            "scheduled_at = LEAST(s.scheduled_at, %(now)s) "
            "FROM pgflow_run AS r WHERE s.id = %(id)s AND s.status = 'scheduled' AND r.id = s.run_id " + _RETURNING,
            {"id": step_id, "now": at, "worker": worker, "lease_until": lease_until},
        )
        rows = cursor.fetchall()
    claims = _claims(rows)
    return claims[0] if claims else None


def recover_lost(step_id: int, *, at: datetime) -> bool:
    """An attempt whose worker stopped heartbeating: close it as lost, then a fresh attempt
    due now, or a pause once the step lost its worker MAX_LOST_ATTEMPTS times in a row."""
    run_id = Step.objects.filter(pk=step_id).values_list("run_id", flat=True).first()
    if run_id is None:
        return False
    with locked(run_id) as run:
        step = (
            Step.objects.select_for_update()
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
        close_attempt(step, status=StepStatus.FAILED, outcome=LOST, at=at, error=error)
        lost = _lost_in_a_row(step)
        limit = pgflow_settings.MAX_LOST_ATTEMPTS
        event(run, EventKind.LEASE_LOST, step=step, at=at, worker=step.worker, lost_in_a_row=lost)
        if run.status != RunStatus.RUNNING:
            return True  # paused while it ran: resume() schedules the fresh attempt
        if lost >= limit:
            reason = (
                f"step {step.step_name} lost its worker {lost} times in a row "
                f"(MAX_LOST_ATTEMPTS={limit}); its body may crash the worker process"
            )
            pause_run(run, at, step=step, reason=reason)
        else:
            reschedule_same(run, step, at=at)
            run.save(update_fields=["current_step", "updated_at"])
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


def _lost_in_a_row(step: Step) -> int:
    outcomes = (
        Step.objects.filter(run_id=step.run_id, step_name=step.step_name)
        .order_by("-created_at", "-id")
        .values_list("outcome", flat=True)
    )
    count = 0
    for outcome in outcomes:
        if outcome != LOST:
            break
        count += 1
    return count
