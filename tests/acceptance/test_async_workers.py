"""Async bodies in real worker processes: beside sync ones, verbs, a timeout that cancels the
task, SIGTERM drain and hand-back, and the connections 500 awaiting bodies hold."""

from __future__ import annotations

import time
from collections import Counter

from django.db import connection

from pgflow.models import Step, WorkflowRun
from tests import async_workflows as aw
from tests import workflows as wf
from tests.acceptance.conftest import wait_until
from tests.invariants import assert_exactly_once


def finished(count: int) -> bool:
    return WorkflowRun.objects.filter(status="finished").count() >= count


def worker_connections() -> int:
    """Connections to the test database other than this test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def test_async_and_sync_bodies_share_a_worker_and_run_each_attempt_once(start_worker, marks):
    runs = [aw.AsyncThreeSteps.start(input={"sleep": 0.05}) for _ in range(100)]
    worker = start_worker("--concurrency", "2", "--async-concurrency", "20")
    wait_until(lambda: finished(100), timeout=120, what="100 async runs to finish")
    assert worker.terminate() == 0
    bodies = Counter(marks.read_text().split())
    assert len(bodies) == 300 and max(bodies.values()) == 1
    three = Step.objects.get(run=runs[0], step_name="three")
    assert three.output == {"n": 3, "steps_seen": 3}
    assert assert_exactly_once() == 100


def test_verbs_from_async_bodies_in_a_worker(start_worker):
    runs = {verb: aw.AsyncVerbs.start(input={"verb": verb}) for verb in ("skip", "pause", "cancel", "reattempt")}
    worker = start_worker("--concurrency", "1")
    wait_until(lambda: not WorkflowRun.objects.filter(status="running").exists(), timeout=60, what="the runs to settle")
    worker.terminate()
    status = {verb: WorkflowRun.objects.get(pk=run.pk).status for verb, run in runs.items()}
    assert status == {"skip": "finished", "pause": "paused", "cancel": "cancelled", "reattempt": "finished"}
    assert runs["reattempt"].steps.filter(step_name="decide").count() == 3
    assert_exactly_once()


def test_an_async_step_past_its_timeout_is_cancelled(start_worker, marks):
    run = aw.AsyncTimesOut.start(input={"sleep": 3})
    worker = start_worker("--concurrency", "1")
    wait_until(lambda: run.steps.filter(status="failed").exists(), timeout=30, what="the timeout to apply")
    step = run.steps.get()
    assert (step.error_class, step.outcome) == ("pgflow.exceptions.StepTimeout", "paused")
    time.sleep(3.5)  # past the body's sleep: a task that was not cancelled would mark "woke"
    worker.terminate()
    assert f"{run.pk}:slow:started" in marks.read_text()
    assert f"{run.pk}:slow:woke" not in marks.read_text()
    assert "late completion ignored" in worker.output()
    assert_exactly_once()


def test_sigterm_lets_awaiting_async_bodies_finish(start_worker, marks):
    runs = [aw.AsyncSleeper.start(input={"sleep": 1}) for _ in range(20)]
    worker = start_worker("--concurrency", "1")
    wait_until(lambda: marks.read_text().count(":nap:1") == 20, timeout=30, what="the bodies to start")
    assert worker.terminate() == 0
    assert all(WorkflowRun.objects.get(pk=r.pk).status == "finished" for r in runs)
    assert_exactly_once()


def test_sigterm_past_the_grace_hands_async_steps_back(start_worker, marks):
    run = aw.AsyncSleeper.start(input={"sleep": 30})
    worker = start_worker("--concurrency", "1", env={"PGFLOW_SHUTDOWN_GRACE_SECONDS": "0.5"})
    wait_until(lambda: f"{run.pk}:nap:1" in marks.read_text(), timeout=30, what="the body to start")
    assert worker.terminate() == 0
    steps = list(run.steps.values_list("attempt", "status", "outcome"))
    assert steps == [(1, "cancelled", "handed_back"), (2, "scheduled", "")]
    assert_exactly_once()


def test_500_awaiting_bodies_hold_at_most_concurrency_plus_5_connections(start_worker, marks):
    runs = [aw.AsyncSleeper.start(input={"sleep": 4}) for _ in range(500)]
    before = worker_connections()
    worker = start_worker("--concurrency", "4", "--async-concurrency", "500")
    wait_until(lambda: marks.read_text().count(":nap:1") == 500, timeout=60, what="500 bodies to start")
    awaiting = Step.objects.filter(status="in_progress").count()
    held = worker_connections() - before
    assert awaiting > 400, awaiting  # they are awaiting together, not one after another
    assert held <= 4 + 5, held
    wait_until(lambda: finished(500), timeout=60, what="the 500 runs to finish")
    worker.terminate()
    assert {r.pk for r in runs} == set(WorkflowRun.objects.filter(status="finished").values_list("pk", flat=True))
    assert assert_exactly_once() == 500


def test_one_thread_beside_async_slots_still_claims_a_reattempt_while_idle(start_worker):
    # Idle, a worker offers its free thread to starts (HAND_OFF), and known async steps leave
    # it async slots beside. A reattempt is no start: the claim takes the offer back for it,
    # rather than claim for the async slots alone and leave it waiting.
    aw.AsyncThreeSteps.start(input={"sleep": 0})  # its claim makes the async steps known
    worker = start_worker("--concurrency", "1")
    wait_until(lambda: finished(1), timeout=60, what="the async run to finish")
    run = wf.RetryingLater.start()  # each reattempt is due 0.3 s on, with the worker idle
    wait_until(
        lambda: WorkflowRun.objects.get(pk=run.pk).status == "cancelled", timeout=30, what="three attempts and a cancel"
    )
    assert sorted(Step.objects.filter(run=run).values_list("attempt", flat=True)) == [1, 2, 3]
    assert worker.terminate() == 0
    assert_exactly_once()
