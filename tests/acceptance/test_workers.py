"""Real worker subprocesses: many runs on two workers, a kill -9 mid-step, a clean SIGTERM."""

from __future__ import annotations

from collections import Counter

from django.db.models import Count

from pgflow.models import Step, WorkflowRun
from tests import workflows as wf
from tests.acceptance.conftest import wait_until
from tests.connections import other_connection
from tests.invariants import assert_exactly_once


def finished(count: int) -> bool:
    return WorkflowRun.objects.filter(status="finished").count() >= count


def test_two_workers_finish_500_runs_running_each_attempt_once(start_worker, marks):
    runs = [wf.ThreeSteps.start() for _ in range(500)]
    one = start_worker("--concurrency", "4")
    two = start_worker("--concurrency", "4")
    wait_until(lambda: finished(500), timeout=240, what="500 runs to finish")
    assert one.terminate() == 0
    assert two.terminate() == 0
    assert WorkflowRun.objects.exclude(status="finished").count() == 0
    # every run has exactly its three steps, each completed in its first attempt
    per_run = Step.objects.values("run").annotate(n=Count("id"))
    assert {row["n"] for row in per_run} == {3}
    assert set(Step.objects.values_list("status", "attempt").distinct()) == {("completed", 1)}
    bodies = Counter(marks.read_text().split())
    assert len(bodies) == 1500
    assert max(bodies.values()) == 1, "a body ran twice"
    assert {r.pk for r in runs} == set(WorkflowRun.objects.values_list("pk", flat=True))
    assert assert_exactly_once() == 500
    logs = one.output() + two.output()
    assert "outcome=completed" in logs


def test_kill_9_mid_step_reruns_it_after_the_lease(start_worker, marks):
    run = wf.Sleeper.start(input={"sleep": 2})
    victim = start_worker("--concurrency", "1", lease=1.0)
    wait_until(lambda: f"{run.pk}:nap:1" in marks.read_text(), timeout=30, what="the body to start")
    victim.kill9()
    rescuer = start_worker("--concurrency", "1", lease=1.0)
    wait_until(lambda: finished(1), timeout=60, what="the run to finish after the lease ran out")
    rescuer.terminate()
    steps = list(run.steps.values_list("attempt", "status", "outcome", "error_class"))
    assert steps == [(1, "failed", "lost", "pgflow.LeaseExpired"), (2, "completed", "completed", None)]
    assert list(run.events.values_list("event", flat=True)) == ["started", "lease_lost", "step_completed", "finished"]
    assert_exactly_once()


def test_sigterm_lets_the_running_step_finish(start_worker, marks):
    run = wf.Sleeper.start(input={"sleep": 1})
    worker = start_worker("--concurrency", "2")
    wait_until(lambda: f"{run.pk}:nap:1" in marks.read_text(), timeout=30, what="the body to start")
    assert worker.terminate() == 0
    run.refresh_from_db()
    assert run.status == "finished"
    assert "stop claiming, let running steps finish" in worker.output()
    assert_exactly_once()


def test_a_draining_worker_keeps_the_lease_of_the_step_it_lets_finish(start_worker, marks):
    # The body outlasts the lease several times over: only heartbeats during the drain keep
    # the other worker's sweep from taking the attempt over and running the body again.
    run = wf.Sleeper.start(input={"sleep": 10})
    draining = start_worker("--concurrency", "1", lease=1.0)
    wait_until(lambda: f"{run.pk}:nap:1" in marks.read_text(), timeout=30, what="the body to start")
    other = start_worker("--concurrency", "1", lease=1.0)
    wait_until(lambda: "starting: queues=" in other.output(), timeout=60, what="the other worker to start")
    # The drain must outlast the lease: the body still runs when the stop comes.
    assert list(run.steps.values_list("status", flat=True)) == ["in_progress"]
    assert draining.terminate() == 0
    assert other.terminate() == 0
    run.refresh_from_db()
    assert run.status == "finished"
    assert list(run.steps.values_list("attempt", "outcome")) == [(1, "completed")]
    assert marks.read_text().split() == [f"{run.pk}:nap:1"]
    assert_exactly_once()


def test_sigterm_past_the_grace_hands_the_step_back(start_worker, marks):
    run = wf.Sleeper.start(input={"sleep": 30})
    worker = start_worker("--concurrency", "1", env={"PGFLOW_SHUTDOWN_GRACE_SECONDS": "0.5"})
    wait_until(lambda: f"{run.pk}:nap:1" in marks.read_text(), timeout=30, what="the body to start")
    assert worker.terminate() == 0
    steps = list(run.steps.values_list("attempt", "status", "outcome"))
    assert steps == [(1, "cancelled", "handed_back"), (2, "scheduled", "")]
    assert "1 handed back" in worker.output()
    assert_exactly_once()


def test_a_step_past_its_timeout_fails_while_its_worker_keeps_going(start_worker, marks):
    run = wf.TimesOut.start(input={"sleep": 4})
    worker = start_worker("--concurrency", "2")
    wait_until(lambda: run.steps.filter(status="failed").exists(), timeout=30, what="the timeout to apply")
    step = run.steps.get()
    assert (step.error_class, step.outcome) == ("pgflow.exceptions.StepTimeout", "paused")
    run.refresh_from_db()
    assert run.status == "paused"
    worker.terminate()
    assert "late completion ignored" in worker.output()


def test_a_worker_started_with_debug_on_says_it_slows_it_down(start_worker):
    noisy = start_worker("--burst", env={"DEBUG": "true"})
    quiet = start_worker("--burst", env={"DEBUG": "false"})
    assert noisy.proc.wait(60) == 0 and quiet.proc.wait(60) == 0
    assert "DEBUG is on" in noisy.output()
    assert "DEBUG is on" not in quiet.output()


def test_a_sweep_held_up_does_not_hold_up_claims(start_worker):
    from pgflow import rollup

    with other_connection(autocommit=True) as blocker:
        blocker.execute("SELECT pg_advisory_lock(%s)", [rollup.LOCK_KEY])  # the sweep's rollup waits on this
        runs = [wf.ThreeSteps.start() for _ in range(30)]
        worker = start_worker("--concurrency", "4")

        def sweep_waiting() -> bool:
            row = blocker.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s",
                [rollup.LOCK_KEY & 0xFFFF_FFFF],
            ).fetchone()
            return bool(row and row[0])

        wait_until(sweep_waiting, timeout=30, what="the worker's sweep to wait on the rollup lock")
        wait_until(lambda: finished(30), timeout=60, what="30 runs to finish while the sweep waits")
        assert sweep_waiting(), "the sweep was still held up while the runs finished"
        blocker.execute("SELECT pg_advisory_unlock(%s)", [rollup.LOCK_KEY])
    assert worker.terminate() == 0
    assert {run.pk for run in runs} == set(WorkflowRun.objects.filter(status="finished").values_list("pk", flat=True))
