"""Celery with a Redis broker: 3-step chains (each task sends the next), idle latency, memory.

    benchmarks/.work/peers-venv/celery/bin/python -m benchmarks.peers.celery_peer \
        --db URL --redis redis://127.0.0.1:PORT/0 --work DIR

One ``celery worker`` (prefork pool, one child per core: Celery's default on this machine).
"""

from __future__ import annotations

import os
import sys

from benchmarks.peers.common import System, main, versions

CONCURRENCY = int(os.environ.get("BENCH_CELERY_CONCURRENCY", os.cpu_count() or 2))
POOL = os.environ.get("BENCH_CELERY_POOL", "prefork")


class Celery(System):
    name = "celery"

    def config(self) -> str:
        return f"1 worker, prefork pool --concurrency {CONCURRENCY}, Redis broker, no result backend"

    def versions(self) -> dict[str, str]:
        return versions("celery", "kombu", "redis")

    def worker_env(self) -> dict[str, str]:
        return {"BENCH_REDIS_URL": self.args.redis}

    def prepare(self) -> None:
        import redis

        os.environ["BENCH_REDIS_URL"] = self.args.redis
        redis.Redis.from_url(self.args.redis).flushall()

    def enqueue_chains(self, runs: int) -> None:
        from benchmarks.peers.celery_tasks import step

        for _ in range(runs):
            step.delay(1)

    def worker_argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "benchmarks.peers.celery_tasks",
            "worker",
            "--loglevel",
            "WARNING",
            "--pool",
            POOL,
            "--concurrency",
            str(CONCURRENCY),
            "--hostname",
            f"bench-{os.getpid()}@%h",
        ]

    def enqueue_latency_job(self) -> None:
        from benchmarks.peers.celery_tasks import latency

        latency.delay()


if __name__ == "__main__":
    main(Celery, __doc__)
