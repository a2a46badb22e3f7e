"""The DBOS worker of the benchmark: a workflow of three steps, and a 1-step one, on one queue.

    python -m benchmarks.peers.dbos_app     (BENCH_DB_URL names the system database)

It launches DBOS, registers the queue and serves it until SIGTERM.
"""

from __future__ import annotations

import os
import signal
import threading

from dbos import DBOS, DBOSConfig

from benchmarks.peers.common import CHAIN, LATENCY, stamp

QUEUE = "bench"
# DBOS's defaults (no limit, a poll every second) gave ~235 steps/s here, dequeuing all 2,000
# workflows into as many threads at once, and ~0.5 s of idle latency; 32 per worker polled
# every 0.1 s was the best of the few settings tried (8 and 16 were slower).
WORKER_CONCURRENCY = int(os.environ.get("BENCH_DBOS_CONCURRENCY", "32")) or None
POLLING_INTERVAL = float(os.environ.get("BENCH_DBOS_POLLING", "0.1"))


@DBOS.step(name="bench.noop")
def noop() -> None:
    stamp(CHAIN)


@DBOS.workflow(name="three_steps")
def three_steps() -> None:
    noop()
    noop()
    noop()


@DBOS.step(name="bench.latency")
def latency_step() -> None:
    stamp(LATENCY)


@DBOS.workflow(name="one_step")
def one_step() -> None:
    latency_step()


def config() -> DBOSConfig:
    return {
        "name": "bench",
        "system_database_url": os.environ["BENCH_DB_URL"],
        "log_level": "WARNING",
        "application_version": "bench",
    }


def serve() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    DBOS(config=config())
    DBOS.launch()
    DBOS.register_queue(
        QUEUE, worker_concurrency=WORKER_CONCURRENCY, polling_interval_sec=POLLING_INTERVAL, on_conflict="always_update"
    )
    stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    serve()
