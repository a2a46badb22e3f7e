"""Break things for real: kill -9 workers under load, many workers at once, a poison step.

Each test prints its figures (runs, kills, bodies run twice) for docs/reliability.md.
"""

from __future__ import annotations

import random
import time
from collections import Counter

from django.db.models import Count

from pgflow.models import Step, WorkflowRun
from tests import reliability_workflows as rw
from tests.acceptance.conftest import wait_until
from tests.invariants import assert_exactly_once


def start_many(workflow, count):
    from django.db import transaction

    with transaction.atomic():
        return [workflow.start() for _ in range(count)]


def all_finished(expected):
    """Whether every run finished; a paused run fails the test at once, saying why."""
    paused = WorkflowRun.objects.filter(status="paused").values_list("pk", "paused_reason").first()
    assert paused is None, f"run {paused[0]} paused: {paused[1]}"
    return WorkflowRun.objects.filter(status="finished").count() == expected


def assert_every_run_finished_once(expected):
    """Every run finished, each of its three steps completed once, every transition once."""
    assert WorkflowRun.objects.count() == expected
    assert WorkflowRun.objects.exclude(status="finished").count() == 0
    completed = Step.objects.filter(status="completed").values("run", "step_name").annotate(n=Count("id"))
    assert {row["n"] for row in completed} == {1}
    assert len(completed) == expected * 3
    assert assert_exactly_once() == expected


def test_kill_9_a_random_worker_20_times_under_load(start_worker, marks, capsys):
    runs = 1000
    start_many(rw.Load, runs)
    # Random kills can hit one step's re-runs three times in a row (about one test in five:
    # 6% of lost attempts were lost again), and MAX_LOST_ATTEMPTS then rightly pauses the run as
    # a poison step: that is the poison test's subject; this one's is that recovery loses nothing.
    env = {"PGFLOW_MAX_LOST_ATTEMPTS": "1000"}
    workers = [start_worker("--concurrency", "4", lease=1.5, env=env) for _ in range(2)]
    rng = random.Random(7)
    kills = 0
    while kills < 20:
        time.sleep(rng.uniform(1.0, 2.5))
        victim = rng.randrange(len(workers))
        workers[victim].kill9()
        kills += 1
        workers[victim] = start_worker("--concurrency", "4", lease=1.5, env=env)
    wait_until(lambda: all_finished(runs), timeout=240, what=f"{runs} runs to finish")
    for worker in workers:
        assert worker.terminate() == 0
    assert_every_run_finished_once(runs)
    bodies = Counter(line.rsplit(":", 1)[0] for line in marks.read_text().split())
    twice = sum(1 for n in bodies.values() if n > 1)
    lost = Step.objects.filter(outcome="lost").count()
    with capsys.disabled():
        print(
            f"\n[reliability] crash: {runs} runs x 3 steps, 2 workers, {kills} kill -9: "
            f"0 lost runs, {lost} attempts re-run after a lost lease, {twice} bodies ran twice"
        )
    assert len(bodies) == runs * 3
    # The kills must have hit work in progress, or this test proved nothing about crashes.
    assert lost > 0, "no kill hit an attempt in progress"
    assert twice > 0, "no body ran again after its worker was killed"


def test_four_workers_on_5000_runs_never_claim_an_attempt_twice(start_worker, marks, capsys):
    from tests import workflows as wf

    runs = 5000
    start_many(wf.ThreeSteps, runs)
    # A long lease: this test is about claims, and on a loaded machine a short lease would
    # (rightly) re-run a starved worker's attempts, which is the crash test's subject.
    workers = [start_worker("--concurrency", "4", lease=30) for _ in range(4)]
    wait_until(
        lambda: WorkflowRun.objects.filter(status="finished").count() == runs,
        timeout=600,
        what=f"{runs} runs to finish",
    )
    assert not Step.objects.filter(outcome="lost").exists()
    for worker in workers:
        assert worker.terminate() == 0
    assert_every_run_finished_once(runs)
    attempts = Counter(marks.read_text().split())
    assert len(attempts) == runs * 3
    assert max(attempts.values()) == 1, "an attempt ran twice"
    assert set(Step.objects.values_list("attempt", flat=True).distinct()) == {1}
    workers_used = {name for name in Step.objects.values_list("worker", flat=True).distinct()}
    with capsys.disabled():
        print(
            f"\n[reliability] concurrency: {runs} runs x 3 steps on 4 workers ({len(workers_used)} took steps): "
            f"0 attempts claimed twice, 0 transitions applied twice"
        )
    assert len(workers_used) == 4, f"only {len(workers_used)} of 4 workers claimed work"


def test_a_poison_step_pauses_its_run_and_others_keep_flowing(start_worker, marks):
    from tests import workflows as wf

    poison = rw.Poison.start()
    healthy = start_many(wf.ThreeSteps, 30)
    env = {"PGFLOW_MAX_LOST_ATTEMPTS": "2"}
    worker = start_worker("--concurrency", "1", lease=1.0, env=env)
    deadline = time.monotonic() + 120
    restarts = 0
    while time.monotonic() < deadline:
        poison.refresh_from_db()
        done = WorkflowRun.objects.filter(pk__in=[r.pk for r in healthy], status="finished").count()
        if poison.status == "paused" and done == len(healthy):
            break
        if worker.proc.poll() is not None:  # the poison killed it: a supervisor restarts it
            restarts += 1
            worker = start_worker("--concurrency", "1", lease=1.0, env=env)
        time.sleep(0.2)
    worker.terminate()
    poison.refresh_from_db()
    assert poison.status == "paused"
    assert poison.paused_reason.startswith("step crash lost its worker 2 times in a row (MAX_LOST_ATTEMPTS=2)")
    assert list(poison.steps.values_list("outcome", flat=True)) == ["lost", "lost"]
    assert WorkflowRun.objects.filter(pk__in=[r.pk for r in healthy], status="finished").count() == len(healthy)
    assert restarts >= 1
    assert_exactly_once()
