#!/usr/bin/env python
"""Tick lag with many schedules due at the same moment.

    .venv/bin/python benchmarks/schedules.py [--schedules 1000] [--workers 2]

Creates SCHEDULES schedules (hourly, overlap "allow") whose next tick is the same moment
a few seconds ahead, starts WORKERS worker processes on the benchmark database
(pgflow_bench, as benchmarks/engine.py), waits until every tick has started its run and
prints the lag of each tick (tick due -> run started, from the ScheduleTick rows): p50,
p95, max, and how long the last tick took. It also checks each tick started one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.engine import reset, setup_django, worker  # noqa: E402

LEAD = 15.0  # seconds from now to the tick: the workers are up and idle by then


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    setup_django()
    from django.db import connection, transaction

    from pgflow.models import Schedule, ScheduleTick, WorkflowRun

    reset()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE pgflow_schedule_tick, pgflow_schedule RESTART IDENTITY CASCADE")
    now = datetime.now(UTC)
    tick = (now + timedelta(seconds=LEAD)).replace(microsecond=0)
    with transaction.atomic():
        Schedule.objects.bulk_create(
            [
                Schedule(
                    workflow_class="benchmarks.workflows.ThreeNoops",
                    name=f"bench-{n}",
                    every=timedelta(hours=1),
                    overlap="allow",
                    next_tick_at=tick,
                    created_at=now,
                    updated_at=now,
                )
                for n in range(args.schedules)
            ]
        )
    procs = [worker(4) for _ in range(args.workers)]
    try:
        deadline = time.monotonic() + 120 + LEAD
        while ScheduleTick.objects.filter(outcome="started").count() < args.schedules:
            if time.monotonic() > deadline:
                raise SystemExit("timed out waiting for the ticks")
            time.sleep(0.2)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
    lags = sorted(
        (row.started_at - row.tick_at).total_seconds() for row in ScheduleTick.objects.filter(outcome="started")
    )
    keys = WorkflowRun.objects.values_list("key", flat=True)
    assert len(keys) == len(set(keys)) == args.schedules, "a tick started more than one run"
    p95 = lags[int(0.95 * (len(lags) - 1))]
    print(
        f"{args.schedules} schedules due at once, {args.workers} workers: lag min {lags[0]:.3f}s, "
        f"p50 {statistics.median(lags):.3f}s, "
        f"p95 {p95:.3f}s, max {lags[-1]:.3f}s; {len(keys)} runs, one per tick"
    )


if __name__ == "__main__":
    main()
