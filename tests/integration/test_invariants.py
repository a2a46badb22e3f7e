"""The exactly-once checker on rows the engine wrote: clean runs pass, a transition planted
twice in one run and dropped in another fail it, though the global totals still agree."""

from __future__ import annotations

import pytest

from pgflow.models import Event
from pgflow.testing import run_workflow
from tests import workflows as wf
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
def test_the_one_open_attempt_index_holds_when_two_connections_race_to_open_one():
    """Two writers that both believe the run has no open attempt (what a fencing bug would
    let two workers do): the partial unique index lets exactly one commit."""
    import threading

    import psycopg
    from django.db import connection

    run = wf.ThreeSteps.start()
    params = {
        key: value
        for key, value in connection.get_connection_params().items()
        if key in ("dbname", "user", "password", "host", "port")
    }
    open_next = (
        "INSERT INTO pgflow_step (run_id, step_name, attempt, status, outcome, queue, priority, created_at, "
        "scheduled_at, worker) SELECT run_id, 'two', %s, 'scheduled', '', queue, priority, now(), now(), '' "
        "FROM pgflow_step WHERE run_id = %s AND attempt = 1"
    )
    close_first = (
        "UPDATE pgflow_step SET status = 'completed', outcome = 'completed', finished_at = now() WHERE run_id = %s"
    )
    errors: list[str] = []
    with psycopg.connect(**params) as first, psycopg.connect(**params) as second:
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
