"""The approvals inbox over HTTP: what each user is offered, the form's validation errors,
and the decision recorded with the user as its actor."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

import pgflow
from pgflow.models import Event, Signal, Step
from pgflow.testing import run_workflow
from pgflow_dashboard import insights
from pgflow_dashboard.window import WorkflowWindow
from tests import approval_workflows as aw
from tests.approval_workflows import INBOX, in_finance
from tests.dashboard_support import make_user, run_url

pytest_plugins = ["tests.dashboard_fixtures"]

pytestmark = pytest.mark.django_db


def parked(workflow, **input):
    return run_workflow(workflow.start(input=input))


def rows(response):
    return re.findall(r'data-run="(\d+)" data-step="(\w+)"', response.content.decode())


def decide_url(run, step="review"):
    return reverse("admin:pgflow_inbox_decide", args=[run.pk, step])


def test_the_inbox_url_is_under_admin_pgflow():
    assert reverse("admin:pgflow_inbox") == INBOX


def test_each_user_sees_the_approvals_they_may_decide_oldest_first(login):
    ann, rob, olga = make_user("ann"), make_user("rob"), make_user("olga")
    in_finance(ann, rob)
    boss = make_user("boss", perms=("change_workflowrun",))
    first = parked(aw.Refund, amount="5", requested_by="rob")
    second = parked(aw.TwoApprovers)
    by_permission = parked(aw.ByPermission)
    assert rows(login(ann).get(INBOX)) == [(str(first.pk), "review"), (str(second.pk), "review")]
    assert rows(login(rob).get(INBOX)) == [(str(second.pk), "review")]  # not their own request
    assert rows(login(boss).get(INBOX)) == [(str(by_permission.pk), "review")]
    empty = login(olga).get(INBOX)
    assert rows(empty) == []
    assert "No approval is waiting for you." in empty.content.decode()
    page = login(ann).get(INBOX).content.decode()
    assert "&quot;amount&quot;: &quot;5&quot;" in page  # the input summary
    assert "1 of 2" not in page and "0 of 2" in page


def test_deciding_shows_the_forms_errors_then_records_the_decision_by_the_user(login):
    ann = make_user("ann")
    in_finance(ann)
    run = parked(aw.Refund, requested_by="rob")
    client = login(ann)
    page = client.get(decide_url(run))
    assert page.status_code == 200
    assert 'name="amount"' in page.content.decode() and 'name="reason"' in page.content.decode()
    bad = client.post(decide_url(run), {"amount": "-3", "reason": "", "decision": "approve"})
    assert bad.status_code == 200  # as the admin's own forms answer
    text = bad.content.decode()
    assert "Ensure this value is greater than or equal to 0." in text
    assert "This field is required." in text
    assert not Signal.objects.filter(run=run).exists()
    done = client.post(decide_url(run), {"amount": "7.25", "reason": "late", "comment": "fine", "decision": "approve"})
    assert done.status_code == 302 and done["Location"] == INBOX
    assert rows(client.get(INBOX)) == []
    received = Event.objects.get(run=run, event="signal_received")
    assert received.actor == "user:ann"
    run = run_workflow(run)
    assert run.steps.get(step_name="review").output["data"] == {"amount": "7.25", "reason": "late"}


def test_a_user_outside_the_group_is_refused_the_decide_page(login):
    olga = make_user("olga")
    run = parked(aw.Refund, requested_by="rob")
    page = login(olga).get(decide_url(run))
    assert page.status_code == 403
    assert "olga is in none of the approver groups (finance)" in page.content.decode()
    refused = login(olga).post(decide_url(run), {"amount": "1", "reason": "x", "decision": "approve"})
    assert refused.status_code == 403
    assert not Signal.objects.filter(run=run).exists()


def test_a_rejection_needs_no_form_data_and_the_run_page_shows_who_decided(login):
    ann, bea = make_user("ann"), make_user("bea")
    in_finance(ann, bea)
    admin_user = make_user("root", superuser=True)
    run = parked(aw.TwoApprovers)
    login(ann).post(decide_url(run), {"decision": "approve", "comment": "ok by me"})
    login(bea).post(decide_url(run), {"decision": "reject", "comment": "over budget"})
    page = login(admin_user).get(run_url(run)).content.decode()
    section = page[page.index('id="pgflow-approvals-title"') :]
    assert "ann" in section and "approved" in section and "ok by me" in section
    assert "bea" in section and "rejected" in section and "over budget" in section


def test_the_insights_show_approval_waits_per_step(login):
    ann, bea = make_user("ann"), make_user("bea")
    in_finance(ann, bea)
    decided = [parked(aw.TwoApprovers) for _ in range(2)]
    parked(aw.TwoApprovers)  # still waiting
    parked(aw.Refund, requested_by="rob")  # another approval step, waiting
    for run in decided:
        pgflow.decide(run, "review", user=ann, approve=True)
        pgflow.decide(run, "review", user=bea, approve=True)
    for run, waited in zip(decided, (60, 600), strict=True):
        step = Step.objects.get(run=run, step_name="review")
        Step.objects.filter(pk=step.pk).update(waiting_since=step.scheduled_at - timedelta(seconds=waited))
    figures = insights.compute(WorkflowWindow.parse("1h", retention=None, now=timezone.now()))
    rows = {(row["workflow_class"], row["step_name"]): row for row in figures["approvals"]}
    two = rows[("tests.approval_workflows.TwoApprovers", "review")]
    assert (two["decided"], two["waiting"]) == (2, 1)
    assert two["p50_seconds"] == pytest.approx(60, abs=1)
    assert two["p95_seconds"] == pytest.approx(546, abs=1)
    assert rows[("tests.approval_workflows.Refund", "review")]["waiting"] == 1
    assert set(rows) == {
        ("tests.approval_workflows.TwoApprovers", "review"),
        ("tests.approval_workflows.Refund", "review"),
    }
    page = login(make_user("root", superuser=True)).get(reverse("admin:pgflow_insights")).content.decode()
    table = page[page.index('id="pgflow-approval-waits"') :]
    table = table[: table.index("</table>")]
    assert "TwoApprovers" in table and "<td>1m</td><td>9m 6s</td>" in table


def test_an_approval_without_a_form_records_no_data_from_the_post(login):
    # The page's post holds the CSRF token: an approval without a form of its own recorded
    # the whole post as the decision's data, shown on the run page and handed to the step.
    ann, bea = make_user("ann"), make_user("bea")
    in_finance(ann, bea)
    run = parked(aw.TwoApprovers)
    client = login(ann, csrf=True)
    client.get(decide_url(run))  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    done = client.post(decide_url(run), {"csrfmiddlewaretoken": token, "decision": "approve", "comment": "ok"})
    assert done.status_code == 302
    (vote,) = Signal.objects.filter(run=run).values_list("payload", flat=True)
    assert vote["data"] == {} and vote["comment"] == "ok"
    assert token not in login(make_user("root", superuser=True)).get(run_url(run)).content.decode()


def test_a_decision_that_cannot_be_recorded_is_answered_with_what_is_wrong(login, settings):
    ann = make_user("ann")
    in_finance(ann)
    run = parked(aw.TwoApprovers)
    client = login(ann)
    # A comment PostgreSQL cannot store: said by its field, nothing recorded (its vote was
    # recorded with the comment dropped).
    nul = client.post(decide_url(run), {"decision": "approve", "comment": "a\x00b"})
    assert nul.status_code == 400
    assert "The comment cannot be recorded" in nul.content.decode()
    assert "Null characters are not allowed." in nul.content.decode()
    # Larger than PGFLOW["MAX_INPUT_BYTES"]: a 400 naming the limit, not a server error.
    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "MAX_INPUT_BYTES": 1000}
    big = client.post(decide_url(run), {"decision": "approve", "comment": "x" * 2000})
    assert big.status_code == 400
    assert "This decision is too large to record" in big.content.decode()
    assert "MAX_INPUT_BYTES" in big.content.decode()
    assert not Signal.objects.filter(run=run).exists()
