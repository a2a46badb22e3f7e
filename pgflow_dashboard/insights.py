"""The insights window's figures: aggregate SQL over indexed columns -> plain dicts.

Every windowed figure reads only rows whose indexed timestamp lies in
``[window.since(), window.now]`` and is aggregated by PostgreSQL, so the page costs the
same whether the tables hold a day or a year; no list here is unbounded. ``window.now`` is
fixed by the caller, once per request, so every figure and every link share one end.

What each figure counts, so the page and the JSON mean the same thing:

``runs_per_bucket``
    runs *started* (``created_at``) and runs that *ended* finished or cancelled
    (``finished_at``) in each bucket.
``step_failures_per_bucket``
    failed attempts (``status = 'failed'``: an error was recorded, whatever the policy then
    did) by the bucket of their ``finished_at``, split by the action taken (``outcome``).
``workflows``
    per workflow class, the runs started in the window by their status now; the success
    rate is finished / (finished + cancelled) among them; p50/p95 of finished runs'
    ``finished_at - created_at``.
``steps``
    per (class, step), attempts created in the window, how many failed, and p50/p95 of the
    waited / queued / ran phases (as ``timeline.segments`` splits them) over the attempts
    whose phase is over (over a systematic sample above PERCENTILE_SAMPLE attempts).
``errors``
    the most frequent ``error_class`` of the attempts that failed in the window.
``stuck``
    the state *now*, whatever the window: runs paused, attempts due but unclaimed for longer
    than :data:`OVERDUE_AFTER`, attempts in progress past their lease, signal waits past
    their deadline, and open runs started on a definition that has changed since.

Datetimes stay ``datetime`` objects (aware, UTC); ``DjangoJSONEncoder`` writes them as ISO 8601.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction

from pgflow.exceptions import WorkflowNotFound
from pgflow.registry import resolve

from .window import WorkflowWindow

OVERDUE_AFTER = timedelta(minutes=5)  # a due attempt no worker claimed for this long is stuck
STUCK_LIMIT = 50  # rows listed per stuck category (the count is always exact)
TOP_ERRORS = 10
PERCENTILES = (0.5, 0.95)
PERCENTILE_SAMPLE = 50_000  # attempts: above this, per-step percentiles use a systematic sample
ENDED = ("finished", "cancelled")
FAILURE_OUTCOMES = ("reattempted", "paused", "cancelled", "skipped")

# One attempt's phases, as pgflow_dashboard.timeline.segments splits them, in SQL. A phase
# is NULL until it is over, so percentile_cont (which skips NULLs) only sees finished ones.
# "woken" is a signal step parked before its body and scheduled again when the signal came.
_PHASES_SQL = """
    CASE WHEN s.waiting_since IS NOT NULL AND s.waiting_since < s.scheduled_at
         THEN s.waiting_since ELSE s.scheduled_at END AS waited_end,
    s.created_at, s.scheduled_at, s.started_at, s.finished_at, s.waiting_since, s.status,
    (s.waiting_since IS NOT NULL AND s.waiting_since >= s.scheduled_at) AS parked_after_body
"""


def compute(window: WorkflowWindow) -> dict[str, Any]:
    """Every figure of the window as one JSON-ready dict (see the module docstring)."""
    with transaction.atomic(), connection.cursor() as cursor:
        # Scoped to this transaction. JIT compiles each of these one-off aggregates for
        # tens of milliseconds and saves less; 4 MB of work_mem sends a month's sort to disk.
        cursor.execute("SET LOCAL jit = off")
        cursor.execute("SET LOCAL work_mem = '64MB'")
        failures = _failures(window)
        return {
            "window": {**window.to_dict(), "since": window.since(), "now": window.now},
            "runs_per_bucket": runs_per_bucket(window),
            "step_failures_per_bucket": step_failures_per_bucket(window, failures),
            "workflows": workflows(window),
            "steps": steps(window),
            "errors": top_errors(window, failures),
            "stuck": stuck(window.now),
        }


# --- buckets ------------------------------------------------------------------------------


def _bounds(window: WorkflowWindow) -> dict[str, Any]:
    return {"since": window.since(), "now": window.now, "bucket": window.bucket_seconds}


def _bucket_key(moment: datetime, bucket_seconds: int) -> int:
    return int(moment.timestamp()) // bucket_seconds


def _empty_buckets(window: WorkflowWindow, fields: Sequence[str]) -> dict[int, dict[str, Any]]:
    return {
        _bucket_key(start, window.bucket_seconds): {"start": start.astimezone(UTC), **dict.fromkeys(fields, 0)}
        for start in window.buckets()
    }


def runs_per_bucket(window: WorkflowWindow) -> list[dict[str, Any]]:
    """``[{"start", "started", "finished", "cancelled"}]``, one per bucket, oldest first."""
    buckets = _empty_buckets(window, ("started", "finished", "cancelled"))
    # floor(epoch / bucket) is the bucket's number; WorkflowWindow.buckets() aligns the same way.
    started = """
        SELECT floor(extract(epoch FROM created_at) / %(bucket)s)::bigint, count(*)
        FROM pgflow_run WHERE created_at >= %(since)s AND created_at <= %(now)s
        GROUP BY 1
    """
    ended = """
        SELECT floor(extract(epoch FROM finished_at) / %(bucket)s)::bigint, status, count(*)
        FROM pgflow_run WHERE finished_at >= %(since)s AND finished_at <= %(now)s
        GROUP BY 1, 2
    """
    for key, count in _rows(started, _bounds(window)):
        if key in buckets:
            buckets[key]["started"] = count
    for key, status, count in _rows(ended, _bounds(window)):
        if key in buckets and status in ENDED:
            buckets[key][status] = count
    return list(buckets.values())


def _failures(window: WorkflowWindow) -> list[tuple[Any, ...]]:
    """(bucket, outcome, error_class, attempts) of the attempts that failed in the window.

    One scan feeds both the failures chart and the top errors: the groups are few (buckets x
    actions x error classes) however many rows they count.
    """
    sql = """
        SELECT floor(extract(epoch FROM finished_at) / %(bucket)s)::bigint, outcome,
               coalesce(error_class, ''), count(*)
        FROM pgflow_step
        WHERE finished_at >= %(since)s AND finished_at <= %(now)s AND status = 'failed'
        GROUP BY 1, 2, 3
    """
    return _rows(sql, _bounds(window))


def step_failures_per_bucket(window: WorkflowWindow, failures: list[tuple[Any, ...]] | None = None,
                             ) -> list[dict[str, Any]]:
    """``[{"start", "failures", "reattempted", "paused", "cancelled", "skipped"}]`` per bucket.

    The four action columns add up to ``failures``, except for an attempt whose outcome is
    something else (a lost worker: ``"lost"``), counted in ``failures`` only.
    """
    buckets = _empty_buckets(window, ("failures", *FAILURE_OUTCOMES))
    for key, outcome, _error_class, count in _failures(window) if failures is None else failures:
        if key not in buckets:
            continue
        buckets[key]["failures"] += count
        if outcome in FAILURE_OUTCOMES:
            buckets[key][outcome] += count
    return list(buckets.values())


def top_errors(window: WorkflowWindow, failures: list[tuple[Any, ...]] | None = None, *,
               limit: int = TOP_ERRORS) -> list[dict[str, Any]]:
    """``[{"error_class", "count"}]``: the error classes of the window's failed attempts, most first."""
    totals: dict[str, int] = defaultdict(int)
    for _key, _outcome, error_class, count in _failures(window) if failures is None else failures:
        totals[error_class] += count
    ranked = sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return [{"error_class": name or None, "count": count} for name, count in ranked]


# --- per workflow class and per step --------------------------------------------------------


def workflows(window: WorkflowWindow) -> list[dict[str, Any]]:
    """Per workflow class, the runs started in the window (see the module docstring)."""
    sql = """
        SELECT workflow_class, count(*),
               count(*) FILTER (WHERE status = 'running'),
               count(*) FILTER (WHERE status = 'paused'),
               count(*) FILTER (WHERE status = 'finished'),
               count(*) FILTER (WHERE status = 'cancelled'),
               percentile_cont(%(percentiles)s::float8[])
                   WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at)::float8)
                   FILTER (WHERE status = 'finished')
        FROM pgflow_run WHERE created_at >= %(since)s AND created_at <= %(now)s
        GROUP BY workflow_class ORDER BY workflow_class
    """
    result = []
    for path, started, running, paused, finished, cancelled, durations in _rows(sql, _with_percentiles(window)):
        ended = finished + cancelled
        p50, p95 = _pair(durations)
        result.append({
            "workflow_class": path,
            "started": started,
            "running": running,
            "paused": paused,
            "finished": finished,
            "cancelled": cancelled,
            "success_rate": finished / ended if ended else None,
            "p50_seconds": p50,
            "p95_seconds": p95,
        })
    return result


def steps(window: WorkflowWindow, *, sample_above: int = PERCENTILE_SAMPLE) -> list[dict[str, Any]]:
    """Per (workflow class, step), the attempts created in the window (see the module docstring).

    Counts are exact. The percentiles are exact up to ``sample_above`` attempts in the
    window; above that they are computed over a systematic sample (every k-th attempt by
    id) of about that size, and each row says so in ``sample_every`` (1 = every attempt):
    sorting a month of attempts three times costs seconds, and p50/p95 of 50,000 values
    differ from those of a million by well under a percent.
    """
    params = _with_percentiles(window)
    if _estimated_attempts(window) <= sample_above:
        # Few rows: one exact pass, counts and percentiles together.
        rows = _rows(_steps_sql(counts=True, sampled=False), {**params, "every": 1})
        if sum(row[2] for row in rows) <= sample_above:
            return [_step_row(path, name, attempts, failures, 1, phases)
                    for path, name, attempts, failures, *phases in sorted(rows)]
    # Many rows: percentile_cont would sort every joined row by its group, so the exact counts
    # hash-aggregate in one query and the percentiles sort only a sample in another.
    counted = _rows(_steps_sql(counts=True, sampled=False, percentiles=False), params)
    every = max(1, -(-sum(row[2] for row in counted) // sample_above))  # ceiling division
    spread = {(path, name): phases for path, name, *phases
              in _rows(_steps_sql(counts=False, sampled=every > 1), {**params, "every": every})}
    # A rare step the sample missed has no percentiles rather than wrong ones.
    return [_step_row(path, name, attempts, failures, every, spread.get((path, name), (None, None, None)))
            for path, name, attempts, failures in sorted(counted)]


def _estimated_attempts(window: WorkflowWindow) -> float:
    """The planner's estimate of the window's attempts (from pgflow_step_created's statistics):
    free, and only used to choose how to compute, never shown."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) SELECT 1 FROM pgflow_step "
                       "WHERE created_at >= %(since)s AND created_at <= %(now)s", _bounds(window))
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):  # a driver that does not decode json
        plan = json.loads(plan)
    return float(plan[0]["Plan"]["Plan Rows"])


def _steps_sql(*, counts: bool, sampled: bool, percentiles: bool = True) -> str:
    figures = []
    if counts:
        figures.append("count(*), count(*) FILTER (WHERE p.status = 'failed')")
    if percentiles:
        figures.extend(f"percentile_cont(%(percentiles)s::float8[]) WITHIN GROUP (ORDER BY p.{phase})"
                       for phase in ("waited", "queued", "ran"))
    return f"""
        WITH attempt AS (
            SELECT s.run_id, s.step_name, {_PHASES_SQL}
            FROM pgflow_step s
            WHERE s.created_at >= %(since)s AND s.created_at <= %(now)s
                  {"AND s.id %% %(every)s = 0" if sampled else ""}
        ), phases AS (
            SELECT run_id, step_name, status,
                   CASE WHEN started_at IS NOT NULL OR finished_at IS NOT NULL
                        THEN greatest(extract(epoch FROM least(waited_end, coalesce(finished_at, waited_end))
                                               - created_at)::float8, 0) END AS waited,
                   CASE WHEN started_at IS NOT NULL
                        THEN greatest(extract(epoch FROM started_at - scheduled_at)::float8, 0) END AS queued,
                   CASE WHEN started_at IS NULL THEN NULL
                        WHEN parked_after_body
                        THEN greatest(extract(epoch FROM waiting_since - started_at)::float8, 0)
                        WHEN finished_at IS NOT NULL
                        THEN greatest(extract(epoch FROM finished_at - started_at)::float8, 0)
                   END AS ran
            FROM attempt
        )
        SELECT r.workflow_class, p.step_name, {", ".join(figures)}
        FROM phases p JOIN pgflow_run r ON r.id = p.run_id
        GROUP BY 1, 2
    """


def _step_row(path: str, name: str, attempts: int, failures: int, every: int,
              phases: Sequence[Sequence[float] | None]) -> dict[str, Any]:
    row: dict[str, Any] = {"workflow_class": path, "step_name": name, "attempts": attempts, "failures": failures,
                           "sample_every": every}
    for phase, values in zip(("waited", "queued", "ran"), phases, strict=True):
        row[f"{phase}_p50_seconds"], row[f"{phase}_p95_seconds"] = _pair(values)
    return row


def _with_percentiles(window: WorkflowWindow) -> dict[str, Any]:
    return {**_bounds(window), "percentiles": list(PERCENTILES)}


def _pair(values: Sequence[float | None] | None) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return values[0], values[1]


# --- stuck ----------------------------------------------------------------------------------


def stuck(now: datetime, *, limit: int = STUCK_LIMIT) -> dict[str, dict[str, Any]]:
    """What needs an operator now: ``{category: {"count", "rows"}}``, at most ``limit`` rows each."""
    return {
        "paused": paused_runs(now, limit=limit),
        "overdue": overdue_steps(now, limit=limit),
        "lease_expired": lease_expired(now, limit=limit),
        "deadline_passed": deadline_passed(now, limit=limit),
        "definition_changed": definition_changed(limit=limit),
    }


def paused_runs(now: datetime, *, limit: int) -> dict[str, Any]:
    """Paused runs, oldest first, with why (``paused_reason``) and since when (``updated_at``)."""
    count = _scalar("SELECT count(*) FROM pgflow_run WHERE status = 'paused'", {})
    sql = """
        SELECT id, workflow_class, current_step, paused_reason, updated_at, created_at
        FROM pgflow_run WHERE status = 'paused' ORDER BY created_at, id LIMIT %(limit)s
    """
    keys = ("run_id", "workflow_class", "current_step", "paused_reason", "paused_at", "created_at")
    return {"count": count, "rows": _dicts(keys, _rows(sql, {"limit": limit}))}


_STEP_COLUMNS = "s.id, s.run_id, r.workflow_class, s.step_name, s.attempt, s.queue"
_STEP_KEYS = ("step_id", "run_id", "workflow_class", "step_name", "attempt", "queue")


def _stuck_steps(where: str, order: str, extra: str, extra_key: str, params: dict[str, Any],
                 limit: int) -> dict[str, Any]:
    count = _scalar(f"SELECT count(*) FROM pgflow_step s WHERE {where}", params)
    sql = f"""
        SELECT {_STEP_COLUMNS}, {extra} FROM pgflow_step s JOIN pgflow_run r ON r.id = s.run_id
        WHERE {where} ORDER BY {order}, s.id LIMIT %(limit)s
    """
    return {"count": count, "rows": _dicts((*_STEP_KEYS, extra_key), _rows(sql, {**params, "limit": limit}))}


def overdue_steps(now: datetime, *, limit: int) -> dict[str, Any]:
    """Attempts due for longer than OVERDUE_AFTER that no worker claimed (no worker on their queue?)."""
    # The claim index is partial on status = 'scheduled', so this reads only scheduled rows.
    return _stuck_steps("s.status = 'scheduled' AND s.scheduled_at < %(due_before)s", "s.scheduled_at",
                        "s.scheduled_at", "due_at", {"due_before": now - OVERDUE_AFTER}, limit)


def lease_expired(now: datetime, *, limit: int) -> dict[str, Any]:
    """Attempts in progress whose worker stopped heartbeating (the sweep re-runs them)."""
    return _stuck_steps("s.status = 'in_progress' AND s.lease_expires_at < %(now)s", "s.lease_expires_at",
                        "s.lease_expires_at", "lease_expired_at", {"now": now}, limit)


def deadline_passed(now: datetime, *, limit: int) -> dict[str, Any]:
    """Signal waits past their ``wait_timeout`` deadline (the sweep applies ``on_timeout``)."""
    return _stuck_steps("s.status = 'waiting' AND s.deadline_at < %(now)s", "s.deadline_at",
                        "s.deadline_at", "deadline_at", {"now": now}, limit)


def definition_changed(*, limit: int) -> dict[str, Any]:
    """Open runs whose stored digest differs from their class's current one, or whose class
    no longer imports: they may stop on a step that is gone.

    The open runs are grouped by (class, digest) in SQL (few groups), each class resolved once.
    """
    groups = _rows(
        "SELECT workflow_class, definition_digest, count(*) FROM pgflow_run "
        "WHERE status IN ('running', 'paused') GROUP BY 1, 2 ORDER BY 1, 2", {})
    current: dict[str, str | None] = {}
    problems: dict[str, str] = {}
    changed: list[tuple[str, str]] = []
    classes: list[dict[str, Any]] = []
    for path, digest, count in groups:
        if path not in current:
            try:
                current[path] = resolve(path).definition_digest()
            except WorkflowNotFound as exc:
                current[path] = None
                problems[path] = str(exc)
        if current[path] == digest:
            continue
        changed.append((path, digest))
        classes.append({"workflow_class": path, "run_digest": digest, "current_digest": current[path],
                        "problem": problems.get(path), "count": count})
    rows: list[dict[str, Any]] = []
    if changed:
        pairs = " OR ".join(["(workflow_class = %s AND definition_digest = %s)"] * len(changed))
        sql = (f"SELECT id, workflow_class, status, current_step, definition_digest, created_at FROM pgflow_run "
               f"WHERE status IN ('running', 'paused') AND ({pairs}) ORDER BY created_at, id LIMIT %s")
        params = [value for pair in changed for value in pair] + [limit]
        keys = ("run_id", "workflow_class", "status", "current_step", "run_digest", "created_at")
        rows = _dicts(keys, _rows(sql, params))
        for row in rows:
            row["current_digest"] = current[row["workflow_class"]]
            row["problem"] = problems.get(row["workflow_class"])
    return {"count": sum(item["count"] for item in classes), "classes": classes, "rows": rows}


# --- the run list's filter --------------------------------------------------------------------


def workflow_classes() -> list[str]:
    """Every distinct ``workflow_class`` of the runs, sorted.

    A loose index scan (one index probe per class over ``pgflow_run_class_created``):
    ``SELECT DISTINCT`` would read every row of the table.
    """
    sql = """
        WITH RECURSIVE classes(name) AS (
            (SELECT workflow_class FROM pgflow_run ORDER BY workflow_class LIMIT 1)
            UNION ALL
            SELECT (SELECT workflow_class FROM pgflow_run WHERE workflow_class > classes.name
                    ORDER BY workflow_class LIMIT 1)
            FROM classes WHERE classes.name IS NOT NULL
        )
        SELECT name FROM classes WHERE name IS NOT NULL
    """
    return [name for (name,) in _rows(sql, {})]


# --- plumbing -------------------------------------------------------------------------------


def _rows(sql: str, params: dict[str, Any] | list[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _scalar(sql: str, params: dict[str, Any]) -> Any:
    return _rows(sql, params)[0][0]


def _dicts(keys: Sequence[str], rows: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    return [dict(zip(keys, row, strict=True)) for row in rows]
