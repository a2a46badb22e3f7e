#!/usr/bin/env python
"""Where an idle start's milliseconds go: the worker's stages, timed inside a real worker.

    .venv/bin/python benchmarks/latency_stages.py [--samples 150] [--concurrency 32] [--rounds 2]

Per round and variant (hand-off on and off, ``PGFLOW["HAND_OFF"]``, alternating): one idle
worker process whose claim loop is wrapped to record the wall clock at each stage; SAMPLES
sequential starts of a 1-step workflow whose body records the wall clock on its first line
(benchmarks.workflows.StampStart), a random 50-200 ms apart. Each stage is measured from
before the ``start()`` call (the same clock as benchmarks/run.py's latency):

- ``start() returns``: the call's own time (its durable commit included);
- ``worker woken``: the loop's ``select`` returned (the notification arrived);
- ``notification read``: read from the socket and parsed (a handed attempt's claim with it);
- ``claim by id``: the claim statement's start and end (hand-off off only: a handed attempt
  needs none);
- ``body submitted``: the attempt handed to a step thread;
- ``step thread begins``: that thread's runner has it;
- ``body prepared``: the runner's prepare (no query for a plain step) is done;
- ``body's first line``: the latency benchmarks/run.py reports.

Medians (and the body's p99) per variant, for benchmarks/RESULTS.md. On the benchmark
database of the durable cluster the caller names (``DATABASE_URL``), e.g. the one
benchmarks/run.py starts: ``PGFLOW_PG_DURABLE=1 .venv/bin/python -m example_project.pgcluster
start benchmarks/.work/pg-durable``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STAGES = (
    "start() returns",
    "worker woken",
    "notification read",
    "claim by id begins",
    "claim by id ends",
    "body submitted",
    "step thread begins",
    "body prepared",
)
BODY = "body's first line"
TRACE_ENV = "BENCH_STAGES_TRACE"


def traced_worker(concurrency: int) -> None:
    """Run a worker in this process, its claim loop's stages recorded to TRACE_ENV's file at exit."""
    import django

    django.setup()
    from django.core.management import call_command

    from pgflow import store
    from pgflow.runtime import runner, slots, wake, worker

    marks: list[tuple[str, float]] = []

    def wrap(owner: object, name: str, before: str | None, after: str | None) -> None:
        original = getattr(owner, name)

        def timed(*args: object, **kwargs: object) -> object:
            if before:
                marks.append((before, time.time()))
            result = original(*args, **kwargs)
            if after:
                marks.append((after, time.time()))
            return result

        setattr(owner, name, timed)

    wrap(wake.Wake, "wait", None, "worker woken")
    wrap(worker.Worker, "_read_notes", None, "notification read")
    wrap(store, "claim_notified", "claim by id begins", "claim by id ends")
    wrap(slots.Slots, "submit", "body submitted", None)
    wrap(runner.Runner, "execute", "step thread begins", None)
    wrap(runner.store, "quick_prepare", None, "body prepared")

    def dump(*_: object) -> None:
        Path(os.environ[TRACE_ENV]).write_text(json.dumps(marks))
        os._exit(0)

    signal.signal(signal.SIGUSR1, dump)
    call_command("pgflow_worker", "-v", "0", "--concurrency", str(concurrency))


def measure(samples: int, concurrency: int, hand_off: bool) -> dict[str, list[float]]:
    from benchmarks import engine
    from benchmarks.workflows import StampStart

    engine.reset()
    trace = Path(tempfile.mkstemp(suffix=".json")[1])
    _, env = engine.worker_command(concurrency)
    env = {**os.environ, **env, TRACE_ENV: str(trace), "PGFLOW_HAND_OFF": "true" if hand_off else "false"}
    proc = subprocess.Popen([sys.executable, __file__, "--worker", str(concurrency)], cwd=ROOT, env=env)
    try:
        time.sleep(4)  # up and idle
        calls = []
        for _ in range(samples):
            before = time.time()
            run = StampStart.start()
            returned = time.time()
            deadline = time.monotonic() + 10
            while (output := run.steps.values_list("output", flat=True).first()) is None:
                if time.monotonic() > deadline:
                    raise SystemExit(f"run {run.pk} did not start within 10 s")
                time.sleep(0.001)
            calls.append((before, returned, output["t"]))
            time.sleep(random.uniform(0.05, 0.2))  # noqa: S311 - spacing, not secrets
    finally:
        proc.send_signal(signal.SIGUSR1)
        proc.wait(30)
    marks = json.loads(trace.read_text())
    trace.unlink()
    found: dict[str, list[float]] = {stage: [] for stage in (*STAGES, BODY)}
    for before, returned, body in calls:
        found["start() returns"].append((returned - before) * 1000)
        found[BODY].append((body - before) * 1000)
        seen: dict[str, float] = {}
        for name, at in marks:
            if before <= at <= body:
                seen.setdefault(name, at)
        for stage in STAGES[1:]:
            if stage in seen:
                found[stage].append((seen[stage] - before) * 1000)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    if args.worker:
        traced_worker(args.worker)
        return
    from benchmarks import engine

    engine.setup_django()
    rows: dict[str, dict[str, list[float]]] = {"hand-off on": {}, "hand-off off": {}}
    for index in range(args.rounds):
        order = [True, False] if index % 2 == 0 else [False, True]
        for hand_off in order:
            found = measure(args.samples, args.concurrency, hand_off)
            label = "hand-off on" if hand_off else "hand-off off"
            for stage, values in found.items():
                rows[label].setdefault(stage, []).extend(values)
    print(f"\n| stage, ms from before start() (median) | {' | '.join(rows)} |")
    print(f"| --- | {' | '.join('---:' for _ in rows)} |")
    for stage in (*STAGES, BODY):
        cells = [f"{statistics.median(row[stage]):.2f}" if row.get(stage) else "—" for row in rows.values()]
        print(f"| {stage} | {' | '.join(cells)} |")
    # Where the tail comes from: each stage's p99, and the p99 of the time from the stage
    # before it (the tail of the body's first line is the sum of neither).
    print(f"\n| stage, p99 ms from before start() / from the stage before | {' | '.join(rows)} |")
    print(f"| --- | {' | '.join('---:' for _ in rows)} |")
    for index, stage in enumerate((*STAGES, BODY)):
        cells = []
        for row in rows.values():
            if not row.get(stage):
                cells.append("—")
                continue
            cell = f"{engine.percentile(row[stage], 0.99):.2f}"
            before = next((row[s] for s in reversed((*STAGES, BODY)[1:index]) if row.get(s)), None)
            if before is not None and len(before) == len(row[stage]):
                cell += f" / {engine.percentile([b - a for a, b in zip(before, row[stage], strict=True)], 0.99):.2f}"
            cells.append(cell)
        print(f"| {stage} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
