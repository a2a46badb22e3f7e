"""A worker's slots, seen from the database: a worker mixing sync and async steps holds at
most ``--concurrency`` sync attempts and ``--async-concurrency`` async ones in progress, at
every instant; an awaiting async body's lease is heartbeated past LEASE; and the queries of
the async bodies share one connection."""

from __future__ import annotations

import time
from collections import Counter

from django.db import connection

from pgflow.models import Event, Step, WorkflowRun
from tests import async_workflows as aw
from tests import reliability_workflows as rw
from tests.acceptance.conftest import wait_until
from tests.invariants import assert_exactly_once

ASYNC_CLASS = aw.AsyncSleeper.workflow_path()

# In-progress attempts by kind, as the database holds them (an attempt is in progress from
# its claim until its outcome committed).
SAMPLE = """
SELECT count(*) FILTER (WHERE r.workflow_class <> %s), count(*) FILTER (WHERE r.workflow_class = %s)
FROM pgflow_step AS s JOIN pgflow_run AS r ON r.id = s.run_id WHERE s.status = 'in_progress'
"""


def test_a_worker_mixing_sync_and_async_steps_holds_each_bound_at_every_instant(start_worker):
    for _ in range(40):
        rw.Load.start()  # three sync 50 ms bodies
    for _ in range(60):
        aw.AsyncSleeper.start(input={"sleep": 0.3})
    worker = start_worker("--concurrency", "2", "--async-concurrency", "5")
    samples: list[tuple[int, int]] = []
    deadline = time.monotonic() + 90
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(SAMPLE, [ASYNC_CLASS, ASYNC_CLASS])
            samples.append(cursor.fetchone())
            if WorkflowRun.objects.filter(status="finished").count() == 100:
                break
            time.sleep(0.005)
    assert worker.terminate() == 0
    assert WorkflowRun.objects.filter(status="finished").count() == 100
    over = Counter(sample for sample in samples if sample[0] > 2 or sample[1] > 5)
    assert not over, f"(sync, async) in progress past (2, 5), in {sum(over.values())} of {len(samples)} samples: {over}"
    # Both bounds were reached, so a sample past either would have been seen.
    assert len(samples) >= 200
    assert max(sync for sync, _ in samples) == 2
    assert max(awaiting for _, awaiting in samples) == 5
    assert assert_exactly_once() == 100


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
