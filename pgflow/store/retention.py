"""Retention: deleting finished and cancelled runs, with every row they own in the live
partitions, in bounded batches. Their filed history goes with its day's partitions
(``history.drop_expired``), up to a day later."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from .. import db
from ..core.limits import SINGLETON_GATE, gate_prefix
from ..db import connection

# A singleton's gate holds runs; every other gate holds attempts.
_HOLDS_RUNS = f"k.name LIKE '{gate_prefix(SINGLETON_GATE)}%%'"

# A gate's holders are pruned by the next claim through it, which must still see the ended
# attempt in pgflow_step_live (or a singleton's ended run): a holder whose row it cannot find
# counts as held, as a row claimed after the claim's snapshot would. So the attempts of the
# runs ``%(ids)s`` leave the gates before their rows leave the live partition (purged, or
# filed into history), or a key used again later would stay short of its places for ever.
RELEASE_ATTEMPTS = (
    "UPDATE pgflow_gate AS k SET holders = ARRAY(SELECT h FROM unnest(k.holders) AS h WHERE h <> ALL(gone.steps)) "
    "FROM (SELECT array_agg(id) AS steps FROM pgflow_step_live WHERE run_id = ANY(%(ids)s)) AS gone "
    f"WHERE NOT {_HOLDS_RUNS} AND k.holders && gone.steps"
)

# Every statement of a purge or a filing finds its rows by an index (a run's id, its rows'
# run_id). A live partition after a filing and a VACUUM holds few rows on many empty pages,
# and PostgreSQL may then plan a sequential scan of every page for each batch (seen: 21 ms
# for a batch of 500 runs, 0.6 ms by the index; benchmarks/RESULTS.md, "Issue 38: retention
# without the links' checks"). For the batch's transaction only.
INDEXED_ONLY = "SET LOCAL enable_seqscan = off"

_PURGE = [
    "UPDATE pgflow_gate AS k SET holders = ARRAY(SELECT h FROM unnest(k.holders) AS h WHERE h <> ALL(%(ids)s)) "
    f"WHERE {_HOLDS_RUNS} AND k.holders && %(ids)s::bigint[]",
    RELEASE_ATTEMPTS,
    # The live partitions only: a filed run's rows go with their day (history.drop_expired).
    "DELETE FROM pgflow_event_live WHERE run_id = ANY(%(ids)s)",
    "DELETE FROM pgflow_signal WHERE run_id = ANY(%(ids)s)",
    "DELETE FROM pgflow_batch_member WHERE batch_id IN (SELECT id FROM pgflow_batch WHERE run_id = ANY(%(ids)s))",
    "DELETE FROM pgflow_batch WHERE run_id = ANY(%(ids)s)",
    "DELETE FROM pgflow_step_live WHERE run_id = ANY(%(ids)s)",
    # What the models declare SET_NULL towards a run, done here: Django's on_delete is the
    # ORM's, and these links are not foreign keys (pgflow.store.links), so nothing else would
    # stop a row naming a purged run (a re-run of an old run, a child of a parent kept open,
    # a schedule's tick and last run).
    "UPDATE pgflow_run SET rerun_of_id = NULL WHERE rerun_of_id = ANY(%(ids)s)",
    "UPDATE pgflow_run SET parent_id = NULL WHERE parent_id = ANY(%(ids)s)",
    "UPDATE pgflow_batch_member SET child_id = NULL WHERE child_id = ANY(%(ids)s)",
    "UPDATE pgflow_schedule SET last_run_id = NULL WHERE last_run_id = ANY(%(ids)s)",
    "UPDATE pgflow_schedule_tick SET run_id = NULL WHERE run_id = ANY(%(ids)s)",
    "DELETE FROM pgflow_run WHERE id = ANY(%(ids)s)",
]


def purge_runs(
    cutoff: datetime,
    *,
    batch: int,
    rounds: int,
    seconds: float | None = None,
    archive: Callable[[list[int]], set[int]] | None = None,
) -> int:
    """Delete up to ``rounds`` batches of ``batch`` finished and cancelled runs that ended before
    ``cutoff`` (and no more batch begun after ``seconds``), each batch in its own short
    transaction; returns how many runs went. A run
    locked now (SKIP LOCKED) waits for a later sweep. ``archive`` (``pgflow.archive.write``)
    gets each batch's ids, locked, and returns those it wrote (or need not keep): only those
    are deleted; after a batch it could not write whole, the purge stops until the next sweep."""
    deleted = 0
    stop = None if seconds is None else time.monotonic() + seconds
    for _ in range(rounds):
        if stop is not None and time.monotonic() > stop:
            break
        with db.atomic(), connection.cursor() as cursor:
            cursor.execute(INDEXED_ONLY)
            cursor.execute(
                "SELECT id FROM pgflow_run WHERE status IN ('finished', 'cancelled') AND finished_at < %s "
                "ORDER BY finished_at LIMIT %s FOR UPDATE SKIP LOCKED",
                [cutoff, batch],
            )
            ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                break
            selected = len(ids)
            if archive is not None:
                written = archive(ids)
                ids = [run_id for run_id in ids if run_id in written]
            if ids:
                for statement in _PURGE:
                    cursor.execute(statement, {"ids": ids})
            deleted += len(ids)
        if selected < batch or len(ids) < selected:  # the last batch, or one the archive could not write
            break
    return deleted
