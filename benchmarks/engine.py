#!/usr/bin/env python
"""Engine throughput and idle latency, with real worker processes on a real PostgreSQL.

    .venv/bin/python benchmarks/engine.py [--runs 2000] [--samples 50]

1. steps/s: RUNS runs of a 3-step no-op workflow, drained by one worker, then by two
   (each --concurrency 8), from the first claim to the last finish (read from the rows).
2. idle latency: with one idle worker, from a committed start() of a 1-step workflow to
   its body starting (median and p99 of SAMPLES sequential runs).

It uses its own database (pgflow_bench) on the example project's cluster, or on
DATABASE_URL's server, and prints a table to paste into benchmarks/RESULTS.md.
benchmarks/run.py measures the same next to the peers (and reuses these functions).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
# The processes that start runs (the harness's drivers) run with DEBUG off too, as a
# project's web processes do in production: with it on, Django records every query.
os.environ.setdefault("DEBUG", "false")
BENCH_DB = "pgflow_bench"


def setup_django(database: str = BENCH_DB) -> None:
    """Set Django up on ``database`` (created if missing, then migrated) beside the project's own."""
    import django

    django.setup()
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database])
        exists = cursor.fetchone()
    if not exists:
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{database}"')
    connection.close()
    connection.settings_dict["NAME"] = database
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def print_settings(*names: str) -> None:
    """Print the server's durability settings, and ``names``' too: the ground a figure stands on."""
    from django.db import connection  # after setup_django

    wanted = ["fsync", "synchronous_commit", "full_page_writes", *names]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings WHERE name = ANY(%s)",
            [wanted],
        )
        print("PostgreSQL:", cursor.fetchone()[0], flush=True)


def reset() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE pgflow_event, pgflow_signal, pgflow_batch_member, pgflow_batch, pgflow_step, "
            "pgflow_run RESTART IDENTITY CASCADE"
        )


def worker_command(concurrency: int, *extra: str) -> tuple[list[str], dict[str, str]]:
    """The argv and the extra environment of a worker on the benchmark database."""
    argv = [
        sys.executable,
        str(ROOT / "manage.py"),
        "pgflow_worker",
        "-v",
        "0",
        "--concurrency",
        str(concurrency),
        *extra,
    ]
    # DEBUG off, as in production: with it on, Django records every query (the peers run without it).
    return argv, {
        "DJANGO_SETTINGS_MODULE": "benchmarks.settings",  # the benchmarks' workflows load at start
        "PGFLOW_TEST_DB_NAME": BENCH_DB,
        "PGFLOW_LOG_LEVEL": "WARNING",
        "PGFLOW_POLL_SECONDS": "5",
        "DEBUG": "false",
    }


def worker(concurrency: int, *extra: str) -> subprocess.Popen[bytes]:
    argv, env = worker_command(concurrency, *extra)
    return subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **env})


def enqueue(runs: int, workflow: str = "no-op") -> None:
    """RUNS runs of ThreeNoops (or, for ``"realistic"``, of Realistic), started in one
    transaction (no worker sees any before all are there)."""
    from django.db import transaction

    from benchmarks.workflows import Realistic, ThreeNoops

    cls = Realistic if workflow == "realistic" else ThreeNoops
    with transaction.atomic():
        for _ in range(runs):
            cls.start()


def finished_runs() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgflow_run WHERE status = 'finished'")
        return int(cursor.fetchone()[0])


def step_window() -> tuple[int, float]:
    """Finished steps, and seconds from the first claim to the last finish, read from the rows."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at)) FROM pgflow_step "
            "WHERE finished_at IS NOT NULL"
        )
        steps, seconds = cursor.fetchone()
    return int(steps), float(seconds or 0.0)


def analyze() -> None:
    """Statistics for the just-filled tables, as autovacuum would soon have (see
    benchmarks/peers/common.analyze_server)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgflow_run, pgflow_step")


def throughput(runs: int, workers: int, concurrency: int) -> float:
    reset()
    enqueue(runs)
    analyze()
    procs = [worker(concurrency, "--burst") for _ in range(workers)]
    try:
        for proc in procs:
            proc.wait()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    finished = finished_runs()
    if finished != runs:
        raise SystemExit(f"only {finished} of {runs} runs finished")
    steps, seconds = step_window()
    return steps / seconds


def latency(samples: int) -> list[float]:
    from pgflow.models import WorkflowRun

    reset()
    proc = worker(2)
    try:
        time.sleep(2)  # the worker is up and idle, listening
        found = start_to_body(samples, gap=lambda: 0.05)
        assert WorkflowRun.objects.filter(status="finished").count() == samples
        return found
    finally:
        proc.terminate()
        proc.wait()


def start_to_body(samples: int, *, gap: Callable[[], float]) -> list[float]:
    """SAMPLES sequential starts of a 1-step workflow whose body records the wall clock on its
    first line, to an idle worker already up: each latency in ms, from the start() call's
    midpoint (its commit included) to the body's first line; ``gap()`` seconds between two."""
    from benchmarks.workflows import StampStart

    found = []
    for _ in range(samples):
        before = time.time()
        run = StampStart.start()  # autocommit: committed on return
        committed = (before + time.time()) / 2
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            output = run.steps.values_list("output", flat=True).first()
            if output:
                found.append((output["t"] - committed) * 1000)
                break
            time.sleep(0.002)
        else:
            raise SystemExit(f"run {run.pk} did not start within 10 s")
        time.sleep(gap())
    return found


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    setup_django()
    one = throughput(args.runs, 1, args.concurrency)
    two = throughput(args.runs, 2, args.concurrency)
    lat = latency(args.samples)
    print(f"| {args.runs} runs x 3 no-op steps, 1 worker (--concurrency {args.concurrency}) | {one:,.0f} steps/s |")
    print(f"| {args.runs} runs x 3 no-op steps, 2 workers (--concurrency {args.concurrency}) | {two:,.0f} steps/s |")
    print(
        f"| idle latency, start() commit to body start ({args.samples} runs) | median "
        f"{statistics.median(lat):.1f} ms, p99 {percentile(lat, 0.99):.1f} ms |"
    )


if __name__ == "__main__":
    main()
