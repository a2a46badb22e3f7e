"""Approvals decided from code on a real PostgreSQL: quorum, rejection, self-approval, twice,
too late, permissions, an early decision kept, and the timeout through the sweep."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group

import pgflow
from pgflow.models import Alert, Signal
from pgflow.observability import alerts
from pgflow.runtime import sweep
from pgflow.testing import run_workflow
from tests import approval_workflows as aw
from tests.dashboard_support import make_user


def finance(*names):
    group, _ = Group.objects.get_or_create(name="finance")
    users = [make_user(name) for name in names]
    for user in users:
        user.groups.add(group)
    return users


def parked(workflow, **input):
    run = run_workflow(workflow.start(input=input))
    assert run.steps.get(step_name="review").status == "waiting"
    return run


@pytest.mark.django_db
def test_an_approval_runs_the_body_with_the_cleaned_form_data_and_the_decider():
    (ann,) = finance("ann")
    run = parked(aw.Refund, amount="12.50", requested_by="rob")
    recorded = pgflow.decide(
        run, "review", user=ann, approve=True, data={"amount": "12.5", "reason": "broken"}, comment="ok"
    )
    assert recorded.settled
    run = run_workflow(run)
    assert run.status == "finished"
    assert run.steps.get(step_name="review").output == {
        "approved": True,
        "data": {"amount": "12.5", "reason": "broken"},  # a Decimal, as JSON
        "by": "ann",
        "comment": "ok",
        "approvers": ["ann"],
    }
    received = run.events.get(event="signal_received")
    assert received.actor == "user:ann"
    assert received.details["name"] == "approval:review"


@pytest.mark.django_db
def test_the_form_refuses_invalid_data_with_its_errors_and_nothing_is_stored():
    (ann,) = finance("ann")
    run = parked(aw.Refund, requested_by="rob")
    with pytest.raises(
        pgflow.InvalidDecision, match="amount: Ensure this value is greater than or equal to 0"
    ) as raised:
        pgflow.decide(run, "review", user=ann, approve=True, data={"amount": "-1", "reason": "x"})
    assert set(raised.value.errors) == {"amount"}
    assert not Signal.objects.filter(run=run).exists()
    assert run.steps.get(step_name="review").status == "waiting"


@pytest.mark.django_db
def test_a_quorum_needs_distinct_approvers_and_the_same_user_twice_is_refused():
    ann, bea = finance("ann", "bea")
    run = parked(aw.TwoApprovers)
    first = pgflow.decide(run, "review", user=ann, approve=True)
    assert (first.settled, first.approvals, first.quorum) == (False, 1, 2)
    with pytest.raises(pgflow.AlreadyDecided, match="ann has already decided step 'review'"):
        pgflow.decide(run, "review", user=ann, approve=True)
    assert run_workflow(run).steps.get(step_name="review").status == "waiting"  # one vote wakes nothing
    second = pgflow.decide(run, "review", user=bea, approve=True, comment="fine")
    assert (second.settled, second.approvals, second.quorum) == (True, 2, 2)
    run = run_workflow(run)
    assert run.status == "finished"
    output = run.steps.get(step_name="review").output
    assert (output["approved"], output["by"], output["approvers"]) == (True, "bea", ["ann", "bea"])
    with pytest.raises(pgflow.AlreadyDecided):
        pgflow.decide(run, "review", user=bea, approve=True)


@pytest.mark.django_db
def test_one_rejection_decides_and_the_body_sees_it():
    ann, bea = finance("ann", "bea")
    run = parked(aw.TwoApprovers)
    pgflow.decide(run, "review", user=ann, approve=True)
    assert pgflow.decide(run, "review", user=bea, approve=False, comment="no budget").settled
    run = run_workflow(run)
    output = run.steps.get(step_name="review").output
    assert (output["approved"], output["by"], output["comment"]) == (False, "bea", "no budget")


@pytest.mark.django_db
def test_a_rejection_with_on_reject_cancels_the_run():
    boss = make_user("boss", perms=("change_workflowrun",))
    run = parked(aw.ByPermission)
    pgflow.decide(run, "review", user=boss, approve=False)
    run = run_workflow(run)
    assert run.status == "cancelled"


@pytest.mark.django_db
def test_who_may_not_decide_is_told_why():
    (ann,) = finance("ann")
    outsider = make_user("olga")
    run = parked(aw.Refund, requested_by="ann")
    with pytest.raises(pgflow.NotAllowedToDecide, match=r"ann requested this run.*self_approval=False"):
        pgflow.decide(run, "review", user=ann, approve=True, data={"amount": "1", "reason": "x"})
    with pytest.raises(pgflow.NotAllowedToDecide, match=r"olga is in none of the approver groups \(finance\)"):
        pgflow.decide(run, "review", user=outsider, approve=False)
    with pytest.raises(pgflow.NotAllowedToDecide, match="olga lacks the permission pgflow.change_workflowrun"):
        pgflow.decide(parked(aw.ByPermission), "review", user=outsider, approve=True)
    assert not Signal.objects.exists()
    with pytest.raises(pgflow.ApprovalError, match="step 'ask' is not an approval \\(its approval steps: review\\)"):
        pgflow.decide(run, "ask", user=ann, approve=True)


@pytest.mark.django_db
def test_a_decision_made_before_the_step_parks_is_kept():
    ann, bea = finance("ann", "bea")
    run = aw.TwoApprovers.start()
    pgflow.decide(run, "review", user=ann, approve=True)
    pgflow.decide(run, "review", user=bea, approve=True)
    run = run_workflow(run)
    assert run.status == "finished"
    assert run.steps.get(step_name="review").waiting_since is None


@pytest.mark.django_db
def test_too_late_once_the_step_has_run_or_the_run_ended():
    ann, bea = finance("ann", "bea")
    run = parked(aw.Refund, requested_by="rob")
    pgflow.decide(run, "review", user=ann, approve=True, data={"amount": "1", "reason": "x"})
    with pytest.raises(pgflow.ApprovalClosed, match="step 'review' is already decided"):
        pgflow.decide(run, "review", user=bea, approve=False)
    run = run_workflow(run)
    with pytest.raises(pgflow.ApprovalClosed, match="already decided"):
        pgflow.decide(run, "review", user=bea, approve=False)
    cancelled = parked(aw.TwoApprovers)
    cancelled.cancel()
    with pytest.raises(pgflow.ApprovalClosed, match="is cancelled"):
        pgflow.decide(cancelled, "review", user=ann, approve=True)


@pytest.mark.django_db
def test_nobody_deciding_in_time_applies_on_timeout_through_the_sweep():
    (ann,) = finance("ann")
    run = parked(aw.Expiring)
    waiting = run.steps.get(step_name="review")
    assert waiting.deadline_at == waiting.waiting_since + timedelta(hours=1)
    assert sweep.run(at=waiting.deadline_at - timedelta(seconds=1))["wait_timeouts"] == 0
    assert sweep.run(at=waiting.deadline_at + timedelta(seconds=1))["wait_timeouts"] == 1
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert run.events.get(event="timed_out").details == {"signal": "approval:review", "action": "cancel"}
    with pytest.raises(pgflow.ApprovalClosed):
        pgflow.decide(run, "review", user=ann, approve=True)


@pytest.mark.django_db
def test_an_alert_rule_reminds_of_approvals_waiting_too_long(settings):
    settings.PGFLOW = {
        **settings.PGFLOW,
        "ALERTS": [
            {
                "name": "remind",
                "kind": "approvals_waiting",
                "after": timedelta(hours=4),
                "targets": [{"callable": "tests.integration.test_alerts.record"}],
            }
        ],
    }
    run = parked(aw.TwoApprovers)
    run_workflow(aw.TwoApprovers.start(input={"x": 1}))
    waiting = run.steps.get(step_name="review")

    def check(at):
        alerts.sync_declared(at)
        return alerts.evaluate(at)

    assert check(waiting.waiting_since + timedelta(hours=3)) == 0
    assert check(waiting.waiting_since + timedelta(hours=5)) == 1
    message = Alert.objects.get(rule__name="remind").message
    assert message.startswith("2 approvals of every workflow waiting for a decision for more than 14400s")
    assert f"review of run {run.pk}" in message
