"""A worker's slots, seen by its bodies and from the database: a worker mixing sync and
async steps runs at most ``--concurrency`` sync bodies and ``--async-concurrency`` async ones
at once, starts each body promptly after its claim, and holds at most four times each bound
in progress (a body's attempt awaits its commit after its slot is free); an awaiting async
body's lease is heartbeated past LEASE; and the queries of the async bodies share one
connection."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from pathlib import Path

from django.db import connection

import pgflow
from pgflow import step
from pgflow.models import Event, Step, WorkflowRun
from pgflow.runtime.held import HELD_PER_SLOT
from tests import async_workflows as aw
from tests.acceptance.conftest import wait_until
from tests.invariants import assert_exactly_once


def _record(kind: str, body: pgflow.Workflow, name: str, entered: float) -> None:
    """One line per body in the marks file: its kind, attempt and when it ran (time.time())."""
    with Path(os.environ["PGFLOW_TEST_MARKS"]).open("a") as marks:
        marks.write(f"{kind} {body.run.pk} {name} {body.attempt} {entered} {time.time()}\n")


class TimedSync(pgflow.Workflow):
    """Three sync 200 ms bodies, each recording when it ran."""

    @step
    def one(self):
        entered = time.time()
        time.sleep(0.2)
        _record("sync", self, "one", entered)

    @step
    def two(self):
        entered = time.time()
        time.sleep(0.2)
        _record("sync", self, "two", entered)

    @step
    def three(self):
        entered = time.time()
        time.sleep(0.2)
        _record("sync", self, "three", entered)


class TimedAsync(pgflow.Workflow):
    @step
    async def nap(self):
        entered = time.time()
        await asyncio.sleep(0.3)
        _record("async", self, "nap", entered)


ASYNC_CLASS = TimedAsync.workflow_path()

# In-progress attempts by kind, as the database holds them (an attempt is in progress from
# its claim until its outcome committed).
SAMPLE = """
SELECT count(*) FILTER (WHERE r.workflow_class <> %s), count(*) FILTER (WHERE r.workflow_class = %s)
FROM pgflow_step AS s JOIN pgflow_run AS r ON r.id = s.run_id WHERE s.status = 'in_progress'
"""


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans (enter, exit) overlapping at one instant."""
    edges = sorted([(enter, 1) for enter, _ in spans] + [(leave, -1) for _, leave in spans])
    at_once = most = 0
    for _, change in edges:  # an exit sorts before an enter at the same instant
        at_once += change
        most = max(most, at_once)
    return most


def test_a_worker_mixing_sync_and_async_steps_keeps_each_bound(start_worker, marks):
    for _ in range(15):
        TimedSync.start()
    for _ in range(60):
        TimedAsync.start()
    worker = start_worker("--concurrency", "2", "--async-concurrency", "5")
    samples: list[tuple[int, int]] = []
    deadline = time.monotonic() + 90
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(SAMPLE, [ASYNC_CLASS, ASYNC_CLASS])
            samples.append(cursor.fetchone())
            if WorkflowRun.objects.filter(status="finished").count() == 75:
                break
            time.sleep(0.005)
    assert worker.terminate() == 0
    assert WorkflowRun.objects.filter(status="finished").count() == 75
    # In progress: at most HELD_PER_SLOT times each bound (a body running, those awaiting
    # their commit, per slot).
    bounds = (HELD_PER_SLOT * 2, HELD_PER_SLOT * 5)
    over = Counter(sample for sample in samples if sample[0] > bounds[0] or sample[1] > bounds[1])
    assert not over, f"(sync, async) in progress past {bounds} in {sum(over.values())} of {len(samples)}: {over}"
    assert len(samples) >= 200
    bodies = [line.split() for line in marks.read_text().splitlines()]
    assert len(bodies) == 15 * 3 + 60
    started = {
        (run, name, attempt): at.timestamp()
        for run, name, attempt, at in Step.objects.values_list("run_id", "step_name", "attempt", "started_at")
    }
    # Each body starts promptly after its claim: an attempt claimed for no free slot waits
    # for one (30 sync ones over-claimed wait 3 s for two threads).
    late = sorted(
        (float(entered) - started[(int(run), name, int(attempt))], kind, name)
        for kind, run, name, attempt, entered, _ in bodies
    )[-5:]
    assert late[-1][0] < 1.0, f"bodies started long after their claim (seconds, kind, step): {late}"
    # Bodies running at once, by kind, from their own records: each bound held, and reached
    # (so a body past it would have been seen).
    spans = {
        kind: [(float(entered), float(left)) for k, _, _, _, entered, left in bodies if k == kind]
        for kind in ("sync", "async")
    }
    assert most_at_once(spans["sync"]) == 2
    assert most_at_once(spans["async"]) == 5
    assert assert_exactly_once() == 75


def test_heartbeats_keep_an_awaiting_async_body_past_its_lease(start_worker, marks):
    run = aw.AsyncSleeper.start(input={"sleep": 3.5})
    # A 1 s lease and a sweep every 0.5 s (the worker's own): without its heartbeat, the
    # awaiting body's attempt would be taken for lost and run again.
    worker = start_worker("--concurrency", "1", lease=1.0)
    wait_until(
        lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished", timeout=30, what="the sleeper to finish"
    )
    assert worker.terminate() == 0
    attempts = list(Step.objects.filter(run=run).values_list("attempt", "outcome"))
    assert attempts == [(1, "completed")]
    assert marks.read_text().split() == [f"{run.pk}:nap:1"]  # the body ran once
    assert not Event.objects.filter(run=run, event="lease_lost").exists()
    assert assert_exactly_once() == 1


def test_the_queries_of_async_bodies_share_one_connection(start_worker):
    runs = [aw.AsyncBackend.start(input={"sleep": 0.05}) for _ in range(200)]
    worker = start_worker("--concurrency", "2", "--async-concurrency", "50")
    wait_until(
        lambda: WorkflowRun.objects.filter(status="finished").count() == 200, timeout=60, what="200 runs to finish"
    )
    assert worker.terminate() == 0
    outputs = [Step.objects.get(run=run, step_name="query").output for run in runs]
    assert all(output["seen"] for output in outputs)
    pids = Counter(pid for output in outputs for pid in (output["pid"], output["pid_after"]))
    # 400 queries from 200 bodies, up to 50 awaiting at once: all on asgiref's one thread's
    # connection (one server process), not one connection each.
    assert sum(pids.values()) == 400
    assert len(pids) == 1, pids
    assert assert_exactly_once() == 200
