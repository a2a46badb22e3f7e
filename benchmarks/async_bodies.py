#!/usr/bin/env python
"""1,000 due steps that each ``await asyncio.sleep(1)``, on one worker: how long they take,
the database connections the worker holds (pg_stat_activity, sampled every 100 ms) and its
peak RSS.

    DATABASE_URL=postgres://... .venv/bin/python benchmarks/async_bodies.py [--steps 1000] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import engine  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--async-concurrency", type=int, default=1000)
    parser.add_argument("--sleep", type=float, default=1.0)
    args = parser.parse_args()
    engine.setup_django()
    engine.reset()
    from django.db import connection, transaction

    from benchmarks.workflows import AsyncSleep
    from pgflow.models import WorkflowRun

    with transaction.atomic():
        for _ in range(args.steps):
            AsyncSleep.start(input={"sleep": args.sleep})
    argv, env = engine.worker_command(args.concurrency, "--async-concurrency", str(args.async_concurrency))
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        before = cursor.fetchone()[0]
    import subprocess

    started = time.monotonic()
    worker = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **env})
    peak_connections = peak_rss = 0.0
    done = 0
    try:
        while time.monotonic() - started < 120:
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
                peak_connections = max(peak_connections, cursor.fetchone()[0] - before)
            peak_rss = max(peak_rss, rss_mb(worker.pid))
            done = WorkflowRun.objects.filter(status="finished").count()
            if done >= args.steps:
                break
            time.sleep(0.1)
        seconds = time.monotonic() - started
    finally:
        worker.terminate()
        worker.wait(30)
    print(
        f"{done:,} of {args.steps:,} async steps (await asyncio.sleep({args.sleep:g})) finished in {seconds:.1f} s "
        f"from the worker's launch (its start-up included); --concurrency {args.concurrency} "
        f"--async-concurrency {args.async_concurrency}: at most {peak_connections:.0f} database connections "
        f"held by the worker, peak RSS {peak_rss:.1f} MB"
    )


if __name__ == "__main__":
    main()
