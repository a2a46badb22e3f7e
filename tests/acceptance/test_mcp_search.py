"""search_runs(query=...) through the SDK's own client over stdio (a real ``manage.py
pgflow_mcp`` process): the run list's search language, attributes included, and a query
that cannot be read refused naming what is accepted."""

from __future__ import annotations

from typing import Any

from mcp import Client

from pgflow.testing import run_workflow
from tests import attribute_workflows as aw
from tests import workflows as wf
from tests.acceptance.test_mcp import answer, error, stdio, users  # noqa: F401 - users: the fixture


def test_search_runs_reads_the_search_language(users):  # noqa: F811 - the fixture imported above
    gold = aw.TwoSteps.start(attributes={"plan": "gold", "amount": 120})
    aw.TwoSteps.start(attributes={"plan": "silver", "amount": 80})
    paused = run_workflow(wf.Failing.start(key="order-7"))

    async def session(client: Client) -> dict[str, Any]:
        return {
            "gold": await client.call_tool("search_runs", {"query": "attr.plan:gold"}),
            "over": await client.call_tool("search_runs", {"query": "attr.amount:>100 class:TwoSteps"}),
            "paused": await client.call_tool("search_runs", {"query": "status:paused key:order-7"}),
            "with_filters": await client.call_tool("search_runs", {"query": "attr.plan:gold", "status": "paused"}),
            "bad": await client.call_tool("search_runs", {"query": "status:sleeping"}),
            "unknown": await client.call_tool("search_runs", {"query": "colour:red"}),
        }

    got = stdio("viewer", session)
    rows = answer(got["gold"])["runs"]
    assert [row["run_id"] for row in rows] == [gold.pk]
    assert rows[0]["attributes"] == {"plan": "gold", "amount": 120}
    assert [row["run_id"] for row in answer(got["over"])["runs"]] == [gold.pk]
    assert [row["run_id"] for row in answer(got["paused"])["runs"]] == [paused.pk]
    assert answer(got["with_filters"])["runs"] == []  # the query and the filters, all of them
    bad = error(got["bad"])
    assert "query: 'status:sleeping': status must be one of running, paused, finished, cancelled" in bad
    assert "accepted: words and qualifiers" in bad and "attr.<name>:<value>" in bad
    unknown = error(got["unknown"])
    assert "unknown qualifier 'colour'" in unknown and "since:<30m|2h|2d|1w>" in unknown
