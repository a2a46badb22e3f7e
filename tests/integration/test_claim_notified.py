"""The claim by id of the attempt a start announced: it takes what the full claim would take of
that attempt, and nothing the full claim would leave."""

from __future__ import annotations

import pytest
from django.db import connection

import pgflow
from pgflow import store
from pgflow.models import Step
from tests import flowcontrol_workflows as fc
from tests import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


def first_attempt(run) -> Step:
    return Step.objects.get(run=run)


def test_it_claims_the_announced_attempt_as_the_claim_would():
    run = wf.ThreeSteps.start(input={"a": 1})
    step = first_attempt(run)
    (held,) = store.claim_notified(step.pk, worker="w-1", queues=["workflows"])
    assert (held.step_id, held.run_id, held.step_name, held.attempt) == (step.pk, run.pk, "one", 1)
    assert held.run().input == {"a": 1} and held.step_fields["queue"] == "workflows"
    step.refresh_from_db()
    assert (step.status, step.worker, step.claim_token) == ("in_progress", "w-1", held.token)
    assert store.claim_notified(step.pk, worker="w-2", queues=["workflows"]) == []  # once


def test_it_says_when_the_next_attempt_comes_due_as_the_claim_does():
    later = first_attempt(wf.Delayed.start())
    step = first_attempt(wf.ThreeSteps.start())
    claimed = store.claim_notified(step.pk, worker="w", queues=["workflows"])
    assert [held.step_id for held in claimed] == [step.pk]
    assert claimed.next_due == later.scheduled_at
    assert store.claim(worker="w", queues=["workflows"], limit=5).next_due == later.scheduled_at
    assert store.claim_notified(step.pk, worker="w", queues=["mail"]).next_due is None
    assert store.claim(worker="w-2", queues=["workflows"], limit=5) == []


@pytest.mark.parametrize(
    "why", ["not due", "paused queue", "gated", "locked by another claim", "no such attempt", "another queue"]
)
def test_it_claims_nothing_the_claim_would_leave(why):
    if why == "not due":
        step = first_attempt(wf.Delayed.start())
    elif why == "gated":
        step = first_attempt(fc.PerTenant.start(input={"tenant": "t"}))
        assert step.gated
    else:
        step = first_attempt(wf.ThreeSteps.start())
    if why == "paused queue":
        pgflow.pause_queue("workflows")
    if why == "no such attempt":
        step.pk = step.pk + 10_000
    if why == "locked by another claim":
        # Another session holds the row (a claim in flight): skipped, never waited for.
        from django.db import connections

        other = connections.create_connection("default")
        other.set_autocommit(False)
        with other.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pgflow_step WHERE id = %s FOR UPDATE", [step.pk])
        try:
            assert store.claim_notified(step.pk, worker="w", queues=["workflows", "limits"]) == []
        finally:
            other.rollback()
            other.close()
        return
    queues = ["mail"] if why == "another queue" else ["workflows", "limits"]
    assert store.claim_notified(step.pk, worker="w", queues=queues) == []
    if why != "no such attempt":
        step.refresh_from_db()
        assert step.status == "scheduled" and step.worker in ("", None)


def test_its_claim_is_not_waited_for_on_disk_like_the_claim():
    connection.close()  # a fresh session, which no earlier claim has set
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = on")  # whatever the test server's default
    store.claim_notified(10**12, worker="w", queues=["workflows"])
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone() == ("off",)
