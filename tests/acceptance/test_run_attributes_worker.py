"""set_attributes() in a body run by a real worker process: what it set is on the run (the
group commit's path) with its events, and attr.K:V finds the run."""

from __future__ import annotations

from pgflow.models import WorkflowRun
from pgflow.search import parse
from pgflow.searching import runs_matching
from tests import attribute_workflows as aw
from tests.acceptance.conftest import wait_until


def test_attributes_set_by_bodies_in_a_worker_land_on_the_run(start_worker):
    runs = [aw.Tagged.start(input={"order": n, "amount": 50 * n}, attributes={"source": "api"}) for n in (1, 2, 3)]
    worker = start_worker("--queues", "attrs", "--concurrency", "3")
    wait_until(
        lambda: all(WorkflowRun.objects.get(pk=run.pk).status == "finished" for run in runs),
        timeout=60,
        what="the runs to finish",
    )
    assert worker.terminate() == 0
    for n, run in enumerate(runs, start=1):
        run = WorkflowRun.objects.get(pk=run.pk)
        assert run.attributes == {
            "source": "api",
            "order.id": n,
            "customer": "acme",
            "amount": 50 * n,
            "plan": "gold",
            "vip": True,
        }
        assert list(run.events.filter(event="attributes_set").values_list("step__step_name", flat=True)) == [
            "look_up",
            "decide",
        ]
    matching = runs_matching(parse("attr.plan:gold attr.amount:>=100 attr.source:api"))
    assert set(matching.values_list("pk", flat=True)) == {runs[1].pk, runs[2].pk}
