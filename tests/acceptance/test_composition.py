"""Re-run from a step and child workflows on real worker processes (no qcluster: a batch of
child runs needs none)."""

from __future__ import annotations

from collections import Counter

from pgflow.models import BatchMember, Event, WorkflowRun
from tests import composition_workflows as cw
from tests.acceptance.conftest import wait_until
from tests.invariants import assert_exactly_once


def status_of(run: WorkflowRun) -> str:
    return WorkflowRun.objects.values_list("status", flat=True).get(pk=run.pk)


def test_a_rerun_after_a_failure_with_new_input_finishes_on_the_copied_outputs(start_worker, marks):
    worker = start_worker()
    original = cw.Ledger.start(input={"n": 4, "amount": 10, "fail": True})
    wait_until(lambda: status_of(original) == "paused", timeout=60, what="the failing run to pause")
    rerun = original.rerun_from("charge", input={"n": 50, "amount": 12}, actor="ops")
    wait_until(lambda: status_of(rerun) == "finished", timeout=60, what="the re-run to finish")
    assert worker.terminate() == 0
    rerun.refresh_from_db()
    assert rerun.outputs["receipt"] == {"charge": {"fetched": 4, "amount": 12}}
    bodies = Counter(marks.read_text().split())
    assert bodies[f"fetch:{rerun.pk}"] == 0, "a copied step ran again"
    assert (bodies[f"charge:{rerun.pk}"], bodies[f"receipt:{rerun.pk}"]) == (1, 1)
    assert status_of(original) == "cancelled"
    assert_exactly_once([original.pk, rerun.pk])


def test_children_fan_out_across_two_workers_and_the_parent_resumes_once(start_worker, marks):
    parents = [cw.Parent.start(input={"n": 12}) for _ in range(3)]
    one = start_worker("--concurrency", "4")
    two = start_worker("--concurrency", "4")
    wait_until(
        lambda: WorkflowRun.objects.filter(pk__in=[p.pk for p in parents], status="finished").count() == 3,
        timeout=120,
        what="three parents of 12 children each to finish",
    )
    assert one.terminate() == 0
    assert two.terminate() == 0
    bodies = Counter(marks.read_text().split())
    for parent in parents:
        parent.refresh_from_db()
        assert parent.outputs["collect"]["doubles"] == [2 * i for i in range(12)]
        assert bodies[f"spread:{parent.pk}"] == 1
        assert bodies[f"collect:{parent.pk}"] == 1, "the parent resumed more than once"
        assert Event.objects.filter(run=parent, event="fan_out_finished").count() == 1
        assert parent.children.filter(status="finished").count() == 12
    assert set(BatchMember.objects.values_list("status", flat=True)) == {"succeeded"}
    assert "step=work" in one.output() and "step=work" in two.output(), "one worker ran every child"
    assert_exactly_once()


def test_a_failed_child_applies_on_batch_failure_and_a_cancelled_parent_cancels_children(start_worker, marks):
    worker = start_worker("--concurrency", "4")
    cancelling = cw.ParentCancelling.start(input={"n": 3, "fail": [1]})
    pausing = cw.Parent.start(input={"n": 3, "fail": [2]})
    waiters = cw.ParentOfWaiters.start()
    wait_until(lambda: status_of(cancelling) == "cancelled", timeout=60, what="on_batch_failure=cancel")
    wait_until(lambda: status_of(pausing) == "paused", timeout=60, what="on_batch_failure=pause")
    wait_until(lambda: waiters.children.count() == 2, timeout=60, what="the waiting children to start")
    waiters.cancel(actor="ops")
    waiter = waiters.children.get(workflow_class__endswith=".Waiter")
    abandoned = waiters.children.get(workflow_class__endswith=".Abandoned")
    wait_until(lambda: status_of(waiter) == "cancelled", timeout=30, what="the child to be cancelled with its parent")
    assert worker.terminate() == 0
    assert status_of(abandoned) == "running"
    assert "1 of 3 jobs failed" in WorkflowRun.objects.get(pk=pausing.pk).paused_reason
    bodies = Counter(marks.read_text().split())
    assert bodies[f"collect:{cancelling.pk}"] == 0 and bodies[f"collect:{pausing.pk}"] == 0
    assert_exactly_once()
