"""The Celery app of the benchmark: a chain step sends the next one itself; Redis broker, no results."""

from __future__ import annotations

import os

from celery import Celery

from benchmarks.peers.common import CHAIN, LATENCY, stamp

app = Celery("bench", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
# No result backend: nothing reads the results, and pgflow's no-op steps store only None.
app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)


@app.task(name="bench.step")
def step(n: int) -> None:
    stamp(CHAIN)
    if n < 3:
        step.delay(n + 1)


@app.task(name="bench.latency")
def latency() -> None:
    stamp(LATENCY)
