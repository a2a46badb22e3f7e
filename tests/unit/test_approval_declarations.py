"""Declaring an approval step: each mistake is a DefinitionError naming what is accepted."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django import forms

import pgflow
from pgflow import Approval, DefinitionError, step
from pgflow.approvals import Decision, refusal, settles


class Form(forms.Form):
    note = forms.CharField()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"form": dict}, "form must be a django.forms.Form subclass"),
        ({"form": Form()}, "form must be a django.forms.Form subclass"),
        ({"groups": "finance"}, "groups must be a list of group names"),
        ({"groups": ["finance", ""]}, "groups must be a list of non-empty group names"),
        ({"permission": "change_run"}, 'permission must be "app_label.codename"'),
        ({"quorum": 0}, "quorum must be a whole number of distinct approvers, 1 or more"),
        ({"quorum": True}, "quorum must be a whole number"),
        ({"self_approval": "no"}, "self_approval must be True or False"),
        ({"timeout": -5}, "timeout"),
        ({"timeout": 60, "on_timeout": "retry"}, "on_timeout must be one of 'pause', 'cancel', 'skip'"),
        ({"on_timeout": "pause"}, "on_timeout only applies with a timeout"),
        ({"on_reject": "fail"}, "on_reject must be None (the body decides), 'cancel' or 'skip'"),
        ({"on_reject": "pause"}, "on_reject must be None (the body decides), 'cancel' or 'skip'"),
        ({"requester": 3}, "requester must be a method name or a callable"),
    ],
)
def test_a_wrong_option_names_what_is_accepted(options, message):
    with pytest.raises(DefinitionError, match="approval: ") as raised:
        Approval(**options)
    assert message in str(raised.value)


def test_an_approval_is_a_signal_wait_on_its_reserved_name():
    class Expense(pgflow.Workflow):
        @step(approval=Approval(form=Form, groups=["finance"], timeout=timedelta(days=2), on_timeout="cancel"))
        def review(self, decision):
            return decision.approved

    definition = Expense.steps().get("review")
    assert definition.wait_for == "approval:review"
    assert definition.wait_timeout == 2 * 86400
    assert definition.on_timeout == "cancel"
    assert definition.approval.groups == ("finance",)


def test_approval_must_be_an_approval():
    with pytest.raises(DefinitionError, match=r"step 'review': approval must be a pgflow.Approval\(...\), got"):

        class Wrong(pgflow.Workflow):
            @step(approval={"groups": ["finance"]})
            def review(self, decision): ...


def test_approval_sets_its_own_wait():
    with pytest.raises(DefinitionError, match="cannot be combined with wait_for; give Approval"):

        class Wrong(pgflow.Workflow):
            @step(approval=Approval(), wait_for="go")
            def review(self, decision): ...


def test_a_fan_out_takes_no_approval():
    with pytest.raises(DefinitionError, match="a fan_out cannot take approval"):

        class Wrong(pgflow.Workflow):
            @pgflow.fan_out(approval=Approval())
            def review(self, batch): ...


def test_the_body_takes_the_decision():
    with pytest.raises(DefinitionError, match=r"a step with approval takes \(self, decision\), got review\(self\)"):

        class Wrong(pgflow.Workflow):
            @step(approval=Approval())
            def review(self): ...


def test_a_rejection_settles_and_approvals_count_to_the_quorum():
    yes, no = {"approved": True}, {"approved": False}
    assert settles([], no, 3)
    assert not settles([yes], yes, 3)
    assert settles([yes, yes], yes, 3)


def test_the_decision_is_the_last_vote_with_every_vote():
    payload = {
        "approved": True,
        "decided_by": {"id": 2, "username": "bea"},
        "data": {"amount": "10.00"},
        "comment": "ok",
        "votes": [
            {"approved": True, "decided_by": {"id": 1, "username": "ann"}, "data": {}, "comment": ""},
            {"approved": True, "decided_by": {"id": 2, "username": "bea"}, "data": {"amount": "10.00"}},
        ],
    }
    decision = Decision.of(payload)
    assert (decision.approved, decision.decided_by, decision.data, decision.comment) == (
        True,
        "bea",
        {"amount": "10.00"},
        "ok",
    )
    assert decision.approvers == ("ann", "bea")


def test_who_may_decide():
    approval = Approval(groups=["finance"], permission="app.approve")
    kwargs = {"active": True, "username": "ann", "user_groups": frozenset({"finance"}), "has_permission": True}
    assert refusal(approval, **kwargs, requester=None) is None
    assert "in none of the approver groups (finance)" in refusal(
        approval, **{**kwargs, "user_groups": frozenset({"sales"})}, requester=None
    )
    assert "lacks the permission app.approve" in refusal(
        approval, **{**kwargs, "has_permission": False}, requester=None
    )
    assert "refuses self-approval" in refusal(approval, **kwargs, requester="ann")
    assert refusal(Approval(self_approval=True), **kwargs, requester="ann") is None
    assert "not an active" in refusal(approval, **{**kwargs, "active": False}, requester=None)


def test_the_run_pages_sentence_says_an_approval_waits_not_a_signal():
    from datetime import UTC, datetime, timedelta

    from pgflow_dashboard.why import doing, why

    now = datetime(2025, 3, 4, 10, 16, tzinfo=UTC)
    step = {
        "step_name": "review",
        "queue": "q",
        "status": "waiting",
        "wait_for": "approval:review",
        "on_timeout": "cancel",
        "created_at": now - timedelta(minutes=20),
        "waiting_since": now - timedelta(minutes=14),
        "deadline_at": None,
    }
    facts = {"status": "running", "open_step": step, "live_queues": {}}
    assert why(facts, now=now) == (
        "step review waiting for approval since 10:02, with no deadline (an approver decides it in the inbox, "
        "/admin/pgflow/inbox/)"
    )
    assert doing(facts, now=now) == ("waiting", "waiting for approval")
    step["deadline_at"] = now + timedelta(days=1)
    assert why(facts, now=now).endswith("times out at 10:16 on Wednesday (then: cancel)")


def test_an_approval_nobody_gives_in_time_cancels_its_run_by_default():
    # ../shared/API.md: Approval(..., timeout=None, on_timeout="cancel").
    class Refund(pgflow.Workflow):
        @step(approval=Approval(timeout=timedelta(days=2)))
        def refund(self, decision): ...

    definition = Refund.steps().get("refund")
    assert (definition.wait_timeout, definition.on_timeout) == (2 * 86400, "cancel")
