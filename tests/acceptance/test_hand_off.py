"""Idle workers' offers in real worker processes (pgflow.store.offers): a start hands its first
attempt to an idle worker, which runs it once from the notification; a killed worker's offer
is passed over, and so is a start too large to hand over; a stopping worker withdraws its own;
starts from many threads while workers go idle and busy run every attempt once."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

from django.db import connection, connections

from pgflow.models import Offer, Step, WorkflowRun
from tests import workflows as wf
from tests.acceptance.conftest import wait_until
from tests.invariants import assert_exactly_once


def offered(name: str) -> bool:
    return Offer.objects.filter(worker=name).exists()


def handed(step: Step) -> bool:
    """Claimed by the start itself: in progress from the moment it was made."""
    return step.started_at is not None and step.started_at == step.created_at


def test_an_idle_worker_runs_the_attempt_a_start_hands_it_once(start_worker, marks):
    worker = start_worker("--concurrency", "2", "--name", "idle-1")
    wait_until(lambda: offered("idle-1"), timeout=60, what="the idle worker's offer")
    run = wf.ThreeSteps.start()
    step = Step.objects.get(run=run, step_name="one")
    assert (step.status, step.worker) == ("in_progress", "idle-1") and handed(step)
    wait_until(lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished", timeout=30, what="the run")
    wait_until(lambda: offered("idle-1"), timeout=30, what="its next offer, idle again")
    assert worker.terminate() == 0
    assert not offered("idle-1")  # withdrawn as it stopped
    assert Counter(marks.read_text().split()) == {f"{run.pk}:one:1": 1, f"{run.pk}:two:1": 1, f"{run.pk}:three:1": 1}
    assert WorkflowRun.objects.get(pk=run.pk).steps.get(step_name="three").output == {"n": 3}
    assert assert_exactly_once() == 1


def test_a_killed_workers_offer_is_passed_over(start_worker, marks):
    gone = start_worker("--concurrency", "1", "--name", "gone")
    wait_until(lambda: offered("gone"), timeout=60, what="the worker's offer")
    pid = Offer.objects.get(worker="gone").backend_pid
    gone.kill9()
    wait_until(lambda: not _backend_alive(pid), timeout=30, what="its session to end")
    run = wf.ThreeSteps.start()
    step = Step.objects.get(run=run)
    assert (step.status, step.worker) == ("scheduled", "")  # not handed to a worker that is gone
    other = start_worker("--concurrency", "1", "--name", "other")
    wait_until(lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished", timeout=60, what="the run")
    assert other.terminate() == 0
    assert Step.objects.get(run=run, step_name="one").worker == "other"
    assert assert_exactly_once() == 1


def _backend_alive(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone() is not None


def test_an_input_too_large_to_hand_over_is_claimed_as_before(start_worker, marks):
    worker = start_worker("--concurrency", "1", "--name", "big")
    wait_until(lambda: offered("big"), timeout=60, what="the worker's offer")
    run = wf.SlowSteps.start(input={"sleep": 0.01, "text": "x" * 20_000})
    assert not handed(Step.objects.get(run=run, step_name="one"))
    wait_until(lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished", timeout=30, what="the run")
    assert worker.terminate() == 0
    assert sorted(marks.read_text().split()) == [f"{run.pk}:one:1", f"{run.pk}:three:1", f"{run.pk}:two:1"]
    assert assert_exactly_once() == 1


def test_starts_from_many_threads_while_workers_go_idle_run_every_attempt_once(start_worker, marks):
    workers = [start_worker("--concurrency", "2", "--name", f"load-{index}") for index in range(2)]
    wait_until(lambda: Offer.objects.count() == 2, timeout=60, what="both workers' offers")
    started: list[int] = []
    lock = threading.Lock()

    def starter(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(60):
                run = wf.ThreeSteps.start()
                with lock:
                    started.append(run.pk)
                time.sleep(rng.choice((0, 0, 0.002, 0.02, 0.1)))  # bursts, and gaps the workers idle in
        finally:
            connections.close_all()

    threads = [threading.Thread(target=starter, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wait_until(lambda: WorkflowRun.objects.filter(status="finished").count() == 240, timeout=120, what="the 240 runs")
    for worker in workers:
        assert worker.terminate() == 0
    bodies = Counter(marks.read_text().split())
    assert len(bodies) == 720 and max(bodies.values()) == 1, bodies.most_common(3)
    firsts = list(Step.objects.filter(step_name="one"))
    by_hand = sum(handed(step) for step in firsts)
    assert 0 < by_hand < 240, by_hand  # some handed to idle workers, the rest claimed
    assert not Offer.objects.exists()
    assert assert_exactly_once() == 240
