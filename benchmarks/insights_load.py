#!/usr/bin/env python
"""Server time of the insights under write load: four busy workers, the page asked meanwhile.

    .venv/bin/python benchmarks/insights_load.py [--runs 20000] [--workers 4] [--concurrency 8] [--seconds 40]

On a durable cluster of its own (benchmarks/.work/pg-durable-insights: fsync,
synchronous_commit and full_page_writes on; stopped at the end), starts RUNS runs of
ThreeNoops on the engine benchmark's database, starts WORKERS workers,
and while they work computes the 24h insights (``pgflow_dashboard.insights.compute``, what the
page and insights.json serve) back to back, timing each; prints the median, p95 and slowest,
and each query's share of the slowest computation.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DEBUG", "false")

from example_project import pgcluster  # noqa: E402 - after the path is set

CLUSTER = ROOT / "benchmarks" / ".work" / "pg-durable-insights"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=40)
    args = parser.parse_args()
    with pgcluster.durable(CLUSTER):
        measure(args)


def measure(args: argparse.Namespace) -> None:
    # After DATABASE_URL names the durable cluster: the example project's settings read it.
    from benchmarks import engine

    engine.setup_django()
    engine.print_settings()
    print("load average:", *os.getloadavg(), flush=True)
    from django.db import connection
    from django.utils import timezone

    from pgflow_dashboard import insights
    from pgflow_dashboard.window import WorkflowWindow

    engine.reset()
    engine.enqueue(args.runs)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgflow_run; ANALYZE pgflow_step")
    workers = [engine.worker(args.concurrency) for _ in range(args.workers)]
    times: list[float] = []
    per_query: dict[str, float] = {}  # the query's text: seconds, over every computation
    slowest: tuple[float, list[tuple[float, str]]] = (0.0, [])
    deadline = time.monotonic() + args.seconds
    try:
        while time.monotonic() < deadline:
            window = WorkflowWindow.parse("24h", retention=None, now=timezone.now())
            queries: list[tuple[float, str]] = []

            def timed(execute, sql, params, many, context, queries=queries):
                began = time.perf_counter()
                try:
                    return execute(sql, params, many, context)
                finally:
                    queries.append((time.perf_counter() - began, " ".join(sql.split())[:110]))

            began = time.perf_counter()
            with connection.execute_wrapper(timed):
                insights.compute(window)
            took = time.perf_counter() - began
            times.append(took)
            for seconds, sql in queries:
                per_query[sql] = per_query.get(sql, 0.0) + seconds
            if took > slowest[0]:
                slowest = (took, sorted(queries, reverse=True)[:5])
    finally:
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.wait(60)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgflow_step WHERE status = 'completed'")
        done = cursor.fetchone()[0]
    ordered = sorted(times)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    print(
        f"{len(times)} computations of the 24h insights under {args.workers} workers x {args.concurrency} "
        f"({done} steps completed meanwhile): median {statistics.median(times) * 1000:.0f} ms, "
        f"p95 {p95 * 1000:.0f} ms, slowest {slowest[0] * 1000:.0f} ms"
    )
    for seconds, sql in slowest[1]:
        print(f"  {seconds * 1000:7.1f} ms  {sql}")
    print("mean per computation, by query:")
    for sql, seconds in sorted(per_query.items(), key=lambda item: -item[1])[:8]:
        print(f"  {seconds / len(times) * 1000:7.1f} ms  {sql}")


if __name__ == "__main__":
    main()
