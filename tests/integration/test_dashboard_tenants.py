"""The dashboard and MCP by tenant: the run list's tenant column and filter, and
PGFLOW["TENANT_VISIBLE"]: a user restricted to tenant A never sees tenant B's runs, in the
run list, on a run's page and endpoints, in a subject's runs inline, or through MCP tools."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Permission
from django.db import connections
from django.urls import reverse
from mcp import Client

from example_project.shop.models import Order
from pgflow.models import WorkflowRun
from pgflow.testing import run_workflow
from pgflow_dashboard.mcp.server import Principal, build
from tests import approval_workflows as aw
from tests import tenant_workflows as tw
from tests.dashboard_support import changelist_url, control_url, insights_url, make_user, run_url, timeline_url

pytestmark = pytest.mark.django_db(transaction=True)
pytest_plugins = ["tests.dashboard_fixtures"]  # the login fixture

PERMS = ("view_workflowrun", "change_workflowrun")


@pytest.fixture
def runs(settings) -> dict[str | None, list[WorkflowRun]]:
    settings.PGFLOW = {
        **settings.PGFLOW,
        "TENANT": "tests.tenant_workflows.current_tenant",
        "TENANT_VISIBLE": "tests.tenant_workflows.visible_tenants",
    }
    started: dict[str | None, list[WorkflowRun]] = {}
    for tenant in ("acme", "globex", None):
        with tw.as_tenant(tenant):
            started[tenant] = [tw.Seen.start(), tw.Seen.start()]
    return started


def listed(response: Any) -> set[int]:
    return {run.pk for run in response.context["cl"].result_list}


def ids(runs: list[WorkflowRun]) -> set[int]:
    return {run.pk for run in runs}


def test_a_user_of_every_tenant_sees_a_tenant_column_and_filters_by_tenant(login, runs):
    client = login(make_user("ops", perms=PERMS))
    page = client.get(changelist_url())
    assert listed(page) == ids(runs["acme"] + runs["globex"] + runs[None])
    html = page.content.decode()
    assert re.search(r'<th scope="col" class="sortable column-tenant_label">.*?Tenant</a>', html, re.S)
    assert html.count('<td class="field-tenant_label">acme</td>') == 2
    assert re.search(r'href="\?tenant=acme"[^>]*>acme</a>', html) and re.search(r'href="\?tenant=globex"', html)
    assert listed(client.get(changelist_url() + "?tenant=globex")) == ids(runs["globex"])
    assert client.get(run_url(runs["globex"][0])).status_code == 200


@pytest.mark.parametrize(("tenant", "other"), [("acme", "globex"), ("globex", "acme")])
def test_a_user_restricted_to_a_tenant_never_sees_anothers_runs(login, runs, tenant, other):
    client = login(make_user(f"{tenant}-ops", perms=PERMS))
    page = client.get(changelist_url())
    assert listed(page) == ids(runs[tenant])  # neither the other tenant's nor those without one
    html = page.content.decode()
    assert f'href="?tenant={tenant}"' in html and f"?tenant={other}" not in html
    assert listed(client.get(changelist_url() + f"?tenant={other}")) == set()
    mine, theirs = runs[tenant][0], runs[other][0]
    assert f'<dd id="pgflow-tenant"><code>{tenant}</code></dd>' in client.get(run_url(mine)).content.decode()
    assert client.get(timeline_url(mine)).status_code == 200
    assert client.get(run_url(theirs)).status_code == 404
    assert client.get(run_url(runs[None][0])).status_code == 404
    assert client.get(timeline_url(theirs)).status_code == 404
    assert client.post(control_url(theirs), {"action": "pause"}).status_code == 404
    assert WorkflowRun.objects.get(pk=theirs.pk).status == "running"
    # A bulk action posted, confirmed, with the other tenant's id beside the user's own pauses
    # only the user's.
    client.post(changelist_url(), {"action": "pause_runs", "_selected_action": [mine.pk, theirs.pk], "confirm": "yes"})
    assert WorkflowRun.objects.get(pk=mine.pk).status == "paused", "the action did not run: nothing was checked"
    assert WorkflowRun.objects.get(pk=theirs.pk).status == "running"
    # The insights count the user's tenants' runs only (test_dashboard_insights_tenant); another's: refused.
    assert client.get(insights_url(as_json=True)).json()["tenants"] == [tenant]
    assert client.get(insights_url(as_json=True) + f"?tenant={other}").status_code == 403


def call_tools(user, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def session() -> list[Any]:
        async with Client(build(Principal(user_id=user.pk))) as client:
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
        await sync_to_async(connections.close_all, thread_sensitive=True)()  # the tools' thread's
        return results

    return anyio.run(session)


def text(result: Any) -> str:
    return result.content[0].text


def test_mcp_tools_see_only_the_tokens_users_tenants(runs):
    restricted, everyone = make_user("acme-agent", perms=PERMS), make_user("agent", perms=PERMS)
    theirs = runs["globex"][0]
    found, got, explained, paused, insights = call_tools(
        restricted,
        [
            ("search_runs", {}),
            ("get_run", {"run_id": theirs.pk}),
            ("explain_run", {"run_id": theirs.pk}),
            ("pause_run", {"run_id": theirs.pk, "dry_run": False}),
            ("insights", {}),
        ],
    )
    assert {row["run_id"] for row in json.loads(text(found))["runs"]} == ids(runs["acme"])
    for refused in (got, explained, paused):
        assert refused.is_error and f"no workflow run with id {theirs.pk}" in text(refused)
    assert WorkflowRun.objects.get(pk=theirs.pk).status == "running"
    assert json.loads(text(insights))["tenants"] == ["acme"]  # the user's tenants' insights only
    (everything, mine) = call_tools(everyone, [("search_runs", {}), ("get_run", {"run_id": theirs.pk})])
    assert {row["run_id"] for row in json.loads(text(everything))["runs"]} == ids(
        runs["acme"] + runs["globex"] + runs[None]
    )
    assert not mine.is_error


def test_a_subjects_runs_inline_lists_only_the_users_tenants(login, runs):
    order = Order.objects.create(customer="ada", email="ada@example.com", total_cents=1200, vendors=[1])
    started = {}
    for tenant in ("acme", "globex"):
        with tw.as_tenant(tenant):
            started[tenant] = tw.Seen.start(subject=order)
    user = make_user("acme-clerk", perms=PERMS)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="shop", codename="view_order"))
    html = login(user).get(reverse("admin:shop_order_change", args=[order.pk])).content.decode()
    shown = {int(pk) for pk in re.findall(r'<tr class="pgflow-run-row" data-run="(\d+)">', html)}
    assert shown == {started["acme"].pk}


def test_approvals_of_another_tenant_are_neither_listed_nor_decided(login, runs, settings):
    settings.PGFLOW = {**settings.PGFLOW, "MCP_MAY_DECIDE": True}
    waiting = {}
    for tenant in ("acme", "globex"):
        with tw.as_tenant(tenant):
            waiting[tenant] = run_workflow(aw.ByPermission.start())
    clerk = make_user("acme-approver", perms=PERMS)
    client = login(clerk)
    inbox = client.get(reverse("admin:pgflow_inbox")).content.decode()
    assert re.findall(r'data-run="(\d+)"', inbox) == [str(waiting["acme"].pk)]
    theirs = waiting["globex"]
    assert client.get(reverse("admin:pgflow_inbox_decide", args=[theirs.pk, "review"])).status_code == 404
    listed, decided = call_tools(
        clerk,
        [
            ("list_approvals", {}),
            ("decide_approval", {"run_id": theirs.pk, "step_name": "review", "approve": True, "dry_run": False}),
        ],
    )
    assert [row["run_id"] for row in json.loads(text(listed))["approvals"]] == [waiting["acme"].pk]
    assert decided.is_error and f"no run {theirs.pk}" in text(decided)
    assert WorkflowRun.objects.get(pk=theirs.pk).status == "running"
    everyone = login(make_user("approver", perms=PERMS)).get(reverse("admin:pgflow_inbox")).content.decode()
    assert set(re.findall(r'data-run="(\d+)"', everyone)) == {str(waiting["acme"].pk), str(theirs.pk)}


def test_list_approvals_limits_the_approvals_of_the_users_tenants(runs, monkeypatch):
    # The limit applies to what the user may see: other tenants' older approvals do not fill it.
    from pgflow_dashboard.mcp import approvals

    monkeypatch.setattr(approvals, "LIMIT", 2)
    waiting = {}
    for tenant in ("globex", "acme"):  # globex's wait first: the older
        with tw.as_tenant(tenant):
            waiting[tenant] = [run_workflow(aw.ByPermission.start()) for _ in range(2)]
    (listed,) = call_tools(make_user("acme-approver", perms=PERMS), [("list_approvals", {})])
    assert [row["run_id"] for row in json.loads(text(listed))["approvals"]] == [run.pk for run in waiting["acme"]]
