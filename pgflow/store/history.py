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

import logging
import time
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import OperationalError

from .. import db
from ..db import connection
from .retention import INDEXED_ONLY, RELEASE_ATTEMPTS

logger = logging.getLogger("pgflow")

TABLES = ("pgflow_step", "pgflow_event")
LIVE = {table: f"{table}_live" for table in TABLES}

# What history is read by (each live index whose readers history has): the run page and the
# purge (by run), the insights and the rollup (by time), the search (outputs, errors), the
# approval waits and the waiting histogram (the attempts that waited), and the primary key's
# lookups. The claim's, the leases' and the deadlines' partial indexes hold open
# attempts only, which history never has.
INDEXES = {
    "pgflow_step": {
        "run": "(run_id, created_at)",
        "created": "(created_at)",
        "finished": "(finished_at)",
        "id": "(id)",
        "output": "USING gin (output jsonb_path_ops) WHERE status = 'completed'",
        "error": "(run_id) WHERE error_class IS NOT NULL",
        "waiting": "(waiting_since) WHERE waiting_since IS NOT NULL",  # the parent's too (0021)
    },
    "pgflow_event": {
        "run": "(run_id, created_at)",
        "kind": "(event, created_at)",
    },
}

SETTLE = timedelta(seconds=60)  # an ended run whose end is this old has committed it
FILE_BATCH = 1000  # runs filed per transaction
AHEAD = 1  # days whose partitions are made before a run ends in them
# How long an attach or a drop waits for the live partition's or the parent's lock before it
# gives way, to try again at the next sweep. Below deadlock_timeout (1 s by default): in a
# cycle with a body or a claim it is the DDL that gives up, before PostgreSQL picks a victim,
# and the claims queued behind its request wait no longer than this.
LOCK_TIMEOUT = "100ms"


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


def make_days(wanted: Iterable[date], *, wait: float = 0) -> list[date]:
    """Make both tables' partitions for each day in ``wanted`` that has none, each day in its
    own short transaction; returns the days made. A day whose attach could not take its locks
    within ``LOCK_TIMEOUT`` is left for the next sweep (``AHEAD`` days leave it many tries),
    or, with ``wait``, tried again every 0.2 s for up to ``wait`` seconds: for a caller that
    files now and has no next sweep (a test, a benchmark, a backfill)."""
    made = []
    pending = sorted(set(wanted))
    deadline = time.monotonic() + wait
    while True:
        gave_way = []
        for day in pending:
            try:
                with db.atomic(), connection.cursor() as cursor:
                    if _make(cursor, day):
                        made.append(day)
            except OperationalError as error:
                if not _gave_way(error):
                    raise
                gave_way.append(day)
                logger.info("history: the partitions of %s wait for the next sweep: %s%s", day, error, _held_by())
        if not gave_way or time.monotonic() >= deadline:
            return sorted(made)
        pending = gave_way
        time.sleep(0.2)


# Who holds a lock on the tables an attach or a drop locks, in this database: an autovacuum of
# a live partition, a long transaction, a session that locked them.
_HOLDERS = """
SELECT DISTINCT a.pid, coalesce(a.backend_type, ''), a.state, left(a.query, 60)
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.granted AND l.locktype = 'relation'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.relation = ANY(%s::regclass[]) AND l.pid <> pg_backend_pid()
ORDER BY a.pid
"""


def _holders(cursor: Any) -> list[tuple[int, str, str, str]]:
    cursor.execute(_HOLDERS, [[*TABLES, *LIVE.values()]])
    return cursor.fetchall()


def _held_by() -> str:
    """The holders, for the log line of a day that gave way."""
    with connection.cursor() as cursor:
        rows = _holders(cursor)
    if not rows:
        return ""
    return " (held by " + "; ".join(f"pid {pid} {kind}, {state}: {query}" for pid, kind, state, query in rows) + ")"


def _make(cursor: Any, day: date) -> bool:
    """Make ``day``'s partitions in the caller's transaction, unless they exist.

    Each is built as a table of its own, indexes included, then attached: ``CREATE TABLE ...
    PARTITION OF`` would hold the parent's lock while it builds and, in a body or a claim that
    reads through the parent, meet it in a deadlock. ATTACH takes the parent's SHARE UPDATE
    EXCLUSIVE lock, which every read and write of it passes, and the live partition's ACCESS
    EXCLUSIVE one for the moment of the attach (its CHECK spares the scan)."""
    if _exists(cursor, day):
        return False
    bounds = f"FROM ('{day.isoformat()}') TO ('{(day + timedelta(days=1)).isoformat()}')"
    for table in TABLES:
        name = partition(table, day)
        cursor.execute(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS)")
        for suffix, definition in INDEXES[table].items():
            cursor.execute(f"CREATE INDEX {name}_{suffix} ON {name} {definition}")
    # An autovacuum of a live partition holds a lock the attach needs, and where runs end by
    # the thousand a second one runs nearly all the time (each filing leaves the moved rows
    # dead there): an attach that gave way to it at every sweep would never make tomorrow's
    # partitions. PostgreSQL cancels an autovacuum that has blocked a lock request for
    # deadlock_timeout (one that prevents wraparound excepted), so while one holds them the
    # attach waits that long and LOCK_TIMEOUT more; the claims queued behind it wait as long,
    # once a day.
    timeout = LOCK_TIMEOUT
    if any(kind == "autovacuum worker" for _, kind, _, _ in _holders(cursor)):
        cursor.execute("SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout'")  # in ms
        timeout = f"{cursor.fetchone()[0] + int(LOCK_TIMEOUT.removesuffix('ms'))}ms"
    cursor.execute(f"SET LOCAL lock_timeout = '{timeout}'")
    for table in TABLES:
        cursor.execute(f"ALTER TABLE {table} ATTACH PARTITION {partition(table, day)} FOR VALUES {bounds}")
    return True


def _exists(cursor: Any, day: date) -> bool:
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [partition("pgflow_step", day)])
    return bool(cursor.fetchone()[0])


def _gave_way(error: OperationalError) -> bool:
    """Whether ``error`` is our DDL giving up a lock (or losing a deadlock) rather than a fault."""
    return getattr(error.__cause__, "sqlstate", None) in ("55P03", "40P01")


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
    ``history_day`` through the parent table, then records how far it got. A batch that ends
    in a day with no partitions yet changes nothing: the partitions are made outside it (no
    DDL while it holds its runs) and the batch is taken again."""
    filed = 0
    for _ in range(rounds):
        with db.atomic(), connection.cursor() as cursor:
            # The state row's lock makes filings take turns (the first has no row to lock,
            # and a second one's UPDATEs then find the rows filed).
            cursor.execute(INDEXED_ONLY)
            cursor.execute("SELECT filed_until, filed_id FROM pgflow_history_state WHERE id = 1 FOR UPDATE")
            after, after_id = cursor.fetchone() or (None, 0)
            params = {"until": at - SETTLE, "after": after, "after_id": after_id, "batch": batch}
            cursor.execute(_BATCH_SQL + " FOR SHARE OF r SKIP LOCKED", params)
            runs = cursor.fetchall()
            if not runs:
                return filed
            by_day: dict[date, list[int]] = {}
            for run_id, day, _ in runs:
                by_day.setdefault(day, []).append(run_id)
            missing = {day for day in by_day if not _exists(cursor, day)}
            if not missing:
                _file(cursor, runs, by_day)
        if missing:
            if set(make_days(missing)) != missing:
                return filed  # a lock held too long: the next sweep files them
            continue
        filed += len(runs)
        if len(runs) < batch:
            break
    return filed


def _file(cursor: Any, runs: list[tuple[int, date, datetime]], by_day: dict[date, list[int]]) -> None:
    cursor.execute(RELEASE_ATTEMPTS, {"ids": [run_id for run_id, _, _ in runs]})
    for day, ids in by_day.items():
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
    keeps its day); returns the days dropped. A drop waits ``LOCK_TIMEOUT`` at most for the
    parent's lock, then gives way to the next sweep."""
    dropped = []
    for day in days():
        end = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
        if end > cutoff:
            break
        try:
            with db.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    "SELECT EXISTS (SELECT 1 FROM pgflow_run "
                    "WHERE finished_at < %s AND status IN ('finished', 'cancelled'))",
                    [end],
                )
                if cursor.fetchone()[0]:
                    break
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                for table in TABLES:
                    cursor.execute(f"DROP TABLE IF EXISTS {partition(table, day)}")  # noqa: S608 - names made here
        except OperationalError as error:
            if not _gave_way(error):
                raise
            logger.info(
                "history: the partitions of %s wait for the next sweep to drop them: %s%s", day, error, _held_by()
            )
            break
        dropped.append(day)
    return dropped
