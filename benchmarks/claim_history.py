#!/usr/bin/env python
"""Issue #38: what one claim costs behind N closed attempts, filed into day partitions or not.

    .venv/bin/python benchmarks/claim_history.py [--sizes 0,1000000,10000000] [--layouts filed,unfiled]
        [--churn 30000] [--repeat 200]

On a durable cluster of its own (benchmarks/.work/pg-durable-history: fsync, synchronous_commit
and full_page_writes on; stopped at the end), database ``pgflow_claim_history``. For each N and
layout: N closed attempts (three ``completed`` attempts to each of N/3 ``finished`` runs,
finished over the last 30 days) are written with ``generate_series`` straight into
``pgflow_step``, ``filed`` with ``history_day`` set to the UTC day their run finished (so
into that day's partition, made first by ``history.make_days``, as the sweep's filing leaves
them) or ``unfiled`` (``history_day`` NULL: all in ``pgflow_step_live``, as before
partitioning); foreign-key triggers are off while seeding (``session_replication_role``),
the tables vacuumed and analysed; one run started, and its one due attempt claimed by the
worker's first claim statement (``UNGATED_CLAIM_SQL``) REPEAT times, each rolled back to a
savepoint (as benchmarks/claim_cost.py does): the median round trip, and the shared buffers
the claim touched and the tables its plan reads (``EXPLAIN (ANALYZE, BUFFERS)``).

Then the churn a busy history leaves before autovacuum comes: CHURN attempts scheduled and
closed again with autovacuum off on ``pgflow_step``, so the claim index holds CHURN dead
entries, and the same claim timed: its first run (which reads the dead entries and marks
them) and the median after. Prints a table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import os  # noqa: E402

os.environ.setdefault("DEBUG", "false")
from example_project import pgcluster  # noqa: E402 - after the path is set

CLUSTER = ROOT / "benchmarks" / ".work" / "pg-durable-history"  # benchmarks/retention.py's too
DATABASE = "pgflow_claim_history"

# N/3 finished runs, each with three completed attempts, finished over the last 30 days:
# copies of a template run and its attempt, every other column as the engine wrote it.
RUN_VALUES = {
    "status": "'finished'",
    "key": "NULL",
    "created_at": "now() - g * interval '30 days' / %(runs)s - interval '1 minute'",
    "updated_at": "now() - g * interval '30 days' / %(runs)s",
    "finished_at": "now() - g * interval '30 days' / %(runs)s",
}
STEP_VALUES = {
    "status": "'completed'",
    "outcome": "'completed'",
    "run_id": "r.id",
    "created_at": "r.finished_at - interval '1 second' * (4 - n)",
    "scheduled_at": "r.finished_at - interval '1 second' * (4 - n)",
    "started_at": "r.finished_at - interval '1 second' * (4 - n)",
    "finished_at": "r.finished_at - interval '1 second' * (3 - n)",
    "claim_token": "NULL",
    "lease_expires_at": "NULL",
}


def seed_sql(filed: bool) -> str:
    run_columns = [name for name in columns("pgflow_run") if name != "id"]
    step_columns = [name for name in columns("pgflow_step") if name != "id"]
    runs = ", ".join(RUN_VALUES.get(name, f"t.{name}") for name in run_columns)
    day = "timezone('UTC', r.finished_at)::date" if filed else "NULL"
    steps = ", ".join({**STEP_VALUES, "history_day": day}.get(name, f"s.{name}") for name in step_columns)
    return f"""
        WITH template AS (SELECT * FROM pgflow_run ORDER BY id LIMIT 1),
        step AS (SELECT * FROM pgflow_step ORDER BY id LIMIT 1),
        runs AS (
            INSERT INTO pgflow_run ({", ".join(run_columns)})
            SELECT {runs} FROM template t, generate_series(1, %(runs)s) AS g
            RETURNING id, finished_at
        )
        INSERT INTO pgflow_step ({", ".join(step_columns)})
        SELECT {steps} FROM runs r, step s, generate_series(1, 3) AS n
    """


DUE_RUN = """
WITH run AS (
    INSERT INTO pgflow_run (workflow_class, status, current_step, input, definition_digest, created_at, updated_at,
                            paused_reason)
    VALUES ('benchmarks.workflows.StampStart', 'running', 'stamp', '{}', '', now(), now(), '')
    RETURNING id
)
INSERT INTO pgflow_step (step_name, attempt, status, outcome, queue, priority, created_at, scheduled_at, worker, run_id)
SELECT 'stamp', 1, 'scheduled', '', 'workflows', 0, now(), now(), '', id FROM run
"""


def due_run() -> None:
    """A running run with one due attempt, written as the start writes it (not through
    start(), so the figure is the claim's alone)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(DUE_RUN)


def columns(table: str) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
            [table],
        )
        return [name for (name,) in cursor.fetchall()]


def buffers(raw, sql: str, params: dict) -> tuple[int, set[str]]:
    """Shared buffers (hit + read) the claim touched, and the tables its plan reads, rolled back."""
    import psycopg

    with raw.transaction():
        cursor = psycopg.ClientCursor(raw)
        cursor.execute("SAVEPOINT c")
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0][0]["Plan"]
        cursor.execute("ROLLBACK TO SAVEPOINT c")
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0)), relations(plan)


def relations(node: dict) -> set[str]:
    found = {node["Relation Name"]} if "Relation Name" in node else set()
    for child in node.get("Plans", ()):
        found |= relations(child)
    return found


def drop_days() -> None:
    """No day partitions and no filing watermark: each size starts from an empty history."""
    from django.db import connection

    from pgflow.store import history

    with connection.cursor() as cursor:
        for day in history.days():
            for table in history.TABLES:
                cursor.execute(f"DROP TABLE {history.partition(table, day)}")
        cursor.execute("DELETE FROM pgflow_history_state")


def seed(size: int, filed: bool) -> float:
    """SIZE closed attempts behind the claim; returns the seconds the writing took."""
    from django.db import connection

    from pgflow.store import history
    from pgflow.store.locking import now

    today = now().date()
    if filed:  # the partitions of the 30 days (and today), as the sweep makes them
        history.make_days(today - timedelta(days=n) for n in range(32))
    began = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")  # no FK trigger per seeded row
        cursor.execute(seed_sql(filed), {"runs": max(size // 3, 1)})
        cursor.execute("SET session_replication_role = DEFAULT")
    return time.monotonic() - began


def size_mb(table: str) -> float:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class AS c "
            "WHERE c.relname LIKE %s AND c.relkind = 'r'",
            [table],
        )
        return int(cursor.fetchone()[0]) / 2**20


def first_and_median(raw, sql: str, params: dict, repeat: int) -> tuple[float, float]:
    import psycopg

    found = []
    with raw.transaction():
        cursor = psycopg.ClientCursor(raw)
        for _ in range(repeat):
            cursor.execute("SAVEPOINT c")
            began = time.perf_counter()
            cursor.execute(sql, params)
            cursor.fetchall()
            found.append((time.perf_counter() - began) * 1000)
            cursor.execute("ROLLBACK TO SAVEPOINT c")
    return found[0], statistics.median(found[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes", default="0,1000000,10000000", help="closed attempts behind the claim, comma-separated"
    )
    parser.add_argument("--layouts", default="filed,unfiled", help="filed (day partitions), unfiled (live)")
    parser.add_argument("--churn", type=int, default=30_000, help="attempts scheduled and closed before vacuum")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    with pgcluster.durable(CLUSTER):
        run(args)


def run(args: argparse.Namespace) -> None:
    # After DATABASE_URL names the durable cluster: the example project's settings read it.
    from benchmarks import engine
    from benchmarks.claim_cost import timed

    sizes = [int(size) for size in args.sizes.split(",")]
    layouts = args.layouts.split(",")
    engine.setup_django(DATABASE)
    from django.db import connection

    from pgflow.store import claims
    from pgflow.store.locking import now

    engine.print_settings("shared_buffers")
    print("load average:", *os.getloadavg(), flush=True)
    print(
        "| closed attempts | layout | seeded in s | live MB | day partitions MB | claim ms (median) | prepared ms "
        "| buffers | plan reads | after churn: first claim ms | then ms | load |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |")
    for size in sizes:
        for layout in layouts:
            engine.reset()
            drop_days()
            due_run()  # the template run, closed below, and the one due attempt later
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE pgflow_step SET status = 'completed', outcome = 'completed', finished_at = now()"
                )
                cursor.execute("UPDATE pgflow_run SET status = 'finished', finished_at = now()")
            seeded = seed(size, layout == "filed") if size else 0.0
            connection.close()
            with connection.cursor() as cursor:
                cursor.execute("ALTER TABLE pgflow_step_live SET (autovacuum_enabled = true)")
                cursor.execute("VACUUM ANALYZE pgflow_run")
                cursor.execute("VACUUM ANALYZE pgflow_step")
            due_run()
            at = now()
            params = {"queues": ["workflows"], "now": at, "limit": 8, "worker": "bench",
                      "lease_until": at + timedelta(seconds=60), **claims._kind_params(None, 8)}  # fmt: skip
            connection.ensure_connection()
            raw = connection.connection
            raw.execute("SET jit = off")
            plain, rows = timed(raw, claims.UNGATED_CLAIM_SQL, params, prepare=False, repeat=args.repeat)
            prepared, _ = timed(raw, claims.UNGATED_CLAIM_SQL, params, prepare=True, repeat=args.repeat)
            touched, read = buffers(raw, claims.UNGATED_CLAIM_SQL, params)
            assert rows == 1, f"the claim took {rows} attempts, not the one due"
            steps = sorted(name for name in read if name.startswith("pgflow_step"))
            live, filed = size_mb("pgflow_step_live"), size_mb("pgflow_step_2%")
            # Churn: CHURN runs' attempts scheduled (in the claim index) then closed, not vacuumed.
            with connection.cursor() as cursor:
                cursor.execute("ALTER TABLE pgflow_step_live SET (autovacuum_enabled = false)")
                cursor.execute(
                    "INSERT INTO pgflow_step (step_name, attempt, status, outcome, queue, priority, created_at, "
                    "scheduled_at, worker, run_id, gate, gate_max, gated, rate_gate, rate_limit, rate_per) "
                    "SELECT 'stamp', 2, 'scheduled', '', 'workflows', 0, now(), now() - interval '1 hour', '', id, "
                    "'', 0, false, '', 0, 0 FROM pgflow_run WHERE status = 'finished' ORDER BY id LIMIT %s",
                    [args.churn],
                )
                churned = cursor.rowcount
                cursor.execute(
                    "UPDATE pgflow_step_live SET status = 'completed', outcome = 'completed', finished_at = now() "
                    "WHERE attempt = 2 AND status = 'scheduled'"
                )
            first, then = first_and_median(raw, claims.UNGATED_CLAIM_SQL, params, args.repeat)
            with connection.cursor() as cursor:
                cursor.execute("ALTER TABLE pgflow_step_live SET (autovacuum_enabled = true)")
            load = " ".join(f"{value:.2f}" for value in os.getloadavg())
            print(
                f"| {size:,} | {layout} | {seeded:.1f} | {live:.0f} | {filed:.0f} "
                f"| {plain:.2f} | {prepared:.2f} | {touched} "
                f"| {', '.join(steps)} | {first:.2f} ({churned:,} churned) | {then:.2f} | {load} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
