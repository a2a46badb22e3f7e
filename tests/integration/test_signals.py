"""Signals on a real PostgreSQL: kept until consumed, never lost, never consumed twice."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction

import pgflow
from pgflow import store
from pgflow.models import Signal, Step, WorkflowRun
from pgflow.runtime import sweep
from pgflow.store import transitions
from pgflow.testing import run_workflow
from pgflow_dashboard import timeline
from tests import workflows as wf


def step_dicts(run):
    return list(run.steps.values())


@pytest.mark.django_db
def test_a_signal_sent_before_the_step_parks_is_kept_and_consumed():
    run = wf.WaitsForPayment.start()
    sent = pgflow.signal(run, "payment", {"amount": 12})
    run = run_workflow(run)
    assert run.status == "finished"
    charge = run.steps.get(step_name="charge")
    assert charge.output == {"paid": {"amount": 12}}
    assert charge.waiting_since is None  # it never had to wait
    sent.refresh_from_db()
    assert sent.consumed_by_id == charge.pk
    assert sent.consumed_at is not None


@pytest.mark.django_db
def test_a_parked_step_waits_then_its_signal_wakes_it_with_the_timeline_shape():
    run = run_workflow(wf.WaitsForPayment.start())
    assert run.status == "running"
    charge = run.steps.get(step_name="charge")
    assert charge.status == "waiting"
    assert charge.waiting_since is not None
    assert charge.deadline_at == charge.waiting_since + timedelta(hours=1)
    pgflow.signal(run.pk, "payment", {"amount": 5})
    charge.refresh_from_db()
    assert charge.status == "scheduled"
    assert charge.waiting_since < charge.scheduled_at
    run = run_workflow(run)
    assert run.status == "finished"
    charge.refresh_from_db()
    assert charge.started_at >= charge.scheduled_at
    kinds = [
        segment["kind"]
        for segment in timeline.segments({f.name: getattr(charge, f.name) for f in Step._meta.fields}, now=store.now())
    ]
    assert kinds[:2] == ["waited", "waiting"]
    assert kinds[-1] == "ran"
    assert [e.event for e in run.events] == [
        "started",
        "step_completed",
        "signal_received",
        "step_completed",
        "step_completed",
        "finished",
    ]


@pytest.mark.django_db
def test_two_signals_of_one_name_are_consumed_in_arrival_order():
    run = wf.TwoApprovals.start()
    pgflow.signal(run, "approval", "first")
    pgflow.signal(run, "approval", "second")
    run = run_workflow(run)
    assert run.status == "finished"
    assert list(run.steps.values_list("step_name", "output")) == [("first", "first"), ("second", "second")]
    assert Signal.objects.filter(run=run, consumed_at__isnull=True).count() == 0
    consumers = list(Signal.objects.filter(run=run).order_by("id").values_list("consumed_by__step_name", flat=True))
    assert consumers == ["first", "second"]


@pytest.mark.django_db
def test_a_reattempt_keeps_the_signal_its_step_consumed():
    run = wf.FailsOnceAfterSignal.start()
    pgflow.signal(run, "go", {"v": 1})
    run = run_workflow(run)
    assert run.status == "finished"
    assert list(run.steps.values_list("attempt", "outcome", "output")) == [
        (1, "reattempted", None),
        (2, "completed", {"v": 1}),
    ]


@pytest.mark.django_db
def test_signals_to_ended_or_unknown_runs_and_bad_payloads_are_refused():
    run = run_workflow(wf.ThreeSteps.start())
    with pytest.raises(pgflow.InvalidTransition, match=f"run {run.pk} is finished: it takes no more signals"):
        pgflow.signal(run, "anything")
    with pytest.raises(WorkflowRun.DoesNotExist):
        pgflow.signal(999_999, "anything")
    waiting = wf.WaitsForPayment.start()
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        pgflow.signal(waiting, "payment", {"ids": {1, 2}})
    with pytest.raises(ValueError, match="a signal name must be a non-empty string"):
        pgflow.signal(waiting, "")
    assert Signal.objects.count() == 0
    assert not waiting.events.filter(event="signal_received").exists()


@pytest.mark.django_db
def test_a_paused_run_keeps_its_signal_for_when_it_resumes():
    run = run_workflow(wf.WaitsForPayment.start())
    run.pause(actor="ops")
    pgflow.signal(run, "payment", "late")
    run.resume(actor="ops")
    run = run_workflow(run)
    assert run.status == "finished"
    assert run.steps.filter(step_name="charge").last().output == {"paid": "late"}


@pytest.mark.django_db
def test_signal_received_records_the_payload_size_not_its_content():
    run = wf.WaitsForPayment.start()
    pgflow.signal(run, "payment", {"card": "4111"}, actor="webhook")
    received = run.events.get(event="signal_received")
    assert received.actor == "webhook"
    assert received.details == {"name": "payment", "payload_bytes": len('{"card": "4111"}')}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("workflow", "run_status", "step_status", "outcome"),
    [(wf.ShortWait, "finished", "skipped", "skipped"), (wf.PausesOnWaitTimeout, "paused", "cancelled", "paused")],
)
def test_the_sweep_applies_on_timeout_past_the_deadline(workflow, run_status, step_status, outcome):
    run = run_workflow(workflow.start())
    waiting = run.steps.get()
    assert waiting.status == "waiting"
    assert sweep.run(at=waiting.deadline_at - timedelta(seconds=0.1))["wait_timeouts"] == 0
    assert sweep.run(at=waiting.deadline_at + timedelta(seconds=0.1))["wait_timeouts"] == 1
    run = run_workflow(run)
    assert run.status == run_status
    waiting.refresh_from_db()
    assert (waiting.status, waiting.outcome) == (step_status, outcome)
    timed_out = run.events.get(event="timed_out")
    assert timed_out.details == {"signal": "go", "action": workflow.steps().get("wait_a_bit").on_timeout}


@pytest.mark.django_db(transaction=True)
def test_a_signal_racing_the_park_wakes_the_step():
    """The signal is sent from a second connection while the step is being parked under
    the run lock: it waits for the lock, then finds the parked step and wakes it."""
    run = wf.WaitsForPayment.start()
    run_workflow(run, signals={})  # runs `order`, parks `charge`
    Step.objects.filter(run=run, step_name="charge").update(status="scheduled", waiting_since=None)
    held = store.claim(worker="t", queues=["workflows"], limit=1)[0]
    sent = threading.Event()

    def send() -> None:
        try:
            pgflow.signal(run.pk, "payment", "raced")
            sent.set()
        finally:
            connection.close()

    with transaction.atomic():
        locked = WorkflowRun.objects.select_for_update().get(pk=run.pk)
        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(0.3)
        assert not sent.is_set(), "the signal must wait for the run lock"
        step = Step.objects.get(pk=held.step_id)
        transitions.park(locked, step, at=store.now())
    sender.join(10)
    assert sent.is_set()
    step.refresh_from_db()
    assert step.status == "scheduled"
    run = run_workflow(run)
    assert run.status == "finished"
    assert run.steps.get(step_name="charge").output == {"paid": "raced"}


@pytest.mark.django_db(transaction=True)
def test_concurrent_signals_are_all_kept_and_wake_the_step_once():
    run = wf.WaitsForPayment.start()
    run = run_workflow(run)  # parks charge
    assert run.steps.get(step_name="charge").status == "waiting"

    def send(number: int) -> None:
        try:
            pgflow.signal(run.pk, "payment", number)
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    run = run_workflow(run)
    assert run.status == "finished"
    assert Signal.objects.filter(run=run).count() == 5
    assert Signal.objects.filter(run=run, consumed_at__isnull=False).count() == 1


@pytest.mark.django_db
def test_run_workflow_delivers_the_signals_it_is_given_when_the_run_waits_for_them():
    run = run_workflow(wf.TwoApprovals.start(), signals={"approval": ["yes", "also yes"]})
    assert run.status == "finished"
    assert list(run.steps.values_list("output", flat=True)) == ["yes", "also yes"]
    waiting = run_workflow(wf.TwoApprovals.start(), signals={"approval": "only one"})
    assert waiting.status == "running"
    assert list(waiting.steps.values_list("step_name", "status")) == [("first", "completed"), ("second", "waiting")]
