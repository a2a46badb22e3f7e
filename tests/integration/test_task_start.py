"""A ``django.tasks`` task due now is enqueued through the plain start (one statement, as
``Workflow.start``); one with ``run_after`` later is scheduled for then."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from pgflow.models import Step
from tests import django_tasks as t

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_task_due_now_is_enqueued_in_one_statement():
    with CaptureQueriesContext(connection) as queries:
        result = t.plain.enqueue(1)
    assert len(queries) == 1, [q["sql"] for q in queries]
    (attempt,) = Step.objects.filter(run_id=int(result.id))
    assert (attempt.status, attempt.attempt) == ("scheduled", 1)
    assert attempt.scheduled_at == attempt.created_at


def test_a_task_whose_run_after_is_past_is_due_at_once():
    result = t.plain.using(run_after=timezone.now() - timedelta(hours=1)).enqueue(2)
    (attempt,) = Step.objects.filter(run_id=int(result.id))
    assert attempt.scheduled_at == attempt.created_at


def test_a_task_with_run_after_later_is_due_then():
    later = timezone.now() + timedelta(hours=1)
    result = t.plain.using(run_after=later).enqueue(3)
    (attempt,) = Step.objects.filter(run_id=int(result.id))
    assert (attempt.status, attempt.scheduled_at) == ("scheduled", later)
    assert t.plain.get_result(result.id).status == "READY"


def test_a_lost_attempts_error_class_imports():
    # A task whose worker died: its result's error names pgflow.LeaseExpired, which Django's
    # TaskError.exception_class imports (it named a class that did not exist).
    import pgflow
    from pgflow import store
    from pgflow.runtime import sweep

    result = t.add.enqueue(1, 2)
    held = store.claim(worker="doomed", queues=["workflows"], limit=1)[0]
    expires = Step.objects.get(pk=held.step_id).lease_expires_at
    assert sweep.run(at=expires + timedelta(seconds=1))["lost_leases"] == 1
    (error,) = t.add.get_result(result.id).errors
    assert error.exception_class is pgflow.LeaseExpired
    assert "worker doomed stopped heartbeating" in error.traceback


def test_a_start_says_whether_it_made_the_run_even_when_a_racing_start_made_it():
    # The backend sent task_enqueued when the run's created_at was after its own clock's
    # reading: a racing enqueue's run, committed first, passed for its own (a second signal).
    import threading

    from django.db import transaction

    from pgflow import store
    from tests import workflows as wf

    first = store.start_run(wf.ThreeSteps, key="k-1")
    assert store.created(first) and not store.created(store.start_run(wf.ThreeSteps, key="k-1"))
    assert not store.created(type(first).objects.get(pk=first.pk))
    got: list[object] = []
    with transaction.atomic():
        mine = store.start_run(wf.ThreeSteps, key="k-2")  # uncommitted: the other start waits on it

        def racer() -> None:
            try:
                got.append(store.start_run(wf.ThreeSteps, key="k-2"))
            finally:
                connection.close()

        thread = threading.Thread(target=racer)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive(), "the racing start did not wait on the uncommitted one"
    thread.join(10)
    (theirs,) = got
    assert theirs.pk == mine.pk and store.created(mine) and not store.created(theirs)


def test_a_whole_float_priority_django_accepts_is_the_steps_priority():
    # Django's validate_task takes 5.0 (a whole number); the start refused it with pgflow's
    # DefinitionError ("priority must be a whole number").
    result = t.add.using(priority=5.0).enqueue(1, 1)
    assert t.add.get_result(result.id).task.priority == 5
    assert Step.objects.get(run_id=int(result.id)).priority == 5
