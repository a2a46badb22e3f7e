"""Who started a run is its requester: Workflow.start(actor=user) and the admin's start
action record the user in the ``started`` event, so ``self_approval=False`` refuses them."""

from __future__ import annotations

import pytest
from django.contrib import admin

import pgflow
from example_project.shop.models import Order
from pgflow.testing import run_workflow
from pgflow_dashboard.admin import start_workflow_action
from tests import approval_workflows as aw
from tests.approval_workflows import in_finance
from tests.dashboard_support import make_user
from tests.integration.test_runs_on_models_admin import act, order, shop_user

pytestmark = pytest.mark.django_db(transaction=True)


def test_start_with_an_actor_records_the_user_and_they_may_not_approve_their_own_run():
    ann, bea = make_user("ann"), make_user("bea")
    in_finance(ann, bea)
    run = run_workflow(aw.Purchase.start(input={"x": 1}, actor=ann))
    assert run.events.get(event="started").actor == "user:ann"
    with pytest.raises(pgflow.NotAllowedToDecide, match="ann requested this run"):
        pgflow.decide(run, "review", user=ann, approve=True)
    assert pgflow.decide(run, "review", user=bea, approve=True).settled


def test_a_start_without_an_actor_is_the_systems():
    run = aw.Purchase.start()
    assert run.events.get(event="started").actor == "system"


def test_a_run_started_from_the_admin_action_cannot_be_approved_by_who_started_it():
    action = start_workflow_action(aw.Purchase, input={})
    model_admin = admin.site._registry[Order]
    model_admin.actions = [*model_admin.actions, action]
    try:
        ada = order()
        client = shop_user("operator", "view_order", "change_order", runs=("view_workflowrun", "change_workflowrun"))
        operator = client.session["_auth_user_id"]
        act(client, "start_purchase", [ada], confirm="yes")
        run = run_workflow(aw.Purchase.runs().get())
        assert run.events.get(event="started").actor == "user:operator"
        from django.contrib.auth.models import User

        user = User.objects.get(pk=operator)
        in_finance(user)
        with pytest.raises(pgflow.NotAllowedToDecide, match="operator requested this run"):
            pgflow.decide(run, "review", user=user, approve=True)
        inbox = client.get("/admin/pgflow/inbox/")
        assert f"/admin/pgflow/inbox/{run.pk}/review/" not in inbox.content.decode()
    finally:
        model_admin.actions = [a for a in model_admin.actions if a is not action]


def test_a_rerun_by_an_agent_for_a_user_makes_that_user_its_requester():
    ann, bea = make_user("ann"), make_user("bea")
    in_finance(ann, bea)
    original = run_workflow(aw.Purchase.start(actor=bea))
    original.cancel(actor=bea)
    # What the MCP server's rerun_from records: the agent, on the token's user's behalf.
    rerun = run_workflow(original.rerun_from("review", actor="agent:claude for user:ann"))
    assert rerun.events.get(event="started").actor == "agent:claude for user:ann"
    with pytest.raises(pgflow.NotAllowedToDecide, match="ann requested this run"):
        pgflow.decide(rerun, "review", user=ann, approve=True)
    assert pgflow.decide(rerun, "review", user=bea, approve=True).settled


def test_a_rerun_with_a_reason_keeps_the_operator_its_requester():
    from pgflow.deciding import waiting_for
    from pgflow_dashboard.confirm import actor

    ann, bea = make_user("ann"), make_user("bea")
    in_finance(ann, bea)
    original = run_workflow(aw.Purchase.start(actor=bea))
    original.cancel(actor=bea)
    # What the dashboard's re-run records when the operator typed a reason on its confirmation.
    rerun = run_workflow(original.rerun_from("review", actor=actor(ann, "vendor fixed the feed")))
    assert rerun.events.get(event="started").actor == "user:ann (reason: vendor fixed the feed)"
    with pytest.raises(pgflow.NotAllowedToDecide, match="ann requested this run"):
        pgflow.decide(rerun, "review", user=ann, approve=True)
    assert [w.run.pk for w in waiting_for(ann)] == []
    assert [w.run.pk for w in waiting_for(bea)] == [rerun.pk]
    assert pgflow.decide(rerun, "review", user=bea, approve=True).settled
