"""django-q2 task functions of the benchmark (a chain's sequencing is django-q2's own)."""

from __future__ import annotations

from benchmarks.peers.common import CHAIN, LATENCY, stamp


def step(n: int) -> None:
    stamp(CHAIN)


def latency() -> None:
    stamp(LATENCY)
