"""Procrastinate: 3-step chains (each async job defers the next), idle latency, memory.

    benchmarks/.work/peers-venv/procrastinate/bin/python -m benchmarks.peers.procrastinate_peer \
        --db URL --work DIR

One ``procrastinate worker`` process with --concurrency 8 (async jobs on one event loop),
LISTEN/NOTIFY on (its default), in its own database on the same PostgreSQL.
"""

from __future__ import annotations

import os
import sys

from benchmarks.peers.common import System, main, recreate_database, versions

CONCURRENCY = 8
DATABASE = "bench_procrastinate"


class Procrastinate(System):
    name = "procrastinate"

    def config(self) -> str:
        return f"1 worker, --concurrency {CONCURRENCY} async jobs, LISTEN/NOTIFY, jobs kept (default)"

    def versions(self) -> dict[str, str]:
        return versions("procrastinate", "psycopg", "psycopg-pool")

    def prepare(self) -> None:
        self.url = recreate_database(self.args.db, DATABASE)
        os.environ["BENCH_DB_URL"] = self.url
        from benchmarks.peers.procrastinate_tasks import app

        app.open()
        app.schema_manager.apply_schema()

    def worker_env(self) -> dict[str, str]:
        return {"BENCH_DB_URL": self.url}

    def enqueue_chains(self, runs: int) -> None:
        from benchmarks.peers.procrastinate_tasks import step

        for _ in range(runs):
            step.defer(n=1)

    def worker_argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "procrastinate",
            "--app",
            "benchmarks.peers.procrastinate_tasks.app",
            "worker",
            "--concurrency",
            str(CONCURRENCY),
        ]

    def enqueue_latency_job(self) -> None:
        from benchmarks.peers.procrastinate_tasks import latency

        latency.defer()  # autocommit: committed when it returns

    def close(self) -> None:
        from benchmarks.peers.procrastinate_tasks import app

        app.close()


if __name__ == "__main__":
    main(Procrastinate, __doc__)
