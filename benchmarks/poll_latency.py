#!/usr/bin/env python
"""What polling costs in start latency: an idle worker LISTENing (``PGFLOW["NOTIFY"]`` True)
against one polling (NOTIFY False) every POLL_INTERVAL, straight to PostgreSQL and through a
PgBouncer in transaction mode (the setup NOTIFY False is for).

    .venv/bin/python benchmarks/poll_latency.py [--samples 100] [--polls 0.2,1]

Per variant: one idle worker (--concurrency 2); SAMPLES sequential starts of a 1-step
workflow whose body records the wall clock on its first line (benchmarks.workflows.StampStart);
latency = body start - the start() call's midpoint (its commit included); the gap between
samples is random over one poll interval (250 ms for LISTEN), so a polling worker is met at
every phase of its poll (its timer restarts when a body ends). Median
and p99 per variant, as a table for benchmarks/RESULTS.md. Its own database (--database) on
the example project's cluster; pgbouncer (the Debian package) for the pooled variant.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import engine  # noqa: E402


def sample(samples: int, env: dict[str, str], database: str, span: float) -> list[float]:
    engine.reset()
    argv, base = engine.worker_command(2)
    proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **base, "PGFLOW_TEST_DB_NAME": database, **env})
    try:
        time.sleep(3)  # up and idle
        # A polling worker's timer restarts when a body ends: a gap spread over one poll
        # interval meets it at every phase, as starts arriving at random would.
        return engine.start_to_body(samples, gap=lambda: random.uniform(0.05, 0.05 + span))  # noqa: S311
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--polls", default="0.2,1", help="POLL_INTERVAL seconds of the polling variants")
    parser.add_argument("--database", default="pgflow_bench_pooler")
    args = parser.parse_args()
    engine.setup_django(args.database)
    # The pooler of the acceptance tests (a pgbouncer process as postgres); lazy: it needs Django set up.
    from tests.acceptance.test_pgbouncer import pgbouncer, url_to

    polls = [p.strip() for p in args.polls.split(",") if p.strip()]
    variants = [("LISTEN (NOTIFY True), direct", {"PGFLOW_NOTIFY": "true", "PGFLOW_POLL_SECONDS": "5"}, False)]
    variants += [
        (f"polling every {p} s (NOTIFY False), direct", {"PGFLOW_NOTIFY": "false", "PGFLOW_POLL_SECONDS": p}, False)
        for p in polls
    ]
    variants += [
        (
            f"polling every {p} s (NOTIFY False), PgBouncer transaction mode",
            {"PGFLOW_NOTIFY": "false", "PGFLOW_POLL_SECONDS": p},
            True,
        )
        for p in polls
    ]
    rows = []
    for name, env, pooled in variants:
        span = 0.25 if env["PGFLOW_NOTIFY"] == "true" else float(env["PGFLOW_POLL_SECONDS"])
        if pooled:
            with pgbouncer("transaction", pool_size=4) as port:
                found = sample(args.samples, {**env, "DATABASE_URL": url_to(port)}, args.database, span)
        else:
            found = sample(args.samples, env, args.database, span)
        rows.append(f"| {name} | {statistics.median(found):.1f} ms | {engine.percentile(found, 0.99):.1f} ms |")
        print(rows[-1], flush=True)
    print("\n| worker | start → body, median | p99 |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
