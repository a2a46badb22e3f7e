"""``self.run`` in a plain step, with a real worker: every field reads what the row holds
(the claim returns some of the run's columns; the others load when read)."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.contenttypes.models import ContentType

from pgflow.models import WorkflowRun
from tests import flowcontrol_workflows as fc
from tests.acceptance.conftest import wait_until


def test_every_field_of_self_run_in_a_plain_step_is_the_rows(start_worker):
    other = fc.ReadsItsRun.start(input={"n": 0})
    other.cancel()
    run = fc.ReadsItsRun.start(input={"n": 1}, key="reads-1")
    # Every field away from its default, as a re-run, a child run or a singleton's run has them.
    WorkflowRun.objects.filter(pk=run.pk).update(
        rerun_of=other,
        parent=other,
        singleton_key="account-7",
        subject_type=ContentType.objects.get_for_model(WorkflowRun),
        subject_id=str(other.pk),
        paused_reason="left from an earlier pause",
        finished_at=run.created_at + timedelta(days=1),
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )
    row = WorkflowRun.objects.get(pk=run.pk)
    worker = start_worker("--queues", "runfields", "--concurrency", "2")
    wait_until(lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished", timeout=60, what="the run to finish")
    assert worker.terminate() == 0
    seen = WorkflowRun.objects.get(pk=run.pk).outputs["report"]
    expected = {f.attname: fc._plain(getattr(row, f.attname)) for f in WorkflowRun._meta.concrete_fields}
    for name in ("status", "current_step", "updated_at"):  # read at the claim, as the body saw them
        expected[name] = seen[name]
    assert (seen["status"], seen["current_step"]) == ("running", "report")
    assert seen == expected
