"""The exactly-once checker on rows the engine wrote: clean runs pass, a transition planted
twice in one run and dropped in another fail it, though the global totals still agree."""

from __future__ import annotations

import pytest

from pgflow.models import Event
from pgflow.testing import run_workflow
from tests import workflows as wf
from tests.connections import other_connection
from tests.invariants import assert_exactly_once

pytestmark = pytest.mark.django_db


def test_runs_the_engine_finished_pass_and_planted_breaches_fail():
    runs = [run_workflow(wf.ThreeSteps.start()) for _ in range(3)]
    assert assert_exactly_once() == 3
    total = Event.objects.filter(event="step_completed").count()
    duplicated = Event.objects.filter(run=runs[0], event="step_completed").first()
    assert duplicated is not None
    duplicated.pk = None
    duplicated.save()
    Event.objects.filter(run=runs[1], event="step_completed").first().delete()
    assert Event.objects.filter(event="step_completed").count() == total  # a total cannot see it
    with pytest.raises(AssertionError) as failure:
        assert_exactly_once()
    message = str(failure.value)
    assert message.startswith("2 exactly-once violations:")
    assert f"run {runs[0].pk} one#1 (completed, outcome completed): closing events {{'step_completed': 2}}" in message
    assert f"run {runs[1].pk} one#1 (completed, outcome completed): closing events {{}}" in message
    assert assert_exactly_once([runs[2].pk]) == 1


@pytest.mark.django_db(transaction=True)
def test_a_cluster_read_through_psycopg_is_checked_as_the_suite_database_is():
    """``cluster_violations``, for the failover and restart tests' own clusters: the same
    breaches found from a plain psycopg connection."""
    from tests.invariants import cluster_violations

    runs = [run_workflow(wf.ThreeSteps.start()) for _ in range(2)]
    with other_connection() as conn:
        assert cluster_violations(conn) == []
    Event.objects.filter(run=runs[1], event="step_completed").first().delete()
    with other_connection() as conn:
        assert cluster_violations(conn) == [
            f"run {runs[1].pk} one#1 (completed, outcome completed): closing events {{}}, "
            "expected {'step_completed': 1}"
        ]


@pytest.mark.django_db(transaction=True)
def test_the_one_open_attempt_index_holds_when_two_connections_race_to_open_one():
    """Two writers that both believe the run has no open attempt (what a fencing bug would
    let two workers do): the partial unique index lets exactly one commit."""
    import threading

    import psycopg

    run = wf.ThreeSteps.start()
    open_next = (
        "INSERT INTO pgflow_step (run_id, step_name, attempt, status, outcome, queue, priority, created_at, "
        "scheduled_at, worker) SELECT run_id, 'two', %s, 'scheduled', '', queue, priority, now(), now(), '' "
        "FROM pgflow_step WHERE run_id = %s AND attempt = 1"
    )
    close_first = (
        "UPDATE pgflow_step SET status = 'completed', outcome = 'completed', finished_at = now() WHERE run_id = %s"
    )
    errors: list[str] = []
    with other_connection() as first, other_connection() as second:
        first.execute(close_first, [run.pk])
        first.execute(open_next, [1, run.pk])  # uncommitted: the second writer must wait on it

        def race() -> None:
            try:
                second.execute(open_next, [2, run.pk])
                second.commit()
            except psycopg.errors.UniqueViolation as exc:
                errors.append(exc.diag.constraint_name or "")
                second.rollback()

        racer = threading.Thread(target=race)
        racer.start()
        racer.join(0.5)
        assert racer.is_alive(), "the second insert did not wait on the first's uncommitted open attempt"
        first.commit()
        racer.join(10)
    assert errors == ["pgflow_step_one_open"]
    assert list(run.steps.filter(status="scheduled").values_list("step_name", "attempt")) == [("two", 1)]


@pytest.mark.django_db(transaction=True)  # committed: the psycopg connection below reads them
def test_batches_ticks_gates_and_signals_the_engine_wrote_pass_and_a_planted_breach_of_each_fails():
    from datetime import timedelta

    from django.db.models import F

    from pgflow.models import Batch, ScheduleTick, Step
    from pgflow.testing import fire_schedule
    from tests import composition_workflows as cw
    from tests import flowcontrol_workflows as fc
    from tests import schedule_workflows as sw
    from tests.invariants import cluster_violations, flow_violations

    parent = run_workflow(cw.Parent.start(input={"n": 3}))
    limited = [run_workflow(fc.PerTenant.start(input={"tenant": "t1", "sleep": 0})) for _ in range(3)]
    approved = run_workflow(wf.TwoApprovals.start(), signals={"approval": ["yes", "also yes"]})
    ticked = run_workflow(fire_schedule(sw.Report, "hourly"))
    assert parent.status == approved.status == ticked.status == "finished"
    assert {run.status for run in limited} == {"finished"}
    assert flow_violations() == []
    assert assert_exactly_once() == 3 + 1 + 3 + 1 + 1  # the parent and its children, the rest

    # A member counted twice.
    Batch.objects.filter(run=parent).update(succeeded=F("succeeded") + 1)
    assert any("counted succeeded 4, 3 members succeeded" in found for found in flow_violations())
    Batch.objects.filter(run=parent).update(succeeded=F("succeeded") - 1)
    # A tick that started a second run.
    tick = ScheduleTick.objects.get(run=ticked)
    ScheduleTick.objects.create(
        schedule_id=tick.schedule_id,
        tick_at=tick.tick_at,
        outcome="started",
        run=limited[0],
        started_at=tick.started_at,
    )
    assert f"schedule {tick.schedule_id} tick {tick.tick_at.isoformat()}: started 2 runs" in flow_violations()
    ScheduleTick.objects.exclude(pk=tick.pk).delete()
    # Three attempts of a gate of two in progress at once.
    attempts = list(Step.objects.filter(run__in=limited).order_by("id"))
    first = attempts[0]
    Step.objects.filter(pk__in=[a.pk for a in attempts]).update(
        started_at=first.started_at, finished_at=first.started_at + timedelta(seconds=1)
    )
    assert any(found.startswith("gate c:t1: 3 attempts in progress") for found in flow_violations())
    Step.objects.filter(pk__in=[a.pk for a in attempts[1:]]).update(started_at=first.started_at + timedelta(seconds=1))
    assert flow_violations() == []
    # A signal consumed again by the run's second step.
    second = Step.objects.get(run=approved, step_name="second")
    taken_first = Step.objects.get(run=approved, step_name="first").signal_id
    Step.objects.filter(pk=second.pk).update(signal_id=taken_first)
    with pytest.raises(AssertionError) as failure:
        assert_exactly_once([approved.pk])
    assert "consumed twice" in str(failure.value)
    # A test's own cluster, read through psycopg, is checked for the same breaches.
    Batch.objects.filter(run=parent).update(succeeded=F("succeeded") + 1)
    with other_connection() as conn:
        found = cluster_violations(conn)
    assert found == flow_violations()
    assert any("consumed twice" in each for each in found)
    assert any("counted succeeded 4, 3 members succeeded" in each for each in found)
