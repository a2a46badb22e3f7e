"""Paused queues and the claim's gates, against the real database (no worker processes)."""

from __future__ import annotations

import pytest

import pgflow
from pgflow import store
from pgflow.models import QueueState, Step, WorkflowRun
from tests import flowcontrol_workflows as fc
from tests.connections import other_connection

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
    assert (state.paused, state.changed_by) == (True, f"user:{admin_user.get_username()}")  # as Event.actor
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


def _in_progress(tenant: str) -> int:
    return Step.objects.filter(run__input__tenant=tenant, status="in_progress").count()


def test_two_claims_racing_for_a_limits_last_place_give_it_once_and_neither_waits():
    """Forced: the first claim has taken the last place and not committed when the second
    runs. The gate row's FOR UPDATE SKIP LOCKED makes the second skip the gate at once;
    without the lock it would read the place as free in its snapshot (two through a limit
    of two... three), and with a plain FOR UPDATE it would wait for the first."""
    import threading

    from django.db import connection, transaction

    for _ in range(4):
        fc.PerTenant.start(input={"tenant": "race"})
    assert len(store.claim(worker="w0", queues=["limits"], limit=1)) == 1  # one of its two places taken
    first_holds, release = threading.Event(), threading.Event()
    second: dict = {}

    def first_claim() -> None:
        try:
            with transaction.atomic():
                assert len(store.claim(worker="w1", queues=["limits"], limit=4)) == 1  # the last place
                first_holds.set()
                release.wait(30)
        finally:
            connection.close()

    def second_claim() -> None:
        try:
            second["pid"] = connection.cursor().connection.info.backend_pid
            second["claimed"] = len(store.claim(worker="w2", queues=["limits"], limit=4))
        finally:
            connection.close()

    one = threading.Thread(target=first_claim)
    one.start()
    assert first_holds.wait(30)
    two = threading.Thread(target=second_claim)
    two.start()
    two.join(3)
    # If the second claim is blocked on the first's lock, record it, then let both end.
    waited = two.is_alive()
    release.set()
    one.join(30)
    two.join(30)
    assert not waited, "the second claim waited for the first one's gate row instead of skipping it"
    assert second["claimed"] == 0
    assert _in_progress("race") == 2, "a limit of two had more in progress"


def test_a_claim_locks_a_bounded_number_of_gate_rows_however_many_keys_are_due():
    """Counted from a second connection, which skips the rows the claim holds locked."""
    from django.db import transaction

    from pgflow.models import Gate

    for number in range(300):
        fc.PerTenant.start(input={"tenant": f"k{number}"})
    other = other_connection(autocommit=True)
    try:
        with transaction.atomic():
            assert len(store.claim(worker="w", queues=["limits"], limit=4)) == 4
            free = other.execute("SELECT count(*) FROM (SELECT 1 FROM pgflow_gate FOR UPDATE SKIP LOCKED) AS f")
            locked = Gate.objects.count() - free.fetchone()[0]
    finally:
        other.close()
    assert 4 <= locked <= store.claims.gate_visits(4), f"the claim locked {locked} of 300 keys' gate rows"


def test_a_paused_run_holds_its_singleton_key():
    holder = fc.OnePerAccount.start(input={"account": "held"})
    assert [c.run_id for c in store.claim(worker="w", queues=["limits"], limit=4)] == [holder.pk]
    holder.pause()
    waiting = fc.OnePerAccount.start(input={"account": "held"})
    assert store.claim(worker="w", queues=["limits"], limit=4) == []  # the paused run still holds it
    refused = fc.OnlyOne.start(input={"account": "held"})
    refused.pause()
    with pytest.raises(pgflow.SingletonConflict, match=rf"run #{refused.pk} with key 'held' is still paused"):
        fc.OnlyOne.start(input={"account": "held"})
    holder.cancel()
    assert [c.run_id for c in store.claim(worker="w", queues=["limits"], limit=4)] == [waiting.pk]


def test_a_changed_max_applies_to_keys_first_used_afterwards():
    # PerTenant and PerTenantOfThree share their keys' gates (c:<tenant>): the second is the
    # first with its max changed from 2 to 3, as a deploy would change it.
    fc.PerTenant.start(input={"tenant": "old"})
    for _ in range(4):
        fc.PerTenantOfThree.start(input={"tenant": "old"})
        fc.PerTenantOfThree.start(input={"tenant": "new"})
    store.claim(worker="w", queues=["limits"], limit=20)
    assert (_in_progress("old"), _in_progress("new")) == (2, 3)
