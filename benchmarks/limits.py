#!/usr/bin/env python
"""What flow control costs throughput: RUNS 3-step no-op runs drained by real workers,
unlimited, then with every step under ``Limit(max=2, key=tenant)`` with the tenants spread
over 10 and over 1,000 values, interleaved over ROUNDS rounds on one cluster.

    .venv/bin/python benchmarks/limits.py [--runs 2000] [--rounds 3] [--workers 1]

With 10 tenants the limit allows 20 attempts in progress, more than one worker's 8
threads: the figures are the cost of the gates (the claim's gated groups, the gate rows'
locks and updates, the finish of a limited step), not of waiting on a full key. Steps/s
as benchmarks/engine.py: finished steps / (last finish - first claim), read from the rows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import engine  # noqa: E402 - after the path is set

SHAPES = {"unlimited": None, "limit, 10 keys": 10, "limit, 1,000 keys": 1000}


def enqueue(runs: int, keys: int | None) -> None:
    from django.db import transaction

    from benchmarks.workflows import LimitedNoops, ThreeNoops

    with transaction.atomic():
        for number in range(runs):
            if keys is None:
                ThreeNoops.start()
            else:
                LimitedNoops.start(input={"tenant": f"t{number % keys}"})


def throughput(runs: int, keys: int | None, workers: int, concurrency: int) -> float:
    from django.db import connection

    engine.reset()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE pgflow_gate")
    enqueue(runs, keys)
    engine.analyze()
    procs = [engine.worker(concurrency, "--burst") for _ in range(workers)]
    for proc in procs:
        proc.wait()
    finished = engine.finished_runs()
    if finished != runs:
        raise SystemExit(f"only {finished} of {runs} runs finished ({keys} keys)")
    steps, seconds = engine.step_window()
    return steps / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    engine.setup_django()
    figures: dict[str, list[float]] = {name: [] for name in SHAPES}
    for round_number in range(args.rounds):
        names = list(SHAPES)
        names = names[round_number % len(names) :] + names[: round_number % len(names)]  # rotated
        for name in names:
            rate = throughput(args.runs, SHAPES[name], args.workers, args.concurrency)
            figures[name].append(rate)
            print(f"round {round_number + 1}: {name}: {rate:,.0f} steps/s", flush=True)
    base = statistics.median(figures["unlimited"])
    print(
        f"\n| {args.runs} runs x 3 no-op steps, {args.workers} worker(s) x {args.concurrency} | median steps/s | "
        "vs unlimited | every round |"
    )
    print("| --- | --- | --- | --- |")
    for name, rates in figures.items():
        median = statistics.median(rates)
        every = ", ".join(f"{rate:,.0f}" for rate in rates)
        print(f"| {name} | {median:,.0f} | {median / base:.2f}x | {every} |")


if __name__ == "__main__":
    main()
