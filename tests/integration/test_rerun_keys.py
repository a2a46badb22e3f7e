"""A re-run and its class's keys: it takes the class's singleton key and obeys on_conflict
as a start does, and it takes over the original's idempotency key (the webhook that finds
the run by its key then finds the re-run)."""

from __future__ import annotations

import pytest

import pgflow
from pgflow import store
from pgflow.models import Event, Step, WorkflowRun
from pgflow.testing import run_workflow
from tests import composition_workflows as cw
from tests import flowcontrol_workflows as fc

pytestmark = pytest.mark.django_db(transaction=True)


def claimed_runs() -> list[int]:
    return sorted(c.run_id for c in store.claim(worker="w", queues=["limits"], limit=10))


def test_a_rerun_waits_for_the_open_run_of_its_singleton_key():
    original = run_workflow(fc.OnePerAccount.start(input={"account": "a"}))
    queued = fc.OnePerAccount.start(input={"account": "a"})
    assert claimed_runs() == [queued.pk]  # the queued run holds the key
    rerun = original.rerun_from("second")
    assert rerun.singleton_key == "a"
    assert Step.objects.get(run=rerun, status="scheduled").gate == f"s:{fc.OnePerAccount.workflow_path()}:a"
    assert claimed_runs() == [], "the re-run ran beside the open run of its key"
    queued.cancel()
    assert claimed_runs() == [rerun.pk]


def test_a_rerun_of_a_skipping_singleton_is_refused_while_another_run_holds_its_key():
    original = run_workflow(fc.OnlyOne.start(input={"account": "x"}))
    holder = fc.OnlyOne.start(input={"account": "x"})
    runs, events = WorkflowRun.objects.count(), Event.objects.count()
    with pytest.raises(pgflow.SingletonConflict, match=rf"run #{holder.pk} with key 'x' is still running") as refused:
        original.rerun_from("only")
    assert refused.value.open_run.pk == holder.pk
    assert (WorkflowRun.objects.count(), Event.objects.count()) == (runs, events), "the refused re-run left rows"
    holder.cancel()
    assert original.rerun_from("only").singleton_key == "x"


def test_a_paused_original_gives_its_singleton_key_to_its_rerun():
    queued = fc.OnePerAccount.start(input={"account": "q"})
    assert claimed_runs() == [queued.pk]  # its run holds the key's gate
    queued.pause()
    again = queued.rerun_from("first")  # the original is cancelled: it holds the key no more
    assert claimed_runs() == [again.pk]
    original = fc.OnlyOne.start(input={"account": "p"})
    original.pause()
    rerun = original.rerun_from("only")  # not refused by the paused original it replaces
    original.refresh_from_db()
    assert (original.status, rerun.singleton_key) == ("cancelled", "p")


def test_a_rerun_takes_over_the_originals_idempotency_key():
    original = run_workflow(cw.Ledger.start(input={"n": 1, "amount": 3, "fail": True}, key="order-7"))
    rerun = original.rerun_from("charge")
    original.refresh_from_db()
    assert (rerun.key, original.key) == ("order-7", None)
    # the webhook's lookup, and a repeated start with the key, find the re-run
    assert cw.Ledger.runs().get(key="order-7") == rerun
    assert cw.Ledger.start(input={"n": 1}, key="order-7") == rerun
    assert rerun.events.get(event="started").details["key"] == "order-7"
    assert original.events.get(event="rerun_as").details["key"] == "order-7"
    # a run whose key went to an earlier re-run has none to give
    assert original.rerun_from("charge").key is None
