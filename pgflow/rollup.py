"""The hourly rollup: the insights' figures of each closed hour, counted once and kept, so
a 30-day window reads a few thousand small rows instead of a million attempts.

Each figure is counted in the hour it became final, so a rolled hour never changes:

- runs *started*, by ``created_at``;
- runs *finished* and *cancelled*, and finished runs' durations, by the run's ``finished_at``;
- attempts, by their ``finished_at`` (their waited / throttled / queued / ran phases are over then):
  how many, how many failed, and a :mod:`histogram <pgflow.core.histogram>` of each phase;
- failed attempts, by ``finished_at``, per action taken (``outcome``) and error class.

An hour ``H`` is *closed* once ``now >= H + 1 h + SETTLE``: ``finished_at`` is the time of
the group commit that writes it, so a few minutes cover every row of the hour. The sweep
(one worker at a time) calls :func:`roll`, which rolls the closed hours after the
watermark (``pgflow_rollup_state.rolled_until``) oldest first, at most
``HOURS_PER_SWEEP`` hours holding rows per call (a first deploy on a long history
catches up over several sweeps); a stretch of hours with no row at all is passed over at
the cost of three index probes, and counts as rolled. Rolling an hour replaces its rows,
so it is idempotent. When a day's last hour is rolled, the day's rows (``hours = 24``) are
summed from its hours: a month's histograms are then 30 rows per group, not 720.

:func:`tally` is what the insights read for a window: the rolled hours from these rows
(day rows for whole days), and the rest — the partial first hour, every hour after the
watermark, the open hour — counted live from the engine's tables by :func:`aggregate`,
the same function that writes an hour. A database the sweep never rolled is therefore
exactly right, only slower. Of the hours after the watermark, the starts and the ends
every one of which has committed are counted once per process and kept (see "kept between
reads" below): a read under load counts the last second's rows, not the open hour's.

A row that becomes visible more than ``SETTLE`` after its timestamp (a history written
backdated, a ``start()`` inside a transaction held open for longer) is not in an hour
already rolled: :func:`rebuild` counts such hours again (``manage.py pgflow_rollup
--rebuild``). Retention (``sweep.purge``) deletes rollup rows older than ``RETENTION``
with :func:`purge`.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from . import db, readdb
from .core import filing, histogram
from .core.histogram import Histogram
from .core.phases import ROLLED
from .core.states import RunStatus, StepStatus
from .db import connection
from .models import FailureRollup, RollupState, RunRollup, StepRollup

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
SETTLE = timedelta(minutes=5)  # an hour is rolled this long after it ends
HOURS_PER_SWEEP = 12  # hours holding rows rolled per sweep: a sweep stays short while catching up
LOCK_KEY = 0x7067_666C_6F78  # serialises the rollup's writers (the sweep, rebuild, the command)
PHASES = ROLLED  # the phases of an attempt a StepTally holds a histogram of
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --- time -----------------------------------------------------------------------------------


def floor_to(moment: datetime, size: timedelta) -> datetime:
    """The start (UTC) of the epoch-aligned span of ``size`` holding ``moment``."""
    return _EPOCH + (moment - _EPOCH) // size * size


def ceil_to(moment: datetime, size: timedelta) -> datetime:
    start = floor_to(moment, size)
    return start if start == moment else start + size


def closed_until(at: datetime) -> datetime:
    """Every hour that ends at or before this is closed at ``at``."""
    return floor_to(at - SETTLE, HOUR)


# --- what a span of time adds up to ------------------------------------------------------------


@dataclass
class StepTally:
    attempts: int = 0
    failures: int = 0
    waited: Histogram = field(default_factory=dict)
    throttled: Histogram = field(default_factory=dict)  # attempts of limited steps only
    queued: Histogram = field(default_factory=dict)
    ran: Histogram = field(default_factory=dict)

    def add(self, other: StepTally) -> None:
        self.attempts += other.attempts
        self.failures += other.failures
        for phase in PHASES:
            histogram.merge(getattr(self, phase), getattr(other, phase))


@dataclass
class Tally:
    """The figures of some span of time, summed. Chart counts are keyed by bucket number
    (``floor(epoch / bucket_seconds)``); the per-class and per-step figures are totals."""

    # (bucket, class): [started, finished, cancelled]
    runs: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    durations: dict[str, Histogram] = field(default_factory=dict)  # class: finished runs' durations
    failures: dict[tuple[int, str, str], int] = field(default_factory=dict)  # (bucket, outcome, error class)
    steps: dict[tuple[str, str], StepTally] = field(default_factory=dict)  # (class, step)
    # (bucket, phase): every step's attempts that ended in the bucket, for the latency chart
    phases: dict[tuple[int, str], Histogram] = field(default_factory=dict)

    def add(self, other: Tally) -> Tally:
        for key, counts in other.runs.items():
            mine = self.runs.setdefault(key, [0, 0, 0])
            for index, count in enumerate(counts):
                mine[index] += count
        for path, durations in other.durations.items():
            histogram.merge(self.durations.setdefault(path, {}), durations)
        histogram.merge(self.failures, other.failures)
        for group, step in other.steps.items():
            self.steps.setdefault(group, StepTally()).add(step)
        for bucket_phase, phase_counts in other.phases.items():
            histogram.merge(self.phases.setdefault(bucket_phase, {}), phase_counts)
        return self

    def _run(self, bucket: int, path: str) -> list[int]:
        return self.runs.setdefault((bucket, path), [0, 0, 0])


def tally(since: datetime, until: datetime, bucket_seconds: int) -> Tally:
    """The figures of ``[since, until)`` by buckets of ``bucket_seconds``: rolled hours read
    from the rollup, the rest counted live. Buckets shorter than an hour are all live."""
    if bucket_seconds % 3600:
        return aggregate([(since, until)], bucket_seconds)
    mark, ends_before, starts_before = _watermark_and_settled()
    if mark is None:
        return aggregate([(since, until)], bucket_seconds)
    first = ceil_to(since, HOUR)  # [since, first) is a partial hour: live
    last = max(first, min(floor_to(until, HOUR), mark))  # [last, until) is not rolled yet: live
    ends, starts = (max(last, min(until, before)) for before in (ends_before, starts_before))
    counted = Tally().add(_kept_part(ENDS, last, ends, bucket_seconds))
    counted.add(_kept_part(STARTS, last, starts, bucket_seconds))
    counted.add(_count([(since, first), (starts, until)], [(since, first), (ends, until)], bucket_seconds))
    if first < last:
        counted.add(read(first, last, bucket_seconds))
    return counted


# --- the live hours' settled rows, kept between reads ------------------------------------------

# The hours after the watermark are counted live on every read: up to an hour and SETTLE of
# runs and attempts, which under load is every one the workers finished meanwhile. So this
# process keeps what it counted of them once every row stamped before has committed, and
# counts only the rows after on the next read. A row is stamped (store.now()) inside, or just
# before, the transaction that commits it: a start inside the caller's transaction, an end
# inside or just before the engine's (a sweep pass's repairs, stamped with the clock it read
# first, after the transaction of its lock began: sweep.run). So every row stamped before the start of the oldest
# transaction open now, less STAMP_MARGIN (the stamp taken before BEGIN; other hosts' clocks),
# is visible. The kept ends reach that moment but never more than LIVE_SETTLE back (the
# engine's transactions are short); the kept starts never more than SETTLE back (a start()
# in a long transaction commits late, and past SETTLE the rollup misses it too). A row stamped
# longer before its commit is missing from the kept part until its hour is rolled, when the
# watermark moves and the rolled figures replace it. Where pg_stat_activity hides another
# role's sessions (no pg_read_all_stats), and on a standby (by its replay time), the kept
# parts stop LIVE_SETTLE and SETTLE back.
LIVE_SETTLE = timedelta(seconds=10)
STAMP_MARGIN = timedelta(seconds=1)
ENDS, STARTS = "ends", "starts"  # the kept parts: runs finished or cancelled and attempts ended; runs started

_CLOCK_SQL = """
WITH clock AS (
    SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_xact_replay_timestamp() ELSE statement_timestamp() END AS now,
           CASE WHEN pg_is_in_recovery() THEN NULL  -- greatest() passes over it
                ELSE least(statement_timestamp(), (
                    SELECT CASE WHEN bool_or(backend_type IS NULL) THEN '-infinity'::timestamptz
                                ELSE min(xact_start) FILTER (WHERE backend_type = 'client backend') END
                    FROM pg_stat_activity WHERE datname = current_database())) - %(margin)s
           END AS open_since
)
SELECT (SELECT rolled_until FROM pgflow_rollup_state WHERE id = 1),
       greatest(now - %(ends)s, open_since), greatest(now - %(starts)s, open_since)
FROM clock
"""


@dataclass(frozen=True)
class _Kept:
    until: datetime  # the ends of [watermark, until) are counted
    counted: Tally


_kept: dict[tuple[str, str, int, datetime], _Kept] = {}  # (alias, kind, bucket_seconds, watermark): counted
_kept_lock = threading.Lock()


def _watermark_and_settled() -> tuple[datetime | None, datetime, datetime]:
    """``rolled_until()``, and the moments every end and every start stamped before is
    visible to the reads here (see above). One round trip for all three."""
    mark, ends, starts = _rows(_CLOCK_SQL, {"ends": LIVE_SETTLE, "starts": SETTLE, "margin": STAMP_MARGIN})[0]
    return mark, ends or _EPOCH, starts or _EPOCH  # a standby that has replayed nothing: keep nothing


def _kept_part(kind: str, mark: datetime, settled: datetime, bucket_seconds: int) -> Tally:
    """The ends (``ENDS``) or the starts (``STARTS``) of ``[mark, settled)``: what this process
    kept of them, extended to ``settled``."""
    if settled <= mark:
        return Tally()
    key = (readdb.alias(), kind, bucket_seconds, mark)
    with _kept_lock:
        kept = _kept.get(key)
    if kept is None or kept.until > settled:  # a read of an earlier moment: count it whole
        kept = _Kept(mark, Tally())
    if kept.until < settled:
        span = [(kept.until, settled)]
        more = _count([], span, bucket_seconds) if kind == ENDS else _count(span, [], bucket_seconds)
        kept = _Kept(settled, Tally().add(kept.counted).add(more))
        with _kept_lock:
            for other in [k for k in _kept if k[:3] == key[:3] and k[3] != mark]:
                del _kept[other]  # an earlier watermark's: its hours are rolled now
            _kept[key] = kept
    return kept.counted


def forget() -> None:
    """Drop the kept ends (a test's backdated rows, a database emptied under a running process)."""
    with _kept_lock:
        _kept.clear()


# --- counting live -----------------------------------------------------------------------------

# One attempt's phases, as pgflow.core.phases.pieces splits them, in SQL (checked against
# it on sample rows by tests/integration/test_insights.py). A phase
# is NULL until it is over (it then has no bucket and is not counted in the histogram).
# "woken" is a signal step parked before its body and scheduled again when the signal came.
# Throttled is counted for the attempts a limit let through (throttled_until set), never
# past their start; queued starts where throttled ended.
_PHASES_SQL = """
    CASE WHEN s.waiting_since IS NOT NULL AND s.waiting_since < s.scheduled_at
         THEN s.waiting_since ELSE s.scheduled_at END AS waited_end,
    CASE WHEN s.throttled_until IS NOT NULL
         THEN greatest(s.scheduled_at, least(s.throttled_until, s.started_at)) END AS let_through,
    s.created_at, s.scheduled_at, s.started_at, s.finished_at, s.waiting_since, s.status,
    (s.waiting_since IS NOT NULL AND s.waiting_since >= s.scheduled_at) AS parked_after_body
"""
_WAITED = """CASE WHEN started_at IS NOT NULL OR finished_at IS NOT NULL
                  THEN greatest(date_part('epoch', least(waited_end, coalesce(finished_at, waited_end))
                                         - created_at), 0) END"""
_THROTTLED = """CASE WHEN let_through IS NOT NULL
                  THEN greatest(date_part('epoch', let_through - scheduled_at), 0) END"""
_QUEUED = """CASE WHEN started_at IS NOT NULL
                  THEN greatest(date_part('epoch', started_at - coalesce(let_through, scheduled_at)), 0) END"""
_RAN = """CASE WHEN started_at IS NULL THEN NULL
               WHEN parked_after_body THEN greatest(date_part('epoch', waiting_since - started_at), 0)
               WHEN finished_at IS NOT NULL THEN greatest(date_part('epoch', finished_at - started_at), 0)
          END"""

# What the live attempt count reads of a step row (not its output or error text).
_STEP_COLUMNS = (
    "run_id, step_name, outcome, error_class, status, created_at, scheduled_at, started_at, finished_at, "
    "waiting_since, throttled_until"
)

_STARTED_SQL = """
    SELECT floor(date_part('epoch', created_at) / %(bucket)s)::bigint, workflow_class, count(*)
    FROM {created} AS r GROUP BY 1, 2
"""

# One scan gives the counts per bucket and the duration histogram per class (grouping sets).
_ENDED_SQL = f"""
    SELECT GROUPING(slot), workflow_class, slot, status, duration, count(*)
    FROM (
        SELECT workflow_class, status, floor(date_part('epoch', finished_at) / %(bucket)s)::bigint AS slot,
               CASE WHEN status = '{RunStatus.FINISHED}'
                    THEN {histogram.sql_bucket("date_part('epoch', finished_at - created_at)")} END AS duration
        FROM {{finished}} AS r WHERE status IN ('{RunStatus.FINISHED}', '{RunStatus.CANCELLED}')
    ) AS ended
    GROUP BY GROUPING SETS ((workflow_class, slot, status), (workflow_class, duration))
"""

# One scan of the attempts that ended gives each step's counts, its phase histograms, the
# failures per bucket, action and error class, and each phase's histogram per bucket (all
# steps together). GROUPING(...) names the set of a row. The seconds are date_part's float8,
# not extract's numeric (PostgreSQL 14 on), whose arithmetic was a third of the query; OFFSET 0
# keeps the phases a subquery of their own, so each is computed once per attempt and not
# inlined thrice into its bucket's expression.
_ATTEMPTS_SQL = f"""
    WITH attempt AS (
        SELECT s.run_id, s.step_name, s.outcome, coalesce(s.error_class, '') AS error_class,
               floor(date_part('epoch', s.finished_at) / %(bucket)s)::bigint AS slot, {_PHASES_SQL}
        FROM {{finished}} AS s
    ), phases AS (
        SELECT run_id, step_name, status, outcome, error_class, slot,
               {_WAITED} AS waited, {_THROTTLED} AS throttled, {_QUEUED} AS queued, {_RAN} AS ran
        FROM attempt OFFSET 0
    ), keyed AS (
        SELECT r.workflow_class, p.step_name, p.status, p.outcome, p.error_class, p.slot,
               {histogram.sql_bucket("p.waited")} AS waited, {histogram.sql_bucket("p.throttled")} AS throttled,
               {histogram.sql_bucket("p.queued")} AS queued,
               {histogram.sql_bucket("p.ran")} AS ran
        FROM phases p JOIN pgflow_run r ON r.id = p.run_id WHERE true{{tenants}}
    )
    SELECT GROUPING(waited, throttled, queued, ran, slot), workflow_class, step_name, slot, outcome, error_class,
           waited, throttled, queued, ran, count(*), count(*) FILTER (WHERE status = '{StepStatus.FAILED}')
    FROM keyed
    GROUP BY GROUPING SETS ((workflow_class, step_name), (workflow_class, step_name, waited),
                            (workflow_class, step_name, throttled), (workflow_class, step_name, queued),
                            (workflow_class, step_name, ran),
                            (slot, outcome, error_class),
                            (slot, waited), (slot, throttled), (slot, queued), (slot, ran))
"""
# GROUPING(waited, throttled, queued, ran, slot): a bit is set for each column the row's set leaves out.
_STEP_TOTALS, _FAILURES = 0b11111, 0b11110
_PHASE_SETS = {0b01111: 0, 0b10111: 1, 0b11011: 2, 0b11101: 3}  # -> index into PHASES
_BUCKET_PHASE_SETS = {0b01110: 0, 0b10110: 1, 0b11010: 2, 0b11100: 3}  # (slot, phase) -> index into PHASES


def aggregate(
    ranges: Sequence[tuple[datetime, datetime]], bucket_seconds: int, *, tenants: Sequence[str] | None = None
) -> Tally:
    """Count the engine's rows whose figure became final in any of the half-open ``ranges``
    (see the module docstring), by buckets of ``bucket_seconds``. Writes an hour's rollup
    and reads the live parts of a window; with ``tenants``, only the rows of runs of those
    tenants (the rollup is not kept per tenant, so a tenant's insights count here)."""
    return _count(ranges, ranges, bucket_seconds, tenants=tenants)


def _count(
    starts: Sequence[tuple[datetime, datetime]],
    ends: Sequence[tuple[datetime, datetime]],
    bucket_seconds: int,
    *,
    tenants: Sequence[str] | None = None,
) -> Tally:
    """:func:`aggregate`, with the runs started counted over ``starts`` and the ends (runs
    finished or cancelled, attempts ended) over ``ends``."""
    counted = Tally()
    params: dict[str, Any] = {"bucket": bucket_seconds, "tenants": list(tenants or ())}
    of_tenants = "" if tenants is None else " AND tenant = ANY(%(tenants)s)"
    numbers = itertools.count()  # one name per span's parameters

    def within(ranges: Sequence[tuple[datetime, datetime]], table: str, column: str, columns: str) -> str | None:
        # The rows of each span, one range scan each. Not "a OR b": an index scan cannot
        # bound itself by an OR, so with the statistics behind a burst of writes (a planner
        # expecting one row) it read the whole finished_at index and filtered it.
        scans = []
        for low, high in ranges:
            if low >= high:
                continue
            i = next(numbers)
            params[f"low{i}"], params[f"high{i}"] = low, high
            where = of_tenants
            if table == "pgflow_step":  # the days before the span's are left out when planned
                params[f"day{i}"] = filing.first_day(low)
                where = f" AND {filing.filed_from('history_day', f'day{i}')}"
            bounds = f"{column} >= %(low{i})s AND {column} < %(high{i})s"
            scans.append(f"SELECT {columns} FROM {table} WHERE {bounds}{where}")
        return "(" + " UNION ALL ".join(scans) + ")" if scans else None

    started = within(starts, "pgflow_run", "created_at", "created_at, workflow_class")
    if started is not None:
        for slot, path, count in _rows(_STARTED_SQL.format(created=started), params):
            counted._run(slot, path)[0] += count
    ended = within(ends, "pgflow_run", "finished_at", "workflow_class, status, created_at, finished_at")
    if ended is None:
        return counted
    for grouping, path, slot, status, duration, count in _rows(_ENDED_SQL.format(finished=ended), params):
        if grouping == 0:
            counted._run(slot, path)[1 if status == RunStatus.FINISHED else 2] += count
        elif duration is not None:  # a cancelled run has no duration
            counted.durations.setdefault(path, {})[duration] = count
    for grouping, path, name, slot, outcome, error_class, *keys, count, failed in _rows(
        _ATTEMPTS_SQL.format(
            finished=within(ends, "pgflow_step", "finished_at", _STEP_COLUMNS),
            tenants=of_tenants.replace(" tenant", " r.tenant"),
        ),
        params,
    ):
        if grouping == _FAILURES:
            if failed:
                counted.failures[(slot, outcome, error_class)] = failed
            continue
        if grouping in _BUCKET_PHASE_SETS:
            phase = _BUCKET_PHASE_SETS[grouping]
            if keys[phase] is not None:  # NULL: the phase is not over
                counted.phases.setdefault((slot, PHASES[phase]), {})[keys[phase]] = count
            continue
        step = counted.steps.setdefault((path, name), StepTally())
        if grouping == _STEP_TOTALS:
            step.attempts, step.failures = count, failed
        else:
            phase = _PHASE_SETS[grouping]
            if keys[phase] is not None:  # NULL: the phase is not over
                getattr(step, PHASES[phase])[keys[phase]] = count
    return counted


# --- reading the rollup ----------------------------------------------------------------------


def rolled_until() -> datetime | None:
    """The watermark: every hour before it is rolled (None: the sweep never rolled)."""
    found = _rows("SELECT rolled_until FROM pgflow_rollup_state WHERE id = 1", {})
    return found[0][0] if found else None


def read(first: datetime, last: datetime, bucket_seconds: int, *, days: bool = True) -> Tally:
    """The rolled figures of the whole hours ``[first, last)`` (all rolled), by buckets of
    ``bucket_seconds`` (a multiple of an hour). Histograms and per-step totals come from
    day rows for whole days (``days``), the chart counts from hour rows."""
    counted = Tally()
    params: dict[str, Any] = {"first": first, "last": last, "bucket": bucket_seconds}
    for slot, path, started, finished, cancelled in _rows(
        "SELECT floor(date_part('epoch', start) / %(bucket)s)::bigint, workflow_class, sum(started), "
        "sum(finished), sum(cancelled) FROM pgflow_rollup_run "
        "WHERE hours = 1 AND start >= %(first)s AND start < %(last)s GROUP BY 1, 2",
        params,
    ):
        counted.runs[(slot, path)] = [int(started), int(finished), int(cancelled)]
    for slot, outcome, error_class, attempts in _rows(
        "SELECT floor(date_part('epoch', start) / %(bucket)s)::bigint, outcome, error_class, sum(attempts) "
        "FROM pgflow_rollup_failure WHERE start >= %(first)s AND start < %(last)s GROUP BY 1, 2, 3",
        params,
    ):
        counted.failures[(slot, outcome, error_class)] = int(attempts)

    spans = [(1, first, last)]
    day_first, day_last = ceil_to(first, DAY), floor_to(last, DAY)
    if days and day_first < day_last:
        spans = [(24, day_first, day_last), (1, first, day_first), (1, day_last, last)]
    where = " OR ".join(
        f"(hours = {hours} AND start >= %(f{i})s AND start < %(l{i})s)" for i, (hours, _, _) in enumerate(spans)
    )
    for i, (_, low, high) in enumerate(spans):
        params[f"f{i}"], params[f"l{i}"] = low, high
    # Summed with string keys as stored, converted once per group: a month is ~100,000 buckets.
    durations: dict[str, dict[str, int]] = {}
    for path, document in _rows(
        f"SELECT workflow_class, durations FROM pgflow_rollup_run WHERE ({where}) AND durations <> '{{}}'::jsonb",
        params,
    ):
        histogram.merge(durations.setdefault(path, {}), _json(document))
    counted.durations = {path: histogram.from_json(merged) for path, merged in durations.items()}
    steps: dict[tuple[str, str], tuple[list[int], list[dict[str, int]]]] = {}
    for path, name, attempts, failures, *phases in _rows(
        f"SELECT workflow_class, step_name, attempts, failures, waited, throttled, queued, ran FROM pgflow_rollup_step "
        f"WHERE {where}",
        params,
    ):
        totals, merged = steps.setdefault((path, name), ([0, 0], [{} for _ in PHASES]))
        totals[0] += attempts
        totals[1] += failures
        for into, document in zip(merged, phases, strict=True):
            histogram.merge(into, _json(document))
    for key, (totals, merged) in steps.items():
        counted.steps[key] = StepTally(totals[0], totals[1], *(histogram.from_json(m) for m in merged))
    # Per bucket and phase: a day row fits a bucket of whole days; shorter buckets read hour rows.
    per_bucket = where if bucket_seconds % 86_400 == 0 else "(hours = 1 AND start >= %(first)s AND start < %(last)s)"
    by_slot: dict[tuple[int, str], dict[str, int]] = {}
    for slot, *phases in _rows(
        f"SELECT floor(date_part('epoch', start) / %(bucket)s)::bigint, waited, throttled, queued, ran "
        f"FROM pgflow_rollup_step WHERE {per_bucket}",
        params,
    ):
        for phase, document in zip(PHASES, phases, strict=True):
            histogram.merge(by_slot.setdefault((slot, phase), {}), _json(document))
    counted.phases = {key: histogram.from_json(merged) for key, merged in by_slot.items() if merged}
    return counted


# --- writing the rollup ------------------------------------------------------------------------


def roll(*, at: datetime | None = None, limit: int | None = HOURS_PER_SWEEP) -> int:
    """Roll the hours closed at ``at`` (now by default) after the watermark, oldest first:
    at most ``limit`` hours holding rows (``None``: every one). Returns how many it rolled."""
    at = at or timezone.now()
    until = closed_until(at)
    rolled = 0
    while limit is None or rolled < limit:
        with db.atomic():
            mark = _lock_watermark()
            start = mark
            if mark is None:
                first = first_activity()
                mark = until if first is None else min(floor_to(first, HOUR), until)
            if mark >= until:
                if mark != start:
                    _save_watermark(mark)
                break
            following = _next_activity(mark)
            if following is None or following >= mark + HOUR:
                # No row until `target`: its hours count as rolled, without a query each.
                target = until if following is None else min(floor_to(following, HOUR), until)
                day = floor_to(mark, DAY)
                if day < mark and day + DAY <= target:
                    _compact_day(day)  # the day's last hours are among those passed over
                _save_watermark(target)
                continue
            _write_hour(mark)
            mark += HOUR
            if mark == floor_to(mark, DAY):
                _compact_day(mark - DAY)
            _save_watermark(mark)
            rolled += 1
    return rolled


def rebuild(since: datetime, until: datetime) -> int:
    """Count again every rolled hour that overlaps ``[since, until)``, and the days holding
    them: for rows written after their hour was rolled (a backdated history). Hours after
    the watermark are left to :func:`roll`. Returns how many hours it counted."""
    done = 0
    day = floor_to(since, DAY)
    while day < until:
        with db.atomic():
            mark = _lock_watermark()
            if mark is None or day >= mark:
                break
            hours = _hours(max(floor_to(since, HOUR), day), min(ceil_to(until, HOUR), day + DAY, mark))
            for hour in hours:
                _write_hour(hour)
            done += len(hours)
            if day + DAY <= mark:
                _compact_day(day)
        day += DAY
    return done


def purge(cutoff: datetime) -> int:
    """Delete the rollup rows of hours and days that ended before ``cutoff``; returns how many."""
    deleted = 0
    with db.atomic(), connection.cursor() as cursor:
        for table in ("pgflow_rollup_run", "pgflow_rollup_step"):
            cursor.execute(
                f"DELETE FROM {table} WHERE (hours = 1 AND start <= %(hour)s) OR (hours = 24 AND start <= %(day)s)",
                {"hour": cutoff - HOUR, "day": cutoff - DAY},
            )
            deleted += cursor.rowcount
        cursor.execute("DELETE FROM pgflow_rollup_failure WHERE start <= %s", [cutoff - HOUR])
        deleted += cursor.rowcount
    return deleted


def _write_hour(hour: datetime) -> None:
    """Replace the rows of one hour with a fresh count."""
    counted = aggregate([(hour, hour + HOUR)], 3600)
    _replace(hour, 1, counted)
    FailureRollup.objects.filter(start=hour).delete()
    FailureRollup.objects.bulk_create(
        [
            FailureRollup(start=hour, outcome=outcome, error_class=error_class, attempts=count)
            for (_, outcome, error_class), count in sorted(counted.failures.items())
        ]
    )


def _compact_day(day: datetime) -> None:
    """Replace the day's rows (``hours = 24``) with the sum of its hour rows."""
    _replace(day, 24, read(day, day + DAY, 86_400, days=False))


def _replace(start: datetime, hours: int, counted: Tally) -> None:
    RunRollup.objects.filter(hours=hours, start=start).delete()
    StepRollup.objects.filter(hours=hours, start=start).delete()
    per_class: dict[str, list[int]] = {}
    for (_, path), counts in counted.runs.items():
        mine = per_class.setdefault(path, [0, 0, 0])
        for index, count in enumerate(counts):
            mine[index] += count
    RunRollup.objects.bulk_create(
        [
            RunRollup(
                start=start,
                hours=hours,
                workflow_class=path,
                started=counts[0],
                finished=counts[1],
                cancelled=counts[2],
                durations=histogram.to_json(counted.durations.get(path, {})),
            )
            for path, counts in sorted(per_class.items())
        ]
    )
    StepRollup.objects.bulk_create(
        [
            StepRollup(
                start=start,
                hours=hours,
                workflow_class=path,
                step_name=name,
                attempts=step.attempts,
                failures=step.failures,
                waited=histogram.to_json(step.waited),
                throttled=histogram.to_json(step.throttled),
                queued=histogram.to_json(step.queued),
                ran=histogram.to_json(step.ran),
            )
            for (path, name), step in sorted(counted.steps.items())
        ]
    )


def _lock_watermark() -> datetime | None:
    """Take the rollup's lock for this transaction and read the watermark."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
    return rolled_until()


def _save_watermark(mark: datetime) -> None:
    RollupState.objects.update_or_create(pk=1, defaults={"rolled_until": mark})


def first_activity() -> datetime | None:
    """The earliest moment any figure became final (None for empty tables)."""
    return _next_activity(None)


def _next_activity(after: datetime | None) -> datetime | None:
    """The earliest moment at or after ``after`` (ever, for None) at which a figure became
    final: three probes of the indexes on the timestamps."""
    bound = "" if after is None else "WHERE {column} >= %(after)s"
    sql = (
        "SELECT least("
        + ", ".join(
            f"(SELECT min({column}) FROM {table} {bound.format(column=column)})"
            for table, column in (
                ("pgflow_run", "created_at"),
                ("pgflow_run", "finished_at"),
                ("pgflow_step", "finished_at"),
            )
        )
        + ")"
    )
    return _rows(sql, {"after": after})[0][0]


def _hours(first: datetime, last: datetime) -> list[datetime]:
    return [first + index * HOUR for index in range(max(0, (last - first) // HOUR))]


def _json(document: Any) -> dict[str, int]:
    return json.loads(document) if isinstance(document, str | bytes) else document


def _rows(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    # The replica inside readdb.reading() (the insights); the sweep's roll reads the primary.
    with readdb.connection().cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
