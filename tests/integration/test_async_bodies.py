"""``async def`` bodies, conditions and waits through pgflow.testing.run_workflow (the same
runner code a worker runs), on a real PostgreSQL."""

from __future__ import annotations

import pytest

from pgflow.models import Step
from pgflow.testing import run_workflow
from tests import async_workflows as aw

pytestmark = pytest.mark.django_db


def outcomes(run):
    return list(run.steps.order_by("id").values_list("step_name", "outcome"))


def test_async_bodies_run_beside_a_sync_one_and_use_the_async_orm():
    run = run_workflow(aw.AsyncThreeSteps.start())
    assert run.status == "finished"
    outputs = dict(run.steps.values_list("step_name", "output"))
    assert outputs["one"] == {"n": 1, "status": "running"}
    assert outputs["two"] == {"n": 2}
    assert outputs["three"] == {"n": 3, "steps_seen": 3}


@pytest.mark.parametrize(
    ("verb", "status", "first"),
    [
        ("skip", "finished", ("decide", "skipped")),
        ("finish", "finished", ("decide", "finished")),
        ("pause", "paused", ("decide", "paused")),
        ("cancel", "cancelled", ("decide", "cancelled")),
    ],
)
def test_flow_control_verbs_from_an_async_body(verb, status, first):
    run = run_workflow(aw.AsyncVerbs.start(input={"verb": verb}))
    assert run.status == status
    assert outcomes(run)[0] == first


def test_reattempt_from_an_async_body():
    run = run_workflow(aw.AsyncVerbs.start(input={"verb": "reattempt"}))
    assert run.status == "finished"
    assert [s.attempt for s in Step.objects.filter(run=run, step_name="decide").order_by("id")] == [1, 2, 3]


def test_an_async_body_that_raises_goes_through_the_policies():
    run = run_workflow(aw.AsyncVerbs.start(input={"verb": "raise"}))
    assert run.status == "paused"
    step = run.steps.get()
    assert (step.status, step.error_class, step.error_message) == ("failed", "ValueError", "async body failed")


def test_async_skip_if_and_wait_are_awaited():
    run = run_workflow(aw.AsyncConditions.start(input={"skip": True, "wait": 3600}), skip_waits=False)
    assert run.status == "running"
    first, second = run.steps.order_by("id")
    assert first.outcome == "skipped"
    assert (second.status, second.step_name) == ("scheduled", "second")
    assert (second.scheduled_at - second.created_at).total_seconds() == pytest.approx(3600, abs=5)
    run = run_workflow(run)
    assert run.status == "finished"


def test_async_skip_if_false_runs_the_step():
    run = run_workflow(aw.AsyncConditions.start(input={"skip": False}))
    assert outcomes(run) == [("first", "completed"), ("second", "completed")]


def test_an_async_cancel_if_cancels_the_run():
    run = run_workflow(aw.AsyncConditions.start(input={"call_off": True}))
    assert run.status == "cancelled"


def test_an_async_fan_out_body_opens_its_batch():
    run = run_workflow(aw.AsyncFan.start(input={"members": 3}))
    assert run.status == "finished"
    assert run.steps.get(step_name="notify").batch.total == 3
