"""The insights window's figures: the hourly rollup plus live SQL over indexed columns -> plain dicts.

The windowed figures come from :func:`pgflow.rollup.tally`: the hours the sweep has rolled
are read from the rollup's rows (day rows for whole days), the rest (the partial first
hour, the hours not rolled yet, the open hour; the whole of the 1-hour window) is counted
live over the indexed timestamps inside ``[window.since(), window.now]``. So the page costs
what its window holds, whether the tables hold a day or a year; no list here is unbounded.
``window.now`` is fixed by the caller, once per request, so every figure and every link
share one end.

Filtered by tenant (``compute(window, tenants=...)``: ``?tenant=``, or a user restricted by
``PGFLOW["TENANT_VISIBLE"]``), every figure counts only those tenants' runs and their
attempts, and the windowed ones are counted live over the whole window: the rollup counts
every tenant together. Exact, and bounded by the window, but slower on a long one.

Each figure counts a row in the moment it became final (that is what lets a rolled hour
stay unchanged), so the page and the JSON mean:

``runs_per_bucket``
    runs *started* (``created_at``) and runs that *ended* finished or cancelled
    (``finished_at``) in each bucket.
``step_failures_per_bucket``
    failed attempts (``status = 'failed'``: an error was recorded, whatever the policy then
    did) by the bucket of their ``finished_at``, split by the action taken (``outcome``).
``workflows``
    per workflow class: ``started``, the runs started in the window; ``running`` and
    ``paused``, how many of those are running or paused *now* (live); ``finished`` and
    ``cancelled``, the runs that *ended* in the window (whenever they started); the success
    rate is finished / (finished + cancelled) of those; p50/p95 of the ``finished_at -
    created_at`` of the runs that finished in the window.
``steps``
    per (class, step), the attempts that *ended* (``finished_at``) in the window, how many
    failed, and p50/p95 of their waited / throttled / queued / ran phases (as ``timeline.segments``
    splits them; a phase that did not happen, such as ``ran`` of an attempt closed before
    it started, is left out). Attempts still open are not counted until they end.
``phase_p95_per_bucket``
    per bucket, the p95 of each of the waited / throttled / queued / ran phases of every
    step's attempts that *ended* (``finished_at``) in it (``None`` where none did): the
    latency-over-time chart.
``errors``
    the most frequent ``error_class`` of the attempts that failed in the window.
``stuck``
    the state *now*, whatever the window: runs paused, attempts due but unclaimed for longer
    than :data:`OVERDUE_AFTER`, attempts in progress past their lease, signal waits past
    their deadline, open runs started on a definition that has changed since, and queues
    with attempts due but no live worker (``no_worker``).
``percentiles``
    how the p50/p95 above are estimated: from log-scale histograms
    (:mod:`pgflow.core.histogram`, 8 buckets per doubling from 1 ms, linear inside a
    bucket), within ``max_relative_error`` (9.05 %) of the exact ``percentile_cont``, or
    within 1 ms below 1 ms. Counts are exact.

Datetimes stay ``datetime`` objects (aware, UTC); ``DjangoJSONEncoder`` writes them as ISO 8601.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction

from pgflow import backlog, readdb, rollup
from pgflow.core import histogram
from pgflow.core.flow import CANCEL, OUTCOME_WORDS, PAUSE, REATTEMPT, SKIP
from pgflow.core.states import RunStatus
from pgflow.exceptions import WorkflowNotFound
from pgflow.models import Worker
from pgflow.registry import resolve

from . import runfacts
from .approvalwaits import approval_waits
from .why import FAN_OUT_FAILED, first_line, member_error, short_class
from .window import WorkflowWindow

OVERDUE_AFTER = timedelta(minutes=5)  # a due attempt no worker claimed for this long is stuck
STUCK_LIMIT = 50  # rows listed per stuck category (the count is always exact)
TOP_ERRORS = 10
PERCENTILES = (0.5, 0.95)
ENDED = (RunStatus.FINISHED.value, RunStatus.CANCELLED.value)
FAILURE_OUTCOMES = tuple(OUTCOME_WORDS[kind] for kind in (REATTEMPT, PAUSE, CANCEL, SKIP))
PERCENTILE_METHOD = {
    "method": "log-scale histograms: 8 buckets per doubling from 1 ms, linear inside a bucket",
    "max_relative_error": histogram.MAX_RELATIVE_ERROR,  # 2 ** (1/8) - 1 = 0.0905
    "max_absolute_error_below_1ms": histogram.FLOOR,
}
# The window is [since, now], now included; timestamps are whole microseconds.
_THROUGH_NOW = timedelta(microseconds=1)


def compute(window: WorkflowWindow, *, tenants: Sequence[str] | None = None) -> dict[str, Any]:
    """Every figure of the window as one JSON-ready dict (see the module docstring), read
    from ``PGFLOW["READ_DATABASE"]`` when one is set (then ``read_database`` says where, and
    how far behind the replica is).

    ``tenants``: the figures of those tenants' runs only (``tenant`` in the answer lists
    them), counted from the attempts over the whole window, not from the rollup (which is
    not kept per tenant); None counts every run."""
    with readdb.reading() as route, transaction.atomic(using=route.alias), readdb.connection().cursor() as cursor:
        # Scoped to this transaction. JIT compiling each of these one-off aggregates costs
        # more than it saves; the default work_mem (4 MB) sends a month's sort to disk.
        cursor.execute("SET LOCAL jit = off; SET LOCAL work_mem = '64MB'")
        counted = tally(window, tenants=tenants)
        opened = open_runs(window, tenants=tenants)
        return {
            "window": {**window.to_dict(), "since": window.since(), "now": window.now},
            "runs_per_bucket": runs_per_bucket(window, counted),
            "step_failures_per_bucket": step_failures_per_bucket(window, counted),
            "phase_p95_per_bucket": phase_p95_per_bucket(window, counted),
            "workflows": workflows(window, counted, tenants=tenants, opened=opened),
            "steps": steps(window, counted),
            "errors": with_member_errors(window, top_errors(window, counted), tenants=tenants),
            "percentiles": dict(PERCENTILE_METHOD),
            "stuck": stuck(window.now, tenants=tenants, opened=opened),
            "schedules": schedules(window, tenants=tenants),
            "approvals": approval_waits(window, tenants=tenants),  # per approval step: waits p50/p95 (approvalwaits)
            # Only when filtered: the tenants whose runs the figures count (the JSON is unchanged without).
            **({} if tenants is None else {"tenants": sorted(tenants)}),
            # Only with a READ_DATABASE: where the figures were read, and how old they may be.
            **(
                {}
                if route.replica is None
                else {
                    "read_database": {
                        "alias": route.alias,
                        "replica": route.replica,
                        "fell_back": route.fell_back,
                        "note": route.note,
                    }
                }
            ),
        }


# Per schedule, the ticks recorded in the window: lag (tick due -> run started) of the
# ticks that started on their own (a buffer_one tick waited for the open run on purpose),
# the ticks skipped by overlap and those missed while no worker ran.
_SCHEDULE_TICKS = """
SELECT s.id, s.workflow_class, s.name,
       count(*) FILTER (WHERE t.outcome = 'started'),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM t.started_at - t.tick_at))
           FILTER (WHERE t.outcome = 'started' AND NOT t.details ? 'buffered'),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM t.started_at - t.tick_at))
           FILTER (WHERE t.outcome = 'started' AND NOT t.details ? 'buffered'),
       count(*) FILTER (WHERE t.outcome = 'skipped'),
       coalesce(sum(coalesce((t.details->>'count')::int, 1)) FILTER (WHERE t.outcome = 'missed'), 0)
FROM pgflow_schedule_tick t JOIN pgflow_schedule s ON s.id = t.schedule_id
WHERE t.started_at >= %(since)s AND t.started_at <= %(now)s{tenants}
GROUP BY s.id, s.workflow_class, s.name
ORDER BY s.workflow_class, s.name
"""


def schedules(window: WorkflowWindow, *, tenants: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Per schedule with ticks in the window: ``started``, ``lag_p50``/``lag_p95`` (seconds
    from the tick being due to its run starting), ``skipped`` (overlap) and ``missed``;
    with ``tenants``, the schedules declared for those tenants only."""
    keys = ("id", "workflow_class", "name", "started", "lag_p50", "lag_p95", "skipped", "missed")
    sql = _SCHEDULE_TICKS.format(tenants=_of_tenants("s", tenants))
    rows = _dicts(keys, _rows(sql, {"since": window.since(), "now": window.now, **_tenant_params(tenants)}))
    for row in rows:
        for key in ("lag_p50", "lag_p95"):
            row[key] = None if row[key] is None else max(0.0, float(row[key]))
    return rows


def tally(window: WorkflowWindow, *, tenants: Sequence[str] | None = None) -> rollup.Tally:
    """The window's counts and histograms: rolled hours from the rollup, the rest live. With
    ``tenants``, all of it live over the window's attempts of those tenants' runs: the rollup
    counts every tenant together, so a tenant's figures are exact and cost what the window holds."""
    if tenants is not None:
        return rollup.aggregate([(window.since(), window.now + _THROUGH_NOW)], window.bucket_seconds, tenants=tenants)
    return rollup.tally(window.since(), window.now + _THROUGH_NOW, window.bucket_seconds)


# --- buckets ------------------------------------------------------------------------------


def _empty_buckets(window: WorkflowWindow, fields: Sequence[str]) -> dict[int, dict[str, Any]]:
    # A bucket's number is floor(epoch / bucket), as the rollup keys its counts.
    return {
        int(start.timestamp()) // window.bucket_seconds: {"start": start.astimezone(UTC), **dict.fromkeys(fields, 0)}
        for start in window.buckets()
    }


def runs_per_bucket(window: WorkflowWindow, counted: rollup.Tally | None = None) -> list[dict[str, Any]]:
    """``[{"start", "started", "finished", "cancelled"}]``, one per bucket, oldest first."""
    counted = tally(window) if counted is None else counted
    buckets = _empty_buckets(window, ("started", *ENDED))
    for (key, _path), counts in counted.runs.items():
        if key in buckets:
            for field, count in zip(("started", *ENDED), counts, strict=True):
                buckets[key][field] += count
    return list(buckets.values())


def step_failures_per_bucket(window: WorkflowWindow, counted: rollup.Tally | None = None) -> list[dict[str, Any]]:
    """``[{"start", "failures", "reattempted", "paused", "cancelled", "skipped"}]`` per bucket.

    The four action columns add up to ``failures``, except for an attempt whose outcome is
    something else (a lost worker: ``"lost"``), counted in ``failures`` only.
    """
    counted = tally(window) if counted is None else counted
    buckets = _empty_buckets(window, ("failures", *FAILURE_OUTCOMES))
    for (key, outcome, _error_class), count in counted.failures.items():
        if key not in buckets:
            continue
        buckets[key]["failures"] += count
        if outcome in FAILURE_OUTCOMES:
            buckets[key][outcome] += count
    return list(buckets.values())


def phase_p95_per_bucket(window: WorkflowWindow, counted: rollup.Tally | None = None) -> list[dict[str, Any]]:
    """``[{"start", "waited", "throttled", "queued", "ran"}]`` per bucket: each phase's p95 in
    seconds over the attempts that ended in the bucket, ``None`` where none did."""
    counted = tally(window) if counted is None else counted
    buckets = _empty_buckets(window, rollup.PHASES)
    for row in buckets.values():
        row.update(dict.fromkeys(rollup.PHASES))
    for (key, phase), counts in counted.phases.items():
        if key in buckets:
            (buckets[key][phase],) = histogram.quantiles(counts, (0.95,))
    return list(buckets.values())


def top_errors(
    window: WorkflowWindow, counted: rollup.Tally | None = None, *, limit: int = TOP_ERRORS
) -> list[dict[str, Any]]:
    """``[{"error_class", "count"}]``: the error classes of the window's failed attempts, most first."""
    counted = tally(window) if counted is None else counted
    totals: dict[str, int] = defaultdict(int)
    for (_key, _outcome, error_class), count in counted.failures.items():
        totals[error_class] += count
    ranked = sorted(totals.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return [{"error_class": name or None, "count": count} for name, count in ranked]


# --- per workflow class and per step --------------------------------------------------------


@dataclass(frozen=True)
class OpenRuns:
    """The runs open now, from one scan: per class, the running and paused of those started in
    the window (``workflows``); per (class, definition digest), how many (``definition_changed``)."""

    in_window: dict[str, tuple[int, int]]
    by_definition: list[tuple[str, str, int]]


def open_runs(window: WorkflowWindow | None, *, tenants: Sequence[str] | None = None) -> OpenRuns:
    """The open runs, counted once for both figures that count them; with no ``window``,
    ``in_window`` is empty (a NULL bound lets no row through the FILTER)."""
    rows = _rows(
        f"""
        SELECT workflow_class, definition_digest,
               count(*) FILTER (WHERE status = 'running' AND created_at >= %(since)s AND created_at <= %(now)s),
               count(*) FILTER (WHERE status = 'paused' AND created_at >= %(since)s AND created_at <= %(now)s),
               count(*)
        FROM pgflow_run r WHERE status IN ('running', 'paused'){_of_tenants("r", tenants)}
        GROUP BY 1, 2 ORDER BY 1, 2
        """,
        {
            "since": None if window is None else window.since(),
            "now": None if window is None else window.now,
            **_tenant_params(tenants),
        },
    )
    in_window: dict[str, tuple[int, int]] = {}
    for path, _digest, running, paused, _count in rows:
        if running or paused:
            before = in_window.get(path, (0, 0))
            in_window[path] = (before[0] + running, before[1] + paused)
    return OpenRuns(in_window, [(path, digest, count) for path, digest, _r, _p, count in rows])


def workflows(
    window: WorkflowWindow,
    counted: rollup.Tally | None = None,
    *,
    tenants: Sequence[str] | None = None,
    opened: OpenRuns | None = None,
) -> list[dict[str, Any]]:
    """Per workflow class: runs started, open now, ended in the window (see the module docstring);
    ``opened``: the open runs already counted (:func:`open_runs`), else counted here."""
    counted = tally(window, tenants=tenants) if counted is None else counted
    totals: dict[str, list[int]] = {}
    for (_key, path), counts in counted.runs.items():
        mine = totals.setdefault(path, [0, 0, 0])
        for index, count in enumerate(counts):
            mine[index] += count
    # Live: how many of the runs started in the window are open now.
    open_now = (open_runs(window, tenants=tenants) if opened is None else opened).in_window
    result = []
    for path in sorted(set(totals) | set(open_now) | set(counted.durations)):
        started, finished, cancelled = totals.get(path, (0, 0, 0))
        running, paused = open_now.get(path, (0, 0))
        ended = finished + cancelled
        p50, p95 = histogram.quantiles(counted.durations.get(path, {}), PERCENTILES)
        result.append(
            {
                "workflow_class": path,
                "started": started,
                "running": running,
                "paused": paused,
                "finished": finished,
                "cancelled": cancelled,
                "success_rate": finished / ended if ended else None,
                "p50_seconds": p50,
                "p95_seconds": p95,
            }
        )
    return result


def steps(window: WorkflowWindow, counted: rollup.Tally | None = None) -> list[dict[str, Any]]:
    """Per (workflow class, step), the attempts that ended in the window (see the module docstring)."""
    counted = tally(window) if counted is None else counted
    result = []
    for (path, name), step in sorted(counted.steps.items()):
        row: dict[str, Any] = {
            "workflow_class": path,
            "step_name": name,
            "attempts": step.attempts,
            "failures": step.failures,
        }
        for phase in rollup.PHASES:
            row[f"{phase}_p50_seconds"], row[f"{phase}_p95_seconds"] = histogram.quantiles(
                getattr(step, phase), PERCENTILES
            )
        result.append(row)
    return result


# --- stuck ----------------------------------------------------------------------------------


def stuck(
    now: datetime,
    *,
    limit: int = STUCK_LIMIT,
    tenants: Sequence[str] | None = None,
    opened: OpenRuns | None = None,
) -> dict[str, dict[str, Any]]:
    """What needs an operator now: ``{category: {"count", "rows"}}``, at most ``limit`` rows
    each; with ``tenants``, of those tenants' runs only (a queue without a worker: counting
    only their due steps). ``opened``: the open runs already counted (:func:`open_runs`)."""
    scheduled = _scheduled_queues()  # for the overdue and the queues without a worker
    return {
        "paused": paused_runs(now, limit=limit, tenants=tenants),
        "paused_groups": paused_groups(limit=limit, tenants=tenants),
        "overdue": overdue_steps(now, limit=limit, tenants=tenants, scheduled=scheduled),
        "lease_expired": lease_expired(now, limit=limit, tenants=tenants),
        "deadline_passed": deadline_passed(now, limit=limit, tenants=tenants),
        "definition_changed": definition_changed(limit=limit, tenants=tenants, opened=opened),
        "no_worker": queues_without_worker(now, limit=limit, tenants=tenants, scheduled=scheduled),
    }


def paused_runs(now: datetime, *, limit: int, tenants: Sequence[str] | None = None) -> dict[str, Any]:
    """Paused runs, oldest first, with why (``paused_reason``) and since when (``updated_at``)."""
    mine, params = _of_tenants("r", tenants), _tenant_params(tenants)
    sql = f"""
        SELECT id, workflow_class, current_step, paused_reason, updated_at, created_at
        FROM pgflow_run r WHERE status = 'paused'{mine} ORDER BY created_at, id LIMIT %(limit)s
    """
    count, rows = _counted(
        f"SELECT count(*) FROM pgflow_run r WHERE status = 'paused'{mine}", sql, {"limit": limit, **params}
    )
    keys = ("run_id", "workflow_class", "current_step", "paused_reason", "paused_at", "created_at")
    return {"count": count, "rows": _dicts(keys, rows)}


MEMBER_ERRORS_READ = 5000  # failed fan-out members read per window for their own error classes


def with_member_errors(
    window: WorkflowWindow, errors: list[dict[str, Any]], *, tenants: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """``errors`` with, on a ``FanOutFailed`` row, ``members``: the error classes of the fan-out
    members that failed in the window (``[{"error_class", "count", "message"}]``, most first,
    with the latest member's message of each class), read from each member's own error (a
    traceback's last line, :func:`why.member_error`): what actually went wrong."""
    if not any(short_class(row["error_class"]) == FAN_OUT_FAILED for row in errors):
        return errors
    mine = (
        ""
        if tenants is None
        else " AND batch_id IN (SELECT b.id FROM pgflow_batch b JOIN pgflow_run r ON r.id = b.run_id "
        "WHERE r.tenant = ANY(%(tenants)s))"
    )
    texts = _rows(
        "SELECT error FROM pgflow_batch_member WHERE status = 'failed' AND finished_at >= %(since)s "
        f"AND finished_at <= %(now)s{mine} ORDER BY finished_at DESC LIMIT %(limit)s",
        {"since": window.since(), "now": window.now, "limit": MEMBER_ERRORS_READ, **_tenant_params(tenants)},
    )
    counts: dict[str, int] = defaultdict(int)
    messages: dict[str, str] = {}  # per class, the latest member's message (texts are latest first)
    for (text,) in texts:
        error_class, message = member_error(text)
        name = error_class or "(no error class)"
        counts[name] += 1
        messages.setdefault(name, first_line(message))
    members = [
        {"error_class": name, "count": count, "message": messages[name]}
        for name, count in sorted(counts.items(), key=lambda i: (-i[1], i[0]))
    ]
    return [{**row, "members": members} if short_class(row["error_class"]) == FAN_OUT_FAILED else row for row in errors]


GROUP_RUN_IDS = 1000  # run ids a group carries for its bulk action (one action takes at most as many)


def paused_groups(*, limit: int, tenants: Sequence[str] | None = None) -> dict[str, Any]:
    """Paused runs grouped by (class, step, error class of their latest failure), most first:
    ``{"count", "rows": [{"workflow_class", "step_name", "error_class", "count", "since",
    "run_ids"}]}``, so 200 runs paused by one error read as one row with one bulk action. A
    paused run is open, so its attempts are in the live partition (pgflow.store.history)."""
    sql = f"""
        SELECT r.workflow_class, r.current_step, f.error_class, count(*), min(r.updated_at),
               (array_agg(r.id ORDER BY r.id))[1:%(ids)s]
        FROM pgflow_run r
        LEFT JOIN LATERAL (
            SELECT s.error_class FROM pgflow_step_live s
            WHERE s.run_id = r.id AND s.error_class IS NOT NULL
            ORDER BY s.created_at DESC, s.id DESC LIMIT 1
        ) f ON true
        WHERE r.status = 'paused'{_of_tenants("r", tenants)}
        GROUP BY 1, 2, 3 ORDER BY 4 DESC, 1, 2, 3 LIMIT %(limit)s
    """
    keys = ("workflow_class", "step_name", "error_class", "count", "since", "run_ids")
    params = {"limit": limit, "ids": GROUP_RUN_IDS, **_tenant_params(tenants)}
    rows = _by_member_error(_dicts(keys, _rows(sql, params)))[:limit]
    return {"count": len(rows), "rows": rows}


def _by_member_error(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``groups`` with each ``FanOutFailed`` group split by its runs' first failed member's own
    error class (:func:`pgflow_dashboard.runfacts.first_failed_members`, as the run page and
    the run list read it): the split rows say ``fan_out_error``; runs whose member error is
    unknown, or past the ids a group carries, stay under ``FanOutFailed``. Most runs first."""
    fan_outs = [group for group in groups if short_class(group["error_class"]) == FAN_OUT_FAILED]
    if not fan_outs:
        return groups
    ids = [pk for group in fan_outs for pk in group["run_ids"]]
    latest = _rows(
        """
        SELECT r.id, r.updated_at, f.batch_id FROM pgflow_run r
        CROSS JOIN LATERAL (
            SELECT s.batch_id FROM pgflow_step_live s WHERE s.run_id = r.id AND s.error_class IS NOT NULL
            ORDER BY s.created_at DESC, s.id DESC LIMIT 1
        ) f
        WHERE r.id = ANY(%(ids)s)
        """,
        {"ids": ids},
    )
    members = runfacts.first_failed_members((batch for _, _, batch in latest), using=readdb.alias())
    cause = {pk: (members.get(batch) or {}).get("error_class") for pk, _, batch in latest}
    paused_at = {pk: at for pk, at, _ in latest}
    result = [group for group in groups if group not in fan_outs]
    for group in fan_outs:
        split: dict[str, dict[str, Any]] = {}
        for pk in group["run_ids"]:
            name = cause.get(pk)
            if name is None:
                continue
            fresh = {"error_class": name, "fan_out_error": group["error_class"], "count": 0, "run_ids": []}
            row = split.setdefault(name, {**group, **fresh, "since": paused_at[pk]})
            row["count"] += 1
            row["run_ids"].append(pk)
            row["since"] = min(row["since"], paused_at[pk])
        rest = [pk for pk in group["run_ids"] if cause.get(pk) is None]
        left = group["count"] - sum(row["count"] for row in split.values())
        if left:
            result.append({**group, "count": left, "run_ids": rest})
        result.extend(split.values())
    return sorted(
        result, key=lambda g: (-g["count"], g["workflow_class"], g["step_name"] or "", g["error_class"] or "")
    )


_STEP_COLUMNS = "s.id, s.run_id, r.workflow_class, s.step_name, s.attempt, s.queue"
_STEP_KEYS = ("step_id", "run_id", "workflow_class", "step_name", "attempt", "queue")


def _stuck_steps(
    where: str,
    order: str,
    extra: str,
    extra_key: str,
    params: dict[str, Any],
    limit: int,
    tenants: Sequence[str] | None = None,
) -> dict[str, Any]:
    # Open attempts are in the live partition only (pgflow.store.history): the parent would
    # also scan every day of history, whose partitions have no index on status.
    params = {**params, **_tenant_params(tenants), "limit": limit}
    if tenants is None:
        counted = f"SELECT count(*) FROM pgflow_step_live s WHERE {where}"
    else:
        where += _of_tenants("r", tenants)
        counted = f"SELECT count(*) FROM pgflow_step_live s JOIN pgflow_run r ON r.id = s.run_id WHERE {where}"
    sql = f"""
        SELECT {_STEP_COLUMNS}, {extra} FROM pgflow_step_live s JOIN pgflow_run r ON r.id = s.run_id
        WHERE {where} ORDER BY {order}, s.id LIMIT %(limit)s
    """
    count, rows = _counted(counted, sql, params)
    return {"count": count, "rows": _dicts((*_STEP_KEYS, extra_key), rows)}


def _scheduled_queues() -> list[str]:
    with readdb.connection().cursor() as cursor:  # the replica inside readdb.reading()
        return backlog.scheduled_queues(cursor)


def overdue_steps(
    now: datetime, *, limit: int, tenants: Sequence[str] | None = None, scheduled: Sequence[str] | None = None
) -> dict[str, Any]:
    """Attempts due for longer than OVERDUE_AFTER that no worker claimed (no worker on their
    queue?). ``scheduled``: the queues holding scheduled attempts, when the caller has read them."""
    mine = _of_tenants("r", tenants)
    params = {
        "queues": list(_scheduled_queues() if scheduled is None else scheduled),
        "before": now - OVERDUE_AFTER,
        "limit": limit,
        **_tenant_params(tenants),
    }
    join = " JOIN pgflow_run r ON r.id = s.run_id"
    counted = backlog.DUE_BEFORE.format(columns="1", join="" if tenants is None else join, where=mine, order="")
    listed = backlog.DUE_BEFORE.format(
        columns=f"{_STEP_COLUMNS}, s.scheduled_at",
        join=join,
        where=mine,
        order="ORDER BY timezone('UTC', s.scheduled_at), s.id LIMIT %(limit)s",  # each queue's oldest
    )
    sql = f"SELECT s.* FROM {listed} ORDER BY s.scheduled_at, s.id LIMIT %(limit)s"
    count, rows = _counted(f"SELECT count(*) FROM {counted}", sql, params)
    return {"count": count, "rows": _dicts((*_STEP_KEYS, "due_at"), rows)}


def queues_without_worker(
    now: datetime, *, limit: int, tenants: Sequence[str] | None = None, scheduled: Sequence[str] | None = None
) -> dict[str, Any]:
    """Queues with attempts due now that no live worker serves: ``{"count", "rows": [{"queue",
    "due", "oldest_due_at"}]}``, oldest first. Live means a heartbeat younger than the lease
    (the ``Worker`` rows). The queues holding scheduled attempts come from a loose scan of
    the due-time index (one probe per queue; ``scheduled`` when the caller has read them);
    only those no worker serves are counted."""
    live = Worker.objects.using(readdb.alias()).live(now)
    served = {queue for names in live.values_list("queues", flat=True) for queue in names or ()}
    unserved = [queue for queue in (_scheduled_queues() if scheduled is None else scheduled) if queue not in served]
    if not unserved:
        return {"count": 0, "rows": []}
    join = "" if tenants is None else " JOIN pgflow_run r ON r.id = s.run_id"
    due = _rows(
        "SELECT s.queue, count(*), min(s.scheduled_at) FROM "
        + backlog.DUE_BEFORE.format(
            columns="s.queue, s.scheduled_at", join=join, where=_of_tenants("r", tenants), order=""
        )
        + "GROUP BY 1 ORDER BY 3, 1",
        {"queues": unserved, "before": now + _THROUGH_NOW, **_tenant_params(tenants)},  # due at now or before
    )
    rows = _dicts(("queue", "due", "oldest_due_at"), due)
    return {"count": len(rows), "rows": rows[:limit]}


def lease_expired(now: datetime, *, limit: int, tenants: Sequence[str] | None = None) -> dict[str, Any]:
    """Attempts in progress whose worker stopped heartbeating (the sweep re-runs them)."""
    return _stuck_steps(
        "s.status = 'in_progress' AND s.lease_expires_at < %(now)s",
        "s.lease_expires_at",
        "s.lease_expires_at",
        "lease_expired_at",
        {"now": now},
        limit,
        tenants,
    )


def deadline_passed(now: datetime, *, limit: int, tenants: Sequence[str] | None = None) -> dict[str, Any]:
    """Signal waits past their ``wait_timeout`` deadline (the sweep applies ``on_timeout``)."""
    return _stuck_steps(
        "s.status = 'waiting' AND s.deadline_at < %(now)s",
        "s.deadline_at",
        "s.deadline_at",
        "deadline_at",
        {"now": now},
        limit,
        tenants,
    )


def definition_changed(
    *, limit: int, tenants: Sequence[str] | None = None, opened: OpenRuns | None = None
) -> dict[str, Any]:
    """Open runs whose stored digest differs from their class's current one, or whose class
    no longer imports: they may stop on a step that is gone.

    The open runs are grouped by (class, digest) in SQL (few groups; ``opened`` when the caller
    has counted them), each class resolved once.
    """
    mine = _of_tenants("r", tenants)
    groups = (open_runs(None, tenants=tenants) if opened is None else opened).by_definition
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
        classes.append(
            {
                "workflow_class": path,
                "run_digest": digest,
                "current_digest": current[path],
                "problem": problems.get(path),
                "count": count,
            }
        )
    rows: list[dict[str, Any]] = []
    if changed:
        pairs = " OR ".join(
            [f"(workflow_class = %(c{i})s AND definition_digest = %(d{i})s)" for i in range(len(changed))]
        )
        sql = (
            f"SELECT id, workflow_class, status, current_step, definition_digest, created_at FROM pgflow_run r "
            f"WHERE status IN ('running', 'paused') AND ({pairs}){mine} ORDER BY created_at, id LIMIT %(limit)s"
        )
        params: dict[str, Any] = {"limit": limit, **_tenant_params(tenants)}
        for i, (path, digest) in enumerate(changed):
            params[f"c{i}"], params[f"d{i}"] = path, digest
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


# --- the tenant filter -----------------------------------------------------------------------

MAX_TENANTS_LISTED = 200  # the tenant select's choices at most (?tenant= takes any key)

# The tenants with a run started in the window: a loose index scan of pgflow_run_tenant
# (tenant, created_at) lists each tenant with one probe, and one more probe each says
# whether it started a run in the window. SELECT DISTINCT would read every run of the window.
_TENANTS_SEEN = """
WITH RECURSIVE keys AS (
    (SELECT tenant FROM pgflow_run WHERE tenant IS NOT NULL ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT r.tenant FROM pgflow_run r WHERE r.tenant > keys.tenant ORDER BY r.tenant LIMIT 1)
    FROM keys WHERE keys.tenant IS NOT NULL
)
SELECT k.tenant FROM keys k
WHERE k.tenant IS NOT NULL AND EXISTS (
    SELECT 1 FROM pgflow_run r WHERE r.tenant = k.tenant AND r.created_at >= %(since)s AND r.created_at <= %(now)s
)
LIMIT %(limit)s
"""


def tenants_seen(window: WorkflowWindow) -> list[str]:
    """The tenants of the runs started in the window, sorted (at most MAX_TENANTS_LISTED)."""
    params = {"since": window.since(), "now": window.now, "limit": MAX_TENANTS_LISTED}
    return [tenant for (tenant,) in _rows(_TENANTS_SEEN, params)]


# --- plumbing -------------------------------------------------------------------------------


def _of_tenants(alias: str, tenants: Sequence[str] | None) -> str:
    """The condition narrowing rows of ``alias`` (a run or a schedule) to ``tenants`` (None: none)."""
    return "" if tenants is None else f" AND {alias}.tenant = ANY(%(tenants)s)"


def _tenant_params(tenants: Sequence[str] | None) -> dict[str, Any]:
    return {} if tenants is None else {"tenants": list(tenants)}


def _rows(sql: str, params: dict[str, Any] | list[Any]) -> list[tuple[Any, ...]]:
    with readdb.connection().cursor() as cursor:  # the replica inside readdb.reading()
        cursor.execute(sql, params)
        return cursor.fetchall()


def _counted(count: str, listed: str, params: dict[str, Any]) -> tuple[int, list[tuple[Any, ...]]]:
    """A stuck list's ``count`` (a ``SELECT count(*)``) and its first rows (``listed``, whose
    first column is never NULL) in one statement: under load every statement waits its turn for
    a core, and the stuck lists are half the insights' statements."""
    rows = _rows(f"SELECT c.n, l.* FROM ({count}) AS c(n) LEFT JOIN LATERAL ({listed}) AS l ON true", params)
    return rows[0][0], [row[1:] for row in rows if row[1] is not None]


def _dicts(keys: Sequence[str], rows: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    return [dict(zip(keys, row, strict=True)) for row in rows]
