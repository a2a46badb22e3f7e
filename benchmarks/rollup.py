#!/usr/bin/env python
"""What rolling one busy hour up costs: the sweep's longest single task (docs/scaling.md).

    .venv/bin/python benchmarks/rollup.py [--attempts 300000] [--per-run 10] [--repeat 3]

Seeds ATTEMPTS step rows (ATTEMPTS / PER_RUN runs, with benchmarks/dashboard.py's seed
statements) into one closed hour of its own database (pgflow_bench_rollup), then times
``pgflow.rollup.roll`` rolling that hour, REPEAT times from an empty rollup, and prints the
fastest and the median with the commit measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DEBUG", "false")
BENCH_DB = "pgflow_bench_rollup"
ROLLUP_TABLES = "pgflow_rollup_run, pgflow_rollup_step, pgflow_rollup_failure, pgflow_rollup_state"


def commit() -> str:
    """The commit measured, marked when the work tree differs from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "pgflow", "benchmarks"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    return head.strip() + (" (with uncommitted changes)" if dirty.strip() else "")


def seed(attempts: int, per_run: int) -> None:
    """``attempts`` attempts in the hour that closed more than SETTLE ago."""
    from django.db import connection
    from django.utils import timezone

    from benchmarks.dashboard import CLASSES, ERRORS, SEED_RUNS, SEED_STEPS
    from pgflow import rollup
    from pgflow.registry import resolve

    hour_end = rollup.floor_to(timezone.now() - rollup.SETTLE, rollup.HOUR)
    runs = attempts // per_run
    digests = [resolve(path).definition_digest() for path in CLASSES]
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE pgflow_event, pgflow_signal, pgflow_batch_member, pgflow_batch, pgflow_step, "
            f"pgflow_run, {ROLLUP_TABLES} RESTART IDENTITY CASCADE"
        )
        # Runs start within the hour and end by its end: every attempt falls in it.
        cursor.execute(
            SEED_RUNS,
            {
                "classes": CLASSES,
                "digests": digests,
                "per_run": per_run,
                "now": hour_end,
                "days": 1 / 24 / 2,
                "runs": runs,
            },
        )
        cursor.execute(
            "UPDATE pgflow_run SET created_at = created_at - interval '30 minutes', "
            "updated_at = updated_at - interval '30 minutes', "
            "finished_at = finished_at - interval '30 minutes'"
        )
        cursor.execute(SEED_STEPS, {"per_run": per_run, "now": hour_end - rollup.HOUR / 2, "errors": ERRORS})
        cursor.execute("SELECT count(*), min(created_at), max(coalesce(finished_at, created_at)) FROM pgflow_step")
        count, first, last = cursor.fetchone()
        for table in ("pgflow_run", "pgflow_step"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    print(
        f"seeded {count:,} attempts of {runs:,} runs between {first:%H:%M:%S} and {last:%H:%M:%S} UTC "
        f"(the hour ending {hour_end:%H:%M})",
        flush=True,
    )


def time_roll() -> tuple[int, float]:
    from django.db import connection

    from pgflow import rollup

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {ROLLUP_TABLES}")
    started = time.monotonic()
    rolled = rollup.roll(limit=None)
    return rolled, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attempts", type=int, default=300_000)
    parser.add_argument("--per-run", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from benchmarks import engine

    engine.setup_django(BENCH_DB)
    seed(args.attempts, args.per_run)
    results = [time_roll() for _ in range(args.repeat)]
    hours = {rolled for rolled, _ in results}
    seconds = sorted(taken for _, taken in results)
    print(
        f"rolled {'/'.join(map(str, sorted(hours)))} hour(s) holding {args.attempts:,} attempts: fastest "
        f"{seconds[0]:.2f} s, median {statistics.median(seconds):.2f} s of {args.repeat}; {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}; commit {commit()}"
    )


if __name__ == "__main__":
    main()
