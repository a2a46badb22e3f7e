"""A busy worker's bodies log through its writer thread: every line arrives, once, whole,
down to the worker's own last line, logged as it stops (pgflow/runtime/logwriter.py)."""

from __future__ import annotations

import re
from collections import Counter

from tests import workflows as wf
from tests.invariants import assert_exactly_once


def test_every_line_the_bodies_log_reaches_the_workers_log(start_worker):
    runs = [wf.LogsALine.start() for _ in range(300)]
    worker = start_worker("--burst", "--concurrency", "32")
    assert worker.proc.wait(120) == 0
    lines = Counter(re.findall(r"INFO pgflow\.tests (run \d+: \w+ logged)\n", worker.output()))
    expected = {f"run {run.pk}: {name} logged" for run in runs for name in ("first", "second")}
    assert set(lines) == expected  # none lost by the stop, none torn by another thread's line
    assert set(lines.values()) == {1}
    # The worker's last line is still in the writer's queue when the worker stops, with no
    # body left to give the writer time: only the stop's drain writes it before the exit.
    stopped = re.findall(r"INFO pgflow worker \S+ (stopped: .*)\n", worker.output())
    assert stopped == ["stopped: 600 steps run, 0 handed back"], worker.output()[-1000:]
    assert assert_exactly_once() == 300
