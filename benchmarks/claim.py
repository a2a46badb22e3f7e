#!/usr/bin/env python
"""What one claim and one next-due lookup cost when the step table is big.

    .venv/bin/python benchmarks/claim.py [--rows 300000] [--repeat 20]

Two shapes of a big ``pgflow_step`` table, written with INSERT … SELECT into the
benchmark database (pgflow_bench, as benchmarks/engine.py), then VACUUM ANALYZE:

1. *delayed*: ROWS attempts scheduled a week ahead (reminders, say) and 5 due now;
2. *backlog*: a third of them due now (workers far behind), the rest a week ahead.

For each it times ``store.claim(limit=8)`` (each claim rolled back, so every repetition
sees the same table) and the worker's next-due lookup, REPEAT times, and prints the
median and the slowest with the indexes the plans used.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DEBUG", "false")

SEED = """
INSERT INTO pgflow_run (workflow_class, status, current_step, input, definition_digest, created_at, updated_at,
                        paused_reason)
SELECT 'benchmarks.workflows.ThreeNoops', 'running', 'one', '{}'::jsonb, '', now(), now(), ''
FROM generate_series(1, %(rows)s);
INSERT INTO pgflow_step (run_id, step_name, attempt, status, outcome, queue, priority, created_at, scheduled_at,
                         worker)
SELECT id, 'one', 1, 'scheduled', '', 'workflows', 0, now(),
       CASE WHEN id <= 5 THEN now() - interval '1 second' ELSE now() + interval '7 days' END, ''
FROM pgflow_run
"""


PLAN_SCAN = re.compile(r"(Seq Scan|Index Only Scan|Index Scan|Bitmap Index Scan)(?: Backward)? (?:using|on) (\w+)")


def vacuum() -> None:
    import psycopg
    from django.db import connection

    params = {
        key: value
        for key, value in connection.get_connection_params().items()
        if key in ("dbname", "user", "password", "host", "port")
    }
    with psycopg.connect(**params, autocommit=True) as raw:
        raw.execute("VACUUM ANALYZE pgflow_run, pgflow_step")


def indexes(sql: str, params: Any) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        lines = [row[0] for row in cursor.fetchall()]
    used: list[str] = []
    for line in lines:
        match = PLAN_SCAN.search(line)
        if match:
            name = match.group(2)
            label = f"seq scan of {name}" if match.group(1) == "Seq Scan" else name
            if label not in used and "pgflow_run" not in label:
                used.append(label)
    return ", ".join(used)


def timed(call: Any, repeat: int) -> tuple[float, float]:
    from django.db import transaction

    times = []
    for _ in range(repeat):
        with transaction.atomic():
            started = time.perf_counter()
            call()
            times.append((time.perf_counter() - started) * 1000)
            transaction.set_rollback(True)
    return statistics.median(times), max(times)


def measure(shape: str, repeat: int) -> list[str]:
    from pgflow import store
    from pgflow.store.claims import CLAIM_SQL, NEXT_DUE_SQL

    at = store.now()
    claim_params = {"queues": ["workflows"], "now": at, "limit": 8, "worker": "bench", "lease_until": at}
    claimed = len(store.claim(worker="bench", queues=["workflows"], limit=8, at=at))
    claim = timed(lambda: store.claim(worker="bench", queues=["workflows"], limit=8), repeat)
    due = timed(lambda: store.next_due(["workflows"]), repeat)
    return [
        f"| {shape}: claim of 8 ({claimed} due taken) | {claim[0]:.1f} | {claim[1]:.1f} | "
        f"{indexes(CLAIM_SQL, claim_params)} |",
        f"| {shape}: next due time | {due[0]:.1f} | {due[1]:.1f} | "
        f"{indexes(NEXT_DUE_SQL, {'queues': ['workflows']})} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    from benchmarks import engine

    engine.setup_django()
    from django.db import connection, transaction

    engine.reset()
    with connection.cursor() as cursor:
        for statement in SEED.split(";"):
            cursor.execute(statement, {"rows": args.rows})
    vacuum()
    rows = measure(f"{args.rows:,} a week ahead, 5 due", args.repeat)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE pgflow_step SET scheduled_at = now() - interval '1 minute' WHERE id % 3 = 0")
    vacuum()
    rows += measure(f"{args.rows // 3:,} due (a backlog), the rest a week ahead", args.repeat)
    engine.reset()
    print(
        f"{args.rows:,} attempts in one queue; milliseconds, {args.repeat} repetitions "
        f"(`python benchmarks/claim.py --rows {args.rows}`):\n"
    )
    print("| what | median ms | slowest ms | indexes used |\n| --- | ---: | ---: | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
