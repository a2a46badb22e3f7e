"""list_approvals and decide_approval through the SDK's own client over stdio (a real
``manage.py pgflow_mcp`` process): what waits for the token's user, deciding refused unless
PGFLOW["MCP_MAY_DECIDE"] allows it, then only as that user, with the agent in the audit trail."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.contrib.auth.models import Group
from mcp import Client

from pgflow.testing import run_workflow
from tests import approval_workflows as aw
from tests.acceptance.test_mcp import AGENT, answer, error, stdio, users  # noqa: F401 - users: the fixture


@pytest.fixture
def approvers(users):  # noqa: F811 - the fixture imported above
    finance = Group.objects.create(name="finance")
    users["nobody"].groups.add(finance)  # no model permission: the approval's group is enough
    return users


def test_list_approvals_is_the_users_own_inbox_and_deciding_is_off_by_default(approvers):
    mine = run_workflow(aw.TwoApprovers.start(input={"order": 7}))
    run_workflow(aw.ByPermission.start())  # needs change_workflowrun: not for "nobody"

    async def session(client: Client) -> dict[str, Any]:
        return {
            "list": await client.call_tool("list_approvals", {}),
            "decide": await client.call_tool(
                "decide_approval", {"run_id": mine.pk, "step_name": "review", "approve": True, "dry_run": False}
            ),
        }

    got = stdio("nobody", session)
    listed = answer(got["list"])
    assert listed["user"] == "nobody"
    assert [(row["run_id"], row["step_name"], row["quorum"]) for row in listed["approvals"]] == [(mine.pk, "review", 2)]
    assert listed["approvals"][0]["input"] == {"order": 7}
    assert "PGFLOW['MCP_MAY_DECIDE'] is False" in error(got["decide"])
    assert not mine.events.filter(event="signal_received").exists()
    assert set(answer(stdio("viewer", lambda client: client.call_tool("list_approvals", {})))["approvals"]) == set()


def test_with_the_setting_an_agent_decides_as_its_user_audited(approvers, monkeypatch):
    monkeypatch.setitem(os.environ, "PGFLOW_MCP_MAY_DECIDE", "true")
    run = run_workflow(aw.TwoApprovers.start())
    refused = run_workflow(aw.ByPermission.start())

    async def session(client: Client) -> dict[str, Any]:
        return {
            "dry": await client.call_tool(
                "decide_approval", {"run_id": run.pk, "step_name": "review", "approve": True}
            ),
            "act": await client.call_tool(
                "decide_approval",
                {"run_id": run.pk, "step_name": "review", "approve": True, "comment": "ok", "dry_run": False},
            ),
            "twice": await client.call_tool(
                "decide_approval", {"run_id": run.pk, "step_name": "review", "approve": True, "dry_run": False}
            ),
            "not_allowed": await client.call_tool(
                "decide_approval", {"run_id": refused.pk, "step_name": "review", "approve": True, "dry_run": False}
            ),
        }

    got = stdio("nobody", session)
    assert answer(got["dry"]) == {
        "dry_run": True,
        "would": f"approve step 'review' of run {run.pk} as nobody",
        "refused": None,
    }
    acted = answer(got["act"])
    assert (acted["as"], acted["settled"], acted["approvals"], acted["quorum"]) == ("nobody", False, 1, 2)
    assert "nobody has already decided step 'review'" in error(got["twice"])
    assert "nobody lacks the permission pgflow.change_workflowrun" in error(got["not_allowed"])
    received = run.events.get(event="signal_received")
    assert received.actor == f"agent:{AGENT} for user:nobody"
    assert received.details["name"] == "approval:review:vote"
