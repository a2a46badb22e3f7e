"""Re-run from a step and child workflows on a real PostgreSQL, run in-process by
pgflow.testing (the same engine code a worker runs); tests/acceptance/test_composition.py
runs them on real workers."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgflow import fanout, store
from pgflow.exceptions import InvalidTransition, StepNotFound
from pgflow.models import BatchMember, Event, Step, WorkflowRun
from pgflow.testing import run_workflow
from tests import composition_workflows as cw
from tests.invariants import assert_exactly_once

pytestmark = pytest.mark.django_db


def kinds(run: WorkflowRun) -> list[str]:
    return list(run.events.values_list("event", flat=True))


# --- re-run from a step ---------------------------------------------------------------------


def test_a_rerun_copies_the_outputs_before_its_step_and_takes_new_input():
    original = run_workflow(cw.Ledger.start(input={"n": 3, "amount": 5, "fail": True}))
    assert original.status == "paused"
    rerun = original.rerun_from("charge", input={"n": 99, "amount": 7}, actor="ops")
    original.refresh_from_db()
    assert original.status == "cancelled"
    assert original.events.filter(event="cancelled").get().details["reason"] == f"re-run as #{rerun.pk}"
    assert rerun.rerun_of == original and list(original.reruns.all()) == [rerun]
    assert rerun.input == {"n": 99, "amount": 7}
    assert rerun.current_step == "charge" and rerun.status == "running"
    copied = rerun.steps.get(step_name="fetch")
    assert (copied.status, copied.outcome, copied.output) == ("completed", "copied", {"fetched": 3})
    rerun = run_workflow(rerun)
    assert rerun.status == "finished"
    # what later steps saw is the copied output (from the original's n=3, not the new n=99)
    assert rerun.outputs["receipt"] == {"charge": {"fetched": 3, "amount": 7}}
    assert not rerun.steps.filter(step_name="fetch").exclude(outcome="copied").exists()
    made = rerun.events.get(event="rerun_of")
    assert (made.actor, made.details["original"], made.details["copied"]) == ("ops", original.pk, ["fetch"])
    assert made.details["definition_changed"] is False
    told = original.events.get(event="rerun_as")
    assert (told.actor, told.details) == ("ops", {"rerun": rerun.pk, "step_name": "charge"})
    assert_exactly_once([original.pk, rerun.pk])


def test_input_none_keeps_the_original_input_and_a_finished_run_stays_finished():
    original = run_workflow(cw.Ledger.start(input={"n": 1, "amount": 2}))
    assert original.status == "finished"
    rerun = run_workflow(original.rerun_from("receipt"))
    original.refresh_from_db()
    assert original.status == "finished"
    assert rerun.input == original.input
    assert sorted(rerun.steps.filter(outcome="copied").values_list("step_name", flat=True)) == ["charge", "fetch"]
    assert rerun.outputs == original.outputs


def test_an_unknown_step_is_refused_naming_the_steps_and_nothing_is_written():
    original = run_workflow(cw.Ledger.start(input={"amount": 1, "fail": True}))
    before = WorkflowRun.objects.count()
    with pytest.raises(StepNotFound, match=r"has no step 'chrge'; its steps are fetch, charge, receipt"):
        original.rerun_from("chrge")
    assert WorkflowRun.objects.count() == before
    original.refresh_from_db()
    assert original.status == "paused"


def test_a_running_run_and_bad_input_are_refused():
    running = cw.Ledger.start(input={"amount": 1})
    with pytest.raises(InvalidTransition, match="cannot re-run a running run"):
        running.rerun_from("fetch")
    paused = run_workflow(cw.Ledger.start(input={"amount": 1, "fail": True}))
    with pytest.raises(TypeError, match="input must be a dict"):
        paused.rerun_from("charge", input=[1, 2])
    paused.refresh_from_db()
    assert paused.status == "paused" and not paused.reruns.exists()


def test_a_changed_definition_is_allowed_and_recorded(monkeypatch):
    original = run_workflow(cw.Ledger.start(input={"amount": 1, "fail": True}))
    WorkflowRun.objects.filter(pk=original.pk).update(definition_digest="0" * 64)
    original.refresh_from_db()
    assert store.rerun_plan(original, "charge")["definition_changed"] is True
    rerun = original.rerun_from("charge", input={"amount": 1})
    assert rerun.events.get(event="rerun_of").details["definition_changed"] is True
    assert run_workflow(rerun).status == "finished"


# --- child workflows --------------------------------------------------------------------------


def test_children_run_inline_and_the_next_step_sees_them():
    parent = run_workflow(cw.Parent.start(input={"n": 3}))
    assert parent.status == "finished", parent.paused_reason
    children = list(parent.children.order_by("id"))
    assert [c.status for c in children] == ["finished"] * 3
    assert parent.outputs["spread"] == {"added": 3}  # what the body returned
    assert parent.outputs["collect"]["doubles"] == [0, 2, 4]
    assert parent.outputs["collect"]["children"] == [c.pk for c in children]
    assert all(c.parent_id == parent.pk for c in children)
    assert sorted(BatchMember.objects.values_list("status", flat=True)) == ["succeeded"] * 3
    finished = parent.events.get(event="fan_out_finished").details
    assert (finished["total"], finished["succeeded"], finished["failed"]) == (3, 3, 0)
    assert_exactly_once()


def test_a_cancelled_child_fails_the_batch_by_on_batch_failure():
    paused = run_workflow(cw.Parent.start(input={"n": 2, "fail": [1]}))
    assert paused.status == "paused"
    assert "1 of 2 jobs failed" in paused.paused_reason
    cancelled = run_workflow(cw.ParentCancelling.start(input={"n": 2, "fail": [0]}))
    assert cancelled.status == "cancelled"
    failures = cancelled.events.get(event="fan_out_finished").details["failures"]
    assert failures[0]["func"] == "tests.composition_workflows.Child"
    assert "was cancelled" in failures[0]["error"]


def test_a_paused_child_keeps_the_batch_open_until_it_ends():
    parent = run_workflow(cw.Parent.start(input={"n": 2, "pause": [1]}))
    assert parent.status == "running"
    waiting = parent.steps.get(status="waiting")
    child = parent.children.get(status="paused")
    assert BatchMember.objects.get(child=child).status == "pending"
    child.cancel(actor="ops")  # the paused child ends: counted failed, the batch resolves
    waiting.refresh_from_db()
    assert waiting.status == "failed"
    parent.refresh_from_db()
    assert parent.status == "paused"


@pytest.mark.django_db(transaction=True)  # the children are cancelled once the parent's cancel commits
def test_cancelling_the_parent_cancels_its_children_unless_they_abandon():
    parent = run_workflow(cw.ParentOfWaiters.start())
    assert parent.status == "running"
    waiter, abandoned = parent.children.order_by("id")
    assert (waiter.status, abandoned.status) == ("running", "running")
    parent.pause(actor="ops")  # pausing the parent leaves its children be
    waiter.refresh_from_db()
    assert waiter.status == "running"
    parent.cancel(actor="ops")
    waiter.refresh_from_db()
    abandoned.refresh_from_db()
    assert waiter.status == "cancelled"
    assert waiter.events.get(event="cancelled").actor == f"parent run #{parent.pk}"
    assert abandoned.status == "running"
    assert_exactly_once()


def test_the_sweep_counts_a_child_whose_member_was_not_counted():
    parent = run_workflow(cw.ParentOfWaiters.start())
    waiter = parent.children.order_by("id").first()
    # As if the child had ended before its member was linked (a crash, or a racing keyed start).
    BatchMember.objects.filter(child=waiter).update(child=None)
    waiter.cancel()
    BatchMember.objects.filter(batch__run=parent, position=0).update(child=waiter)
    assert BatchMember.objects.get(child=waiter).status == "pending"
    from datetime import timedelta

    assert store.repair_children(at=store.now() + timedelta(minutes=10), grace=timedelta(minutes=5)) == 1
    assert BatchMember.objects.get(child=waiter).status == "failed"


def test_add_run_refuses_what_is_not_a_workflow_or_json():
    builder = fanout.BatchBuilder()
    with pytest.raises(TypeError, match="takes a Workflow subclass"):
        builder.add_run("tests.composition_workflows.Child")
    with pytest.raises(TypeError, match="input must be a dict"):
        builder.add_run(cw.Child, input=[1])
    with pytest.raises(TypeError, match="JSON-serialisable"):
        builder.add_run(cw.Child, input={"at": object()})
    assert builder.size == 0


def test_children_are_linked_on_the_started_event():
    parent = run_workflow(cw.Parent.start(input={"n": 1}))
    child = parent.children.get()
    assert Event.objects.get(run=child, event="started").details["parent"] == parent.pk
    assert Step.objects.filter(run=parent, step_name="collect", status="completed").exists()


def test_the_mcp_search_filters_by_parent():
    from pgflow_dashboard.mcp import reads

    parent = run_workflow(cw.Parent.start(input={"n": 2}))
    other = run_workflow(cw.Parent.start(input={"n": 1}))
    found = reads.search_runs(parent=parent.pk)
    assert sorted(row["run_id"] for row in found["runs"]) == sorted(parent.children.values_list("pk", flat=True))
    assert other.pk not in [row["run_id"] for row in found["runs"]]
    with pytest.raises(reads.Refused, match="parent must be a run id"):
        reads.search_runs(parent="x")


def test_explain_run_counts_a_parents_children_and_names_a_reruns_original():
    from django.utils import timezone

    from pgflow_dashboard.mcp import reads

    parent = run_workflow(cw.Parent.start(input={"n": 2, "pause": [1]}))  # child 0 finishes, child 1 pauses
    said = reads.explain_run(parent.pk, now=timezone.now())["explanation"]
    assert said[0] == "step spread is waiting for 2 child runs (1 ended)"
    original = run_workflow(cw.Ledger.start(input={"amount": 1, "fail": True}))
    rerun = original.rerun_from("charge", input={"amount": 1})
    said = reads.explain_run(rerun.pk, now=timezone.now())["explanation"]
    assert said[-1] == f"re-run of #{original.pk} from step charge"
    assert not any(
        "re-run of" in sentence for sentence in reads.explain_run(original.pk, now=timezone.now())["explanation"]
    )


# --- what the second wave promised of child runs and re-runs ---------------------------------


def test_a_resumed_fan_out_links_its_keyed_children_again_and_counts_those_that_ended():
    parent = run_workflow(cw.Parent.start(input={"n": 3, "pause": [1]}))
    assert parent.status == "running"  # child 1 paused: the batch stays open
    children = list(parent.children.order_by("id"))
    assert [c.status for c in children] == ["finished", "paused", "finished"]
    first_batch = parent.steps.get(status="waiting").batch_id
    parent.pause(actor="ops")  # closes the waiting attempt; resume runs the body again
    parent.resume(actor="ops")
    parent = run_workflow(parent)
    # The body added the same keys again: the same three runs, linked to the fresh batch.
    assert parent.children.count() == WorkflowRun.objects.filter(parent=parent).count() == 3
    fresh = parent.steps.get(status="waiting").batch_id
    assert fresh != first_batch
    members = BatchMember.objects.filter(batch_id=fresh).order_by("position")
    assert [m.child_id for m in members] == [c.pk for c in children]
    assert [m.status for m in members] == ["succeeded", "pending", "succeeded"]  # the ended ones counted at once
    paused_child = children[1]
    paused_child.resume(actor="ops")
    assert run_workflow(paused_child).status == "finished"
    parent = run_workflow(parent)
    assert parent.status == "finished", parent.paused_reason
    assert parent.outputs["collect"]["doubles"] == [0, 2, 4]
    assert parent.outputs["collect"]["children"] == [c.pk for c in children]
    assert_exactly_once()


@pytest.mark.django_db(transaction=True)  # the children are cancelled once the parent's cancel commits
def test_the_sweep_cancels_the_open_children_of_a_cancelled_parent_only_after_fan_out_grace(monkeypatch, settings):
    from pgflow.runtime import sweep
    from pgflow.store import children as store_children

    settings.PGFLOW = {**settings.PGFLOW, "FAN_OUT_GRACE": timedelta(minutes=7)}
    parent = run_workflow(cw.ParentOfWaiters.start())
    waiter, abandoned = parent.children.order_by("id")
    with monkeypatch.context() as crash:
        # The process dies between the parent's cancel and its children's.
        crash.setattr(store_children, "cancel_children", lambda parent_id: 0)
        parent.cancel(actor="ops")
    parent.refresh_from_db()
    assert parent.status == "cancelled"
    assert WorkflowRun.objects.get(pk=waiter.pk).status == "running"
    sweep.run(at=parent.finished_at + timedelta(minutes=7) - timedelta(seconds=1))
    assert WorkflowRun.objects.get(pk=waiter.pk).status == "running", "within FAN_OUT_GRACE"
    sweep.run(at=parent.finished_at + timedelta(minutes=7) + timedelta(seconds=1))
    waiter.refresh_from_db()
    assert waiter.status == "cancelled"
    assert waiter.events.get(event="cancelled").actor == f"parent run #{parent.pk}"
    assert WorkflowRun.objects.get(pk=abandoned.pk).status == "running"  # on_parent_cancel = "abandon"
    assert_exactly_once()


def test_a_rerun_copies_the_latest_completed_attempt_and_not_a_step_that_never_completed():
    original = run_workflow(cw.Ledger.start(input={"n": 3, "amount": 5, "fail": True}))
    assert original.status == "paused"  # fetch completed, charge failed and paused
    fetch = original.steps.get(step_name="fetch")
    # An earlier completed attempt of fetch with another output: the later one is the one to copy.
    Step.objects.filter(pk=fetch.pk).update(attempt=2)
    Step.objects.create(
        run=original,
        step_name="fetch",
        attempt=1,
        status="completed",
        outcome="completed",
        queue=fetch.queue,
        created_at=fetch.created_at - timedelta(seconds=5),
        scheduled_at=fetch.created_at - timedelta(seconds=5),
        finished_at=fetch.created_at - timedelta(seconds=4),
        output={"fetched": "stale"},
    )
    plan = original.rerun_plan("receipt")
    assert plan["copied"] == {"fetch": {"fetched": 3}}
    assert plan["not_copied"] == ["charge"]
    rerun = original.rerun_from("receipt", actor="ops")
    assert list(rerun.steps.filter(outcome="copied").values_list("step_name", "output")) == [("fetch", {"fetched": 3})]
    assert not rerun.steps.filter(step_name="charge").exists()
    assert "charge" not in rerun.outputs
    made = rerun.events.get(event="rerun_of").details
    assert (made["copied"], made["not_copied"]) == (["fetch"], ["charge"])


def test_parents_whose_open_children_all_abandon_them_do_not_starve_the_sweep(monkeypatch, settings):
    """More cancelled parents with abandoning children than one pass repairs: a later parent's
    child is still cancelled, on a later pass."""
    from pgflow.runtime import sweep
    from pgflow.store import children as store_children

    settings.PGFLOW = {**settings.PGFLOW, "FAN_OUT_GRACE": timedelta(minutes=1)}
    monkeypatch.setattr(store_children, "REPAIR_LIMIT", 2)
    monkeypatch.setattr(store_children, "_parents_after", 0)
    parents = [run_workflow(cw.ParentOfWaiters.start()) for _ in range(3)]
    with monkeypatch.context() as crash:
        crash.setattr(store_children, "cancel_children", lambda parent_id: 0)
        for parent in parents:
            parent.cancel(actor="ops")
    at = max(WorkflowRun.objects.get(pk=p.pk).finished_at for p in parents) + timedelta(minutes=2)
    for _ in range(3):
        sweep.run(at=at)
    waiters = [p.children.get(workflow_class=f"{cw.Waiter.__module__}.{cw.Waiter.__qualname__}") for p in parents]
    assert [w.status for w in WorkflowRun.objects.filter(pk__in=[w.pk for w in waiters]).order_by("pk")] == [
        "cancelled"
    ] * 3
    assert_exactly_once()
