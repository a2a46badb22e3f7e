"""The admin's navigation links to the approvals inbox, with how many wait for the user:
in the pgflow block for who may view runs, and in a block of its own for an approver who
sees no pgflow model."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pgflow.testing import run_workflow
from tests import approval_workflows as aw
from tests import workflows as wf
from tests.approval_workflows import INBOX, in_finance
from tests.dashboard_support import make_user

pytest_plugins = ["tests.dashboard_fixtures"]

pytestmark = pytest.mark.django_db


def inbox_links(page) -> list[str]:
    """The text of each link to the inbox in the page's navigation and app list."""
    text = page.content.decode()
    return [
        " ".join(re.sub(r"<[^>]+>", "", label).split())
        for label in re.findall(rf'<a href="{INBOX}"[^>]*>(.*?)</a>', text, re.S)
    ]


def test_an_approver_without_pgflow_permissions_sees_the_inbox_link_with_its_count(login):
    ann = make_user("ann")
    in_finance(ann)
    run_workflow(aw.TwoApprovers.start())
    run_workflow(aw.Purchase.start())
    client = login(ann)
    index = client.get("/admin/")
    assert index.status_code == 200
    assert "Approvals inbox (2)" in inbox_links(index)
    sidebar = client.get(INBOX)  # any admin page's navigation sidebar
    assert "Approvals inbox (2)" in inbox_links(sidebar)


def test_a_viewer_of_runs_sees_the_link_only_when_they_could_decide_an_approval(login):
    viewer = make_user("viewer", perms=("view_workflowrun",))
    run_workflow(aw.Purchase.start())  # finance's, not the viewer's
    assert inbox_links(login(viewer).get("/admin/")) == []  # in no approver group: no inbox
    in_finance(viewer)  # now the Purchase's approval is theirs to decide
    page = login(viewer).get("/admin/")
    assert inbox_links(page) == ["Approvals inbox (1)", "View"]  # the row's name and its View link
    text = page.content.decode()
    block = text[text.index('class="app-pgflow') :]
    assert block.index(INBOX) < block.index("</table>")  # in the pgflow block, with the runs


def test_the_count_costs_no_query_per_waiting_step_that_is_no_approval(login):
    ann = make_user("ann")
    in_finance(ann)
    client = login(ann)
    run_workflow(aw.Purchase.start())
    client.get("/admin/")
    with CaptureQueriesContext(connection) as before:
        client.get("/admin/")
    for _ in range(5):
        run_workflow(wf.WaitsForPayment.start())  # signal waits, no approvals
    with CaptureQueriesContext(connection) as after:
        assert "Approvals inbox (1)" in inbox_links(client.get("/admin/"))
    assert len(after) == len(before)


def test_the_count_costs_no_query_per_waiting_approval(login):
    """The navigation counts on every admin page: its queries do not grow with the approvals
    waiting, neither those the user may decide nor those of a group they are not in."""
    ann = make_user("ann")
    in_finance(ann)
    client = login(ann)
    run_workflow(aw.Purchase.start())
    run_workflow(aw.TwoApprovers.start())
    client.get("/admin/")
    with CaptureQueriesContext(connection) as before:
        assert "Approvals inbox (2)" in inbox_links(client.get("/admin/"))
    for _ in range(4):
        run_workflow(aw.Purchase.start())  # the requester read per run before
        run_workflow(aw.TwoApprovers.start())  # and the open votes
        run_workflow(aw.Managers.start())  # the managers' approval: not ann's
    with CaptureQueriesContext(connection) as after:
        assert "Approvals inbox (10)" in inbox_links(client.get("/admin/"))
    assert len(after) == len(before), [q["sql"] for q in after.captured_queries]


def test_a_workflow_defined_after_the_first_page_shows_the_inbox(login):
    """The registry's approvals are read once per process, but a class made later (as a test
    or a reloaded module does) or dropped from the registry counts at the next page."""
    from django.contrib.auth.models import Group

    from pgflow import Approval, Workflow, registry, step

    ann = make_user("ann")
    ann.groups.add(Group.objects.create(name="latecomers"))
    client = login(ann)
    assert inbox_links(client.get("/admin/")) == []

    class LateApproval(Workflow):
        @step(approval=Approval(groups=["latecomers"]))
        def review(self, decision):
            return decision.approved

    try:
        assert "Approvals inbox" in inbox_links(client.get("/admin/"))  # nothing waits yet
        run_workflow(LateApproval.start())
        assert "Approvals inbox (1)" in inbox_links(client.get("/admin/"))
    finally:
        registry._workflows.pop(LateApproval.workflow_path(), None)
    assert inbox_links(client.get("/admin/")) == []  # no registered approval is ann's now
