"""Paused queues and the claim's gates, against the real database (no worker processes)."""

from __future__ import annotations

import pytest

import pgflow
from pgflow import store
from pgflow.models import QueueState, Step, WorkflowRun
from tests import flowcontrol_workflows as fc

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_paused_queue_is_not_claimed_and_its_runs_keep_their_state(admin_user):
    run = fc.PerTenant.start(input={"sleep": 0})
    pgflow.pause_queue("limits", actor=admin_user)
    assert store.claim(worker="w", queues=["limits"], limit=4) == []
    assert store.next_due(["limits"]) is None  # an idle worker does not spin on it
    run.refresh_from_db()
    assert run.status == "running"
    assert Step.objects.get(run=run).status == "scheduled"
    state = QueueState.objects.get(queue="limits")
    assert (state.paused, state.changed_by) == (True, admin_user.get_username())
    pgflow.resume_queue("limits")
    assert [c.run_id for c in store.claim(worker="w", queues=["limits"], limit=4)] == [run.pk]
    assert QueueState.objects.get(queue="limits").changed_by == "system"


def test_pause_queue_names_a_bad_queue():
    with pytest.raises(ValueError, match=r"queue must be 1-100 letters.*got 'no spaces'"):
        pgflow.pause_queue("no spaces")


def test_a_saturated_key_never_blocks_another_key_in_the_same_claim():
    busy = [fc.PerTenant.start(input={"tenant": "busy"}) for _ in range(10)]
    quiet = fc.PerTenant.start(input={"tenant": "quiet"})
    first = store.claim(worker="w", queues=["limits"], limit=10)
    assert sorted(c.run_id for c in first) == sorted([busy[0].pk, busy[1].pk, quiet.pk])
    assert store.claim(worker="w", queues=["limits"], limit=10) == []  # both keys are full
    assert WorkflowRun.objects.count() == 11


def test_without_gated_attempts_the_claim_skips_the_gate_logic_and_with_them_keeps_its_order():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    ungated = fc.PerTenant.start(input={})  # no tenant: no limit
    with CaptureQueriesContext(connection) as sent:
        assert [c.run_id for c in store.claim(worker="w", queues=["limits"], limit=4)] == [ungated.pk]
    # The ungated claim alone, a prepared statement on its generic plan (psycopg's own cursor,
    # which Django does not capture); the gated claim (~2 ms of planning: benchmarks/claim_cost.py)
    # would go through Django's.
    assert not [q["sql"] for q in sent.captured_queries if "pgflow_gate" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE generic_plans > 0")
        prepared = [row[0] for row in cursor.fetchall()]
    assert [sql for sql in prepared if "UPDATE pgflow_step" in sql and "pgflow_gate" not in sql]

    # With a gated attempt scheduled the gated claim decides, in its own order: the fresh
    # gate's attempt before the ungated one started earlier.
    later = fc.PerTenant.start(input={})
    gated = fc.PerTenant.start(input={"tenant": "a"})
    assert Step.objects.get(run=gated).gated and not Step.objects.get(run=later).gated
    with CaptureQueriesContext(connection) as sent:
        assert [c.run_id for c in store.claim(worker="w", queues=["limits"], limit=1)] == [gated.pk]
    assert [q["sql"] for q in sent.captured_queries if "pgflow_gate" in q["sql"]]
    assert [c.run_id for c in store.claim(worker="w", queues=["limits"], limit=4)] == [later.pk]


def test_retention_frees_the_places_its_purged_attempts_held():
    from datetime import timedelta

    from pgflow.models import Gate

    held = [fc.PerTenant.start(input={"tenant": "t"}) for _ in range(2)]
    assert sorted(c.run_id for c in store.claim(worker="w", queues=["limits"], limit=4)) == sorted(r.pk for r in held)
    for run in held:
        run.cancel()  # ended; the gate learns it at the next claim through it, or from retention
    assert store.purge_runs(store.now() + timedelta(days=1), batch=10, rounds=1) == 2
    assert all(not gate.holders for gate in Gate.objects.all())
    later = [fc.PerTenant.start(input={"tenant": "t"}) for _ in range(2)]
    claimed = store.claim(worker="w", queues=["limits"], limit=4)
    assert sorted(c.run_id for c in claimed) == sorted(r.pk for r in later), "the key kept both its places"
