"""Workflows the benchmarks run."""

from __future__ import annotations

import logging
import time

import pgflow
from benchmarks.peers.pgflow_workflows import StampToFile  # noqa: F401 - loaded at a worker's start with the rest
from pgflow import step


class ThreeNoops(pgflow.Workflow):
    @step
    def one(self):
        return None

    @step
    def two(self):
        return None

    @step
    def three(self):
        return None


class StampStart(pgflow.Workflow):
    """Records when its body started (wall clock), for the idle-latency benchmark."""

    @step
    def stamp(self):
        return {"t": time.time()}


class AsyncSleep(pgflow.Workflow):
    """One async step that awaits ``input["sleep"]`` seconds (benchmarks/async_bodies.py)."""

    @step
    async def nap(self):
        import asyncio

        await asyncio.sleep(self.input.get("sleep", 1.0))


class LimitedNoops(ThreeNoops):
    """ThreeNoops with every step limited to 2 in progress per tenant (the input's "tenant"),
    for the cost of the claim's gates (benchmarks/limits.py)."""

    concurrency = pgflow.Limit(max=2, key="tenant")

    def tenant(self):
        return self.input["tenant"]


_log = logging.getLogger("benchmarks.realistic")


class Realistic(pgflow.Workflow):
    """ThreeNoops as a real workflow is written (benchmarks/realistic.py): the middle step
    reads the first's output, and each step writes one log line."""

    @step
    def a(self):
        _log.info("run %s: a", self.run.pk)
        return {"order": self.input.get("order", 1)}

    @step
    def b(self):
        order = self.outputs["a"]["order"]
        _log.info("run %s: b read order %s", self.run.pk, order)
        return {"charged": order}

    @step
    def c(self):
        _log.info("run %s: c", self.run.pk)


class ReadsOnly(pgflow.Workflow):
    """Realistic without its log lines (benchmarks/realistic.py --workloads): what reading an
    output and returning small dicts cost."""

    @step
    def a(self):
        return {"order": self.input.get("order", 1)}

    @step
    def b(self):
        return {"charged": self.outputs["a"]["order"]}

    @step
    def c(self):
        return None


class LogsOnly(pgflow.Workflow):
    """ThreeNoops with Realistic's log lines, and nothing else."""

    @step
    def a(self):
        _log.info("run %s: a", self.run.pk)

    @step
    def b(self):
        _log.info("run %s: b", self.run.pk)

    @step
    def c(self):
        _log.info("run %s: c", self.run.pk)
