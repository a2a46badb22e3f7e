"""History in day partitions (migration 0019, docs/scaling.md "History in partitions").

``pgflow_step`` and ``pgflow_event`` are partitioned by ``history_day``. Their DEFAULT
partitions, ``pgflow_step_live`` and ``pgflow_event_live``, hold every row of the runs still
open and of the runs ended since the last filing: the claim, the leases, the deadlines and
every transition read and write only those, by name. The sweep files each ended run (finished
or cancelled, its end committed ``SETTLE`` ago) into the partitions of the UTC day it ended,
``pgflow_step_20261202`` and ``pgflow_event_20261202``, made as needed with the indexes the
run page, the search and the insights read. A run ends once, so a day's partitions only ever
receive rows and are dropped whole when the day is past ``RETENTION``: no DELETE, no dead rows.

A run filed late, or never (locked by something when its turn came, or given an event after
its end, such as ``rerun_as``), keeps those rows in the live partitions: correct, only not
filed; retention deletes them there row by row.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from .. import db
from ..db import connection
from .retention import RELEASE_ATTEMPTS

TABLES = ("pgflow_step", "pgflow_event")
LIVE = {table: f"{table}_live" for table in TABLES}

# What history is read by (each live index whose readers history has): the run page and the
# purge (by run), the insights and the rollup (by time), the search (outputs, errors), and the
# primary key's lookups. The claim's, the leases' and the deadlines' partial indexes hold open
# attempts only, which history never has.
INDEXES = {
    "pgflow_step": {
        "run": "(run_id, created_at)",
        "created": "(created_at)",
        "finished": "(finished_at)",
        "id": "(id)",
        "output": "USING gin (output jsonb_path_ops) WHERE status = 'completed'",
        "error": "(run_id) WHERE error_class IS NOT NULL",
    },
    "pgflow_event": {
        "run": "(run_id, created_at)",
        "kind": "(event, created_at)",
    },
}

SETTLE = timedelta(seconds=60)  # an ended run whose end is this old has committed it
FILE_BATCH = 1000  # runs filed per transaction
AHEAD = 1  # days whose partitions are made before a run ends in them


def partition(table: str, day: date) -> str:
    """The name of ``table``'s partition for ``day``."""
    return f"{table}_{day:%Y%m%d}"


def days(table: str = "pgflow_step") -> list[date]:
    """The days ``table`` has a partition for, oldest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass AND c.relname <> %s",
            [table, LIVE[table]],
        )
        names = [row[0] for row in cursor.fetchall()]
    return sorted(datetime.strptime(name.rsplit("_", 1)[1], "%Y%m%d").date() for name in names)


def make_days(wanted: Iterable[date]) -> list[date]:
    """Make both tables' partitions for each day in ``wanted`` that has none, each day in its
    own short transaction; returns the days made. Attaching a partition takes the live
    partition's ACCESS EXCLUSIVE lock for a moment (its CHECK spares the scan), so it gives up
    after ``lock_timeout`` rather than queue every claim behind a long transaction, and the
    next sweep tries again."""
    made = []
    for day in sorted(set(wanted)):
        with db.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '2s'")
            if _make(cursor, day):
                made.append(day)
    return made


def _make(cursor: Any, day: date) -> bool:
    """Make ``day``'s partitions in the caller's transaction, unless they exist."""
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [partition("pgflow_step", day)])
    if cursor.fetchone()[0]:
        return False
    bounds = f"FROM ('{day.isoformat()}') TO ('{(day + timedelta(days=1)).isoformat()}')"
    for table in TABLES:
        name = partition(table, day)
        cursor.execute(f"CREATE TABLE {name} PARTITION OF {table} FOR VALUES {bounds}")
        for suffix, definition in INDEXES[table].items():
            cursor.execute(f"CREATE INDEX {name}_{suffix} ON {name} {definition}")
    return True


def make_ahead(at: datetime) -> list[date]:
    """Make the partitions of today and the next ``AHEAD`` days (UTC), so that filing at midnight
    needs no DDL."""
    today = at.astimezone(UTC).date()
    return make_days(today + timedelta(days=n) for n in range(AHEAD + 1))


_BATCH_SQL = """
SELECT r.id, timezone('UTC', r.finished_at)::date, r.finished_at FROM pgflow_run AS r
WHERE r.finished_at IS NOT NULL AND r.status IN ('finished', 'cancelled')
    AND r.finished_at < %(until)s
    AND (%(after)s::timestamptz IS NULL OR (r.finished_at, r.id) > (%(after)s, %(after_id)s))
ORDER BY r.finished_at, r.id LIMIT %(batch)s
"""


def file_ended(*, at: datetime, batch: int = FILE_BATCH, rounds: int = 10) -> int:
    """File the runs that ended before ``at - SETTLE`` into their days' partitions, oldest
    first, up to ``rounds`` transactions of ``batch`` runs; returns how many runs were filed.

    Each batch locks its runs (FOR SHARE SKIP LOCKED: a run a transition or a purge holds is
    passed by) and moves their rows out of the live partitions by an UPDATE of
    ``history_day`` through the parent table, then records how far it got."""
    filed = 0
    for _ in range(rounds):
        with connection.cursor() as cursor:
            cursor.execute("SELECT filed_until, filed_id FROM pgflow_history_state WHERE id = 1")
            row = cursor.fetchone()
        after, after_id = row if row else (None, 0)
        params = {"until": at - SETTLE, "after": after, "after_id": after_id, "batch": batch}
        with connection.cursor() as cursor:  # the batch's days, to make their partitions first
            cursor.execute(f"SELECT DISTINCT day FROM ({_BATCH_SQL}) AS b(id, day, at)", params)  # noqa: S608
            make_days(row[0] for row in cursor.fetchall())
        with db.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT filed_until, filed_id FROM pgflow_history_state WHERE id = 1 FOR UPDATE")
            if (row := cursor.fetchone()) and tuple(row) != (after, after_id):  # another filing moved it
                continue
            cursor.execute(_BATCH_SQL + " FOR SHARE OF r SKIP LOCKED", params)
            runs = cursor.fetchall()
            if not runs:
                return filed
            by_day: dict[date, list[int]] = {}
            for run_id, day, _ in runs:
                by_day.setdefault(day, []).append(run_id)
            cursor.execute(RELEASE_ATTEMPTS, {"ids": [run_id for run_id, _, _ in runs]})
            for day, ids in by_day.items():
                _make(cursor, day)  # made by the peek above, unless a run was dated back since
                for table in TABLES:
                    cursor.execute(
                        f"UPDATE {table} SET history_day = %s WHERE history_day IS NULL AND run_id = ANY(%s)",  # noqa: S608
                        [day, ids],
                    )
            last_id, _, last_at = runs[-1]
            cursor.execute(
                "INSERT INTO pgflow_history_state (id, filed_until, filed_id) VALUES (1, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET filed_until = excluded.filed_until, filed_id = excluded.filed_id",
                [last_at, last_id],
            )
        filed += len(runs)
        if len(runs) < batch:
            break
    return filed


def unfile() -> None:
    """Move every filed row back into the live partitions and forget where the filing stood,
    so that the next sweep files each ended run again. ``pgflow.testing``'s clock does it
    before it moves the rows' times back: a run's day may change with them."""
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"UPDATE {table} SET history_day = NULL WHERE history_day IS NOT NULL")  # noqa: S608
        cursor.execute("DELETE FROM pgflow_history_state")


def drop_expired(cutoff: datetime) -> list[date]:
    """Drop both tables' partitions of every day wholly before ``cutoff`` whose runs retention
    has deleted (none ended before the day's end is left: a run locked, or not yet archived,
    keeps its day); returns the days dropped."""
    dropped = []
    for day in days():
        end = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
        if end > cutoff:
            break
        with db.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM pgflow_run "
                "WHERE finished_at < %s AND status IN ('finished', 'cancelled'))",
                [end],
            )
            if cursor.fetchone()[0]:
                break
            cursor.execute("SET LOCAL lock_timeout = '2s'")
            for table in TABLES:
                cursor.execute(f"DROP TABLE IF EXISTS {partition(table, day)}")  # noqa: S608 - names made here
        dropped.append(day)
    return dropped
