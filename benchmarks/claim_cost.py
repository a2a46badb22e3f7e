#!/usr/bin/env python
"""What one claim costs a worker at idle: one due ungated attempt, claimed by one statement.

    .venv/bin/python benchmarks/claim_cost.py [--repeat 300]

Times the round trip of each claim statement (each claim rolled back to a savepoint, so the
same attempt is due every time) and its planning and execution times from EXPLAIN ANALYZE:
the claim of commit 7c0c33d, before flow control (gates) was merged; the claim with gates
(CLAIM_SQL); the claim a worker sends first, ungated with a probe for gated attempts
(UNGATED_CLAIM_SQL); each also as a server-side prepared statement.
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

from benchmarks import engine  # noqa: E402

# The claim before the "Merge flowcontrol" commit (cc7c89c^1 = 7c0c33d), for comparison.
BEFORE_GATES = """
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
SELECT {claimed} FROM claimed AS s JOIN pgflow_run AS r ON r.id = s.run_id
"""


def timed(raw, sql: str, params: dict, *, prepare: bool, repeat: int) -> tuple[float, int]:
    """Median round trip in ms of ``sql`` and the rows it claimed, each claim rolled back."""
    import psycopg

    found, rows = [], 0
    with raw.transaction():
        cursor = psycopg.Cursor(raw) if prepare else psycopg.ClientCursor(raw)
        for _ in range(repeat):
            cursor.execute("SAVEPOINT c")
            began = time.perf_counter()
            cursor.execute(sql, params, prepare=prepare)
            rows = len(cursor.fetchall())
            found.append((time.perf_counter() - began) * 1000)
            cursor.execute("ROLLBACK TO SAVEPOINT c")
    return statistics.median(found[repeat // 10 :]), rows


def explained(raw, sql: str, params: dict) -> tuple[float, float]:
    import psycopg

    with raw.transaction():
        cursor = psycopg.ClientCursor(raw)
        cursor.execute("SAVEPOINT c")
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0][0]
        cursor.execute("ROLLBACK TO SAVEPOINT c")
    return plan["Planning Time"], plan["Execution Time"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    engine.setup_django()
    engine.reset()
    from django.db import connection

    from benchmarks.workflows import StampStart
    from pgflow.store import claims, rows
    from pgflow.store.locking import now

    StampStart.start()
    engine.analyze()
    at = now()
    params = {
        "queues": ["workflows"],
        "now": at,
        "limit": 8,
        "worker": "bench",
        "lease_until": at + timedelta(seconds=60),
    }
    statements = {
        "before gates (7c0c33d)": BEFORE_GATES.format(claimed=rows.CLAIMED),
        "with gates (CLAIM_SQL)": claims.CLAIM_SQL,
        "ungated, gates probed (UNGATED_CLAIM_SQL)": claims.UNGATED_CLAIM_SQL,
    }
    connection.ensure_connection()
    raw = connection.connection
    raw.execute("SET jit = off")
    print("| claim statement, 1 due attempt of 1 | round trip ms | prepared ms | planning ms | execution ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, sql in statements.items():
        plain, rows = timed(raw, sql, params, prepare=False, repeat=args.repeat)
        prepared, _ = timed(raw, sql, params, prepare=True, repeat=args.repeat)
        planning, execution = explained(raw, sql, params)
        assert rows == 1, f"{name} claimed {rows}"
        print(f"| {name} | {plain:.2f} | {prepared:.2f} | {planning:.2f} | {execution:.2f} |")


if __name__ == "__main__":
    main()
