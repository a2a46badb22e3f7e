"""Workflow classes with approval steps, for the approval tests (importable by path)."""

from __future__ import annotations

from datetime import timedelta

from django import forms

import pgflow
from pgflow import Approval, step

INBOX = "/admin/pgflow/inbox/"


def in_finance(*users):
    """Put ``users`` in the "finance" group, the approver group of most of these workflows."""
    from django.contrib.auth.models import Group  # the auth app is ready once a test runs

    group, _ = Group.objects.get_or_create(name="finance")
    for user in users:
        user.groups.add(group)
    return users


class RefundForm(forms.Form):
    amount = forms.DecimalField(min_value=0, max_digits=8, decimal_places=2)
    reason = forms.CharField(max_length=100)


def _decided(decision):
    return {
        "approved": decision.approved,
        "data": dict(decision.data),
        "by": decision.decided_by,
        "comment": decision.comment,
        "approvers": list(decision.approvers),
    }


class Refund(pgflow.Workflow):
    """One approver of the finance group, with a form; the requester may not approve."""

    @step
    def ask(self):
        return {"amount": self.input.get("amount")}

    @step(approval=Approval(form=RefundForm, groups=["finance"], requester="requested_by"))
    def review(self, decision):
        return _decided(decision)

    @step
    def done(self):
        return "done"

    def requested_by(self):
        return self.input.get("requested_by")


class TwoApprovers(pgflow.Workflow):
    """A quorum of two distinct finance approvers; the requester may approve."""

    @step(approval=Approval(groups=["finance"], quorum=2, self_approval=True))
    def review(self, decision):
        return _decided(decision)


class ByPermission(pgflow.Workflow):
    """Anyone with pgflow.change_workflowrun; a rejection cancels the run."""

    @step(approval=Approval(permission="pgflow.change_workflowrun", on_reject="cancel"))
    def review(self, decision):
        return _decided(decision)


class Expiring(pgflow.Workflow):
    """Cancelled when nobody decides within an hour."""

    @step(approval=Approval(groups=["finance"], timeout=timedelta(hours=1), on_timeout="cancel"))
    def review(self, decision):
        return _decided(decision)


class Managers(pgflow.Workflow):
    """The managers' approval: a finance approver may not decide it."""

    @step(approval=Approval(groups=["managers"]))
    def review(self, decision):
        return _decided(decision)


class Purchase(pgflow.Workflow):
    """A finance approval whose requester is who started the run (the started event's actor)."""

    @step(approval=Approval(groups=["finance"], timeout=timedelta(days=2)))
    def review(self, decision):
        return _decided(decision)
