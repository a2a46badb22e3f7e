"""The Procrastinate app of the benchmark: async tasks, a chain step defers the next one itself."""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

from benchmarks.peers.common import CHAIN, LATENCY, stamp

app = App(connector=PsycopgConnector(conninfo=os.environ.get("BENCH_DB_URL", "")))


@app.task(name="bench.step")
async def step(n: int) -> None:
    stamp(CHAIN)
    if n < 3:
        await step.defer_async(n=n + 1)


@app.task(name="bench.latency")
async def latency() -> None:
    stamp(LATENCY)
