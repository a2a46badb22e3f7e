"""Workflows the benchmarks run."""

from __future__ import annotations

import time

import pgflow
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
