"""The 1-step workflow of the side-by-side idle-latency measurement: it stamps like the peers' jobs."""

from __future__ import annotations

import pgflow
from benchmarks.peers.common import LATENCY, stamp
from pgflow import step


class StampToFile(pgflow.Workflow):
    @step
    def stamp(self) -> None:
        stamp(LATENCY)
