"""The sweep on a real PostgreSQL: lost leases, the lost-attempt limit, retention, and the
advisory lock that lets one worker sweep at a time."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgflow import store
from pgflow.models import Event, Step, WorkflowRun
from pgflow.runtime import sweep
from pgflow.testing import run_workflow
from tests import workflows as wf
from tests.connections import other_connection

pytestmark = pytest.mark.django_db


def lose_worker(run, at=None):
    """Claim the run's attempt and let its lease run out, as a killed worker would."""
    held = store.claim(worker="doomed", queues=["workflows"], limit=1, at=at)[0]
    assert held.run_id == run.pk
    return Step.objects.get(pk=held.step_id).lease_expires_at


def test_an_expired_lease_gets_a_fresh_attempt():
    run = wf.ThreeSteps.start()
    expires = lose_worker(run)
    assert sweep.run(at=expires - timedelta(seconds=1))["lost_leases"] == 0
    assert sweep.run(at=expires + timedelta(seconds=1))["lost_leases"] == 1
    lost, fresh = run.steps
    assert (lost.status, lost.outcome, lost.error_class) == ("failed", "lost", "pgflow.LeaseExpired")
    assert "worker doomed stopped heartbeating" in lost.error_message
    assert (fresh.step_name, fresh.attempt, fresh.status) == ("one", 2, "scheduled")
    assert run_workflow(run).status == "finished"


def test_a_step_that_loses_its_worker_max_lost_attempts_times_pauses_the_run(settings):
    settings.PGFLOW = {**settings.PGFLOW, "MAX_LOST_ATTEMPTS": 2}
    run = wf.ThreeSteps.start()
    at = store.now()
    for _ in range(2):
        expires = lose_worker(run, at)
        at = expires + timedelta(seconds=1)
        sweep.run(at=at)
    run.refresh_from_db()
    assert run.status == "paused"
    assert run.paused_reason.startswith("step one lost its worker 2 times in a row (MAX_LOST_ATTEMPTS=2)")
    assert list(run.steps.values_list("attempt", "outcome")) == [(1, "lost"), (2, "lost")]
    assert [e.event for e in run.events] == ["started", "lease_lost", "lease_lost", "paused"]


def test_a_heartbeat_keeps_the_lease():
    run = wf.ThreeSteps.start()
    held = store.claim(worker="alive", queues=["workflows"], limit=1)[0]
    later = store.now() + timedelta(seconds=50)
    assert store.heartbeat([held.token], at=later) == 1
    assert sweep.run(at=later + timedelta(seconds=30))["lost_leases"] == 0
    assert run.steps.get().status == "in_progress"


def test_retention_purges_old_finished_and_cancelled_runs_only(settings):
    settings.PGFLOW = {**settings.PGFLOW, "RETENTION": timedelta(days=1)}
    old_finished = run_workflow(wf.ThreeSteps.start())
    old_cancelled = wf.Delayed.start()
    old_cancelled.cancel()
    recent = run_workflow(wf.ThreeSteps.start())
    still_open = wf.Delayed.start()
    WorkflowRun.objects.filter(pk__in=[old_finished.pk, old_cancelled.pk, still_open.pk]).update(
        finished_at=store.now() - timedelta(days=2)
    )
    WorkflowRun.objects.filter(pk=still_open.pk).update(finished_at=None)
    assert sweep.run()["purged_runs"] == 2
    assert set(WorkflowRun.objects.values_list("pk", flat=True)) == {recent.pk, still_open.pk}
    assert not Step.objects.filter(run_id__in=[old_finished.pk, old_cancelled.pk]).exists()
    assert not Event.objects.filter(run_id__in=[old_finished.pk, old_cancelled.pk]).exists()


def test_retention_none_keeps_everything(settings):
    settings.PGFLOW = {**settings.PGFLOW, "RETENTION": None}
    run = run_workflow(wf.ThreeSteps.start())
    WorkflowRun.objects.filter(pk=run.pk).update(finished_at=store.now() - timedelta(days=400))
    assert sweep.run()["purged_runs"] == 0


@pytest.mark.django_db(transaction=True)
def test_one_worker_does_the_housekeeping_at_a_time_but_every_worker_recovers_attempts():
    repairs = {"lost_leases", "wait_timeouts", "stale_waits"}
    housekeeping = {"fan_out_repairs", "rolled_hours", "filed_runs", "purged_runs", "forgotten_workers", "alerts"}
    with other_connection(autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [sweep.LOCK_KEY])
        assert set(sweep.run()) == repairs
        other.execute("SELECT pg_advisory_unlock(%s)", [sweep.LOCK_KEY])
    assert set(sweep.run()) == repairs | housekeeping


@pytest.mark.django_db(transaction=True)
def test_claim_skips_rows_another_transaction_holds():
    runs = [wf.ThreeSteps.start() for _ in range(3)]
    with other_connection() as other:
        other.execute("SELECT id FROM pgflow_step WHERE run_id = %s FOR UPDATE", [runs[0].pk])
        claimed = store.claim(worker="t", queues=["workflows"], limit=10)
        assert sorted(c.run_id for c in claimed) == [runs[1].pk, runs[2].pk]
        other.rollback()
    assert [c.run_id for c in store.claim(worker="t", queues=["workflows"], limit=10)] == [runs[0].pk]


def test_claim_takes_higher_priority_first_and_only_its_queues():
    low = wf.ThreeSteps.start()
    Step.objects.filter(run=low).update(priority=0)
    high = wf.ThreeSteps.start()
    Step.objects.filter(run=high).update(priority=5)
    other_queue = wf.ThreeSteps.start()
    Step.objects.filter(run=other_queue).update(queue="mail")
    assert [c.run_id for c in store.claim(worker="t", queues=["workflows"], limit=1)] == [high.pk]
    assert [c.run_id for c in store.claim(worker="t", queues=["workflows"], limit=5)] == [low.pk]
    assert [c.run_id for c in store.claim(worker="t", queues=["mail", "x"], limit=5)] == [other_queue.pk]


def test_claim_over_several_queues_takes_the_highest_priority_then_the_longest_due_across_them():
    def started(queue, priority, due_seconds_ago):
        run = wf.ThreeSteps.start()
        Step.objects.filter(run=run).update(
            queue=queue, priority=priority, scheduled_at=store.now() - timedelta(seconds=due_seconds_ago)
        )
        return run.pk

    order = [started("a", 5, 1), started("b", 3, 1), started("b", 1, 60), started("a", 1, 30), started("a", 0, 90)]
    later = wf.ThreeSteps.start()
    Step.objects.filter(run=later).update(queue="b", priority=9, scheduled_at=store.now() + timedelta(hours=1))
    assert {c.run_id for c in store.claim(worker="t", queues=["a", "b"], limit=2)} == set(order[:2])
    taken = [store.claim(worker="t", queues=["b", "a"], limit=1) for _ in range(4)]
    assert [[c.run_id for c in claims] for claims in taken] == [[order[2]], [order[3]], [order[4]], []]


def test_a_failing_housekeeping_stage_does_not_stop_retention_or_the_alerts(settings, monkeypatch, caplog):
    # Filing raised out of the sweep (a role that may not create the next day's partitions):
    # retention, forgetting gone workers and the alerts after it never ran, sweep after sweep.
    from django.db import ProgrammingError

    settings.PGFLOW = {**settings.PGFLOW, "RETENTION": timedelta(days=1)}
    old = run_workflow(wf.ThreeSteps.start())
    WorkflowRun.objects.filter(pk=old.pk).update(finished_at=store.now() - timedelta(days=2))

    def refused(at):
        raise ProgrammingError("permission denied for schema public")

    monkeypatch.setattr(sweep.history, "make_ahead", refused)
    counts = sweep.run()
    assert (counts["filed_runs"], counts["purged_runs"], counts["alerts"]) == (0, 1, 0)
    assert not WorkflowRun.objects.filter(pk=old.pk).exists()
    (failed,) = [r for r in caplog.records if getattr(r, "action", None) == "sweep_error"]
    assert failed.getMessage() == "sweep: filing history failed"
    assert str(failed.exc_info[1]) == "permission denied for schema public"
