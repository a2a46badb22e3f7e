"""The insights by tenant: ``?tenant=`` on the page and insights.json, a restricted user's
insights of their own tenants (PGFLOW["TENANT_VISIBLE"]), the MCP insights and stuck
tools, and ``manage.py pgflow_insights --tenant``. A tenant's figures are counted from the
attempts, not from the hourly rollup (which counts every tenant together), so they must be
exact even where the rollup has rolled."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import anyio
import pytest
from asgiref.sync import sync_to_async
from django.core.management import CommandError, call_command
from django.db import connections
from django.utils import timezone
from mcp import Client

from pgflow import rollup
from pgflow.core import histogram
from pgflow.models import Schedule, Step, WorkflowRun
from pgflow_dashboard import insights, tenancy
from pgflow_dashboard.mcp.server import Principal, build
from pgflow_dashboard.window import WorkflowWindow
from tests.dashboard_support import insights_url, make_user

pytestmark = pytest.mark.django_db(transaction=True)
pytest_plugins = ["tests.dashboard_fixtures"]  # the login fixture

FLOW = "shop.flows.Orders"
PERMS = ("view_workflowrun",)
SECOND = timedelta(seconds=1)


def make_run(tenant: str | None, created: datetime, *, status: str = "finished") -> WorkflowRun:
    finished = created + 30 * SECOND if status == "finished" else None
    return WorkflowRun.objects.create(
        workflow_class=FLOW,
        status=status,
        created_at=created,
        updated_at=finished or created,
        finished_at=finished,
        definition_digest="d" * 64,
        current_step="charge",
        tenant=tenant,
    )


def make_attempt(run: WorkflowRun, at: datetime, *, ran: float, error_class: str | None = None) -> Step:
    return Step.objects.create(
        run=run,
        step_name="charge",
        status="failed" if error_class else "completed",
        outcome="reattempted" if error_class else "completed",
        error_class=error_class,
        queue="workflows",
        created_at=at,
        scheduled_at=at,
        started_at=at + SECOND,
        finished_at=at + SECOND + ran * SECOND,
    )


@pytest.fixture
def history(settings) -> datetime:
    """acme: 3 finished runs, 4 attempts of 2 s (1 failed, AcmeError); globex: a finished and
    a paused run, 5 attempts of 100 s (3 failed, GlobexError); a run of no tenant, 1 attempt.
    Hours ago, so that the sweep's rollup can roll them."""
    settings.PGFLOW = {**settings.PGFLOW, "TENANT_VISIBLE": "tests.tenant_workflows.visible_tenants"}
    now = timezone.now()
    base = now - timedelta(hours=5)
    for index in range(3):
        run = make_run("acme", base + index * SECOND)
        make_attempt(run, base + index * SECOND, ran=2)
    make_attempt(run, base + 10 * SECOND, ran=2, error_class="AcmeError")
    globex = [make_run("globex", base), make_run("globex", base, status="paused")]
    for index in range(5):
        failed = "GlobexError" if index < 3 else None
        make_attempt(globex[index % 2], base + index * SECOND, ran=100, error_class=failed)
    make_attempt(make_run(None, base), base, ran=5)
    return now


def window(now: datetime) -> WorkflowWindow:
    return WorkflowWindow.parse("24h", retention=timedelta(days=30), now=now)


def summary(figures: dict[str, Any]) -> dict[str, Any]:
    (flow,) = figures["workflows"]
    (step,) = figures["steps"]
    ran = [row["ran"] for row in figures["phase_p95_per_bucket"] if row["ran"] is not None]
    return {
        "started": flow["started"],
        "finished": flow["finished"],
        "paused": flow["paused"],
        "attempts": step["attempts"],
        "failures": step["failures"],
        "failures_charted": sum(row["failures"] for row in figures["step_failures_per_bucket"]),
        "errors": {row["error_class"]: row["count"] for row in figures["errors"]},
        "ran_p95": max(ran),
        "stuck_paused": figures["stuck"]["paused"]["count"],
    }


ACME = {
    "started": 3,
    "finished": 3,
    "paused": 0,
    "attempts": 4,
    "failures": 1,
    "failures_charted": 1,
    "errors": {"AcmeError": 1},
    "stuck_paused": 0,
}
GLOBEX = {
    "started": 2,
    "finished": 1,
    "paused": 1,
    "attempts": 5,
    "failures": 3,
    "failures_charted": 3,
    "errors": {"GlobexError": 3},
    "stuck_paused": 1,
}
EVERY = {
    "started": 6,
    "finished": 5,
    "paused": 1,
    "attempts": 10,
    "failures": 4,
    "failures_charted": 4,
    "errors": {"GlobexError": 3, "AcmeError": 1},
    "stuck_paused": 1,
}


def without_p95(figures: dict[str, Any]) -> dict[str, Any]:
    found = summary(figures)
    found.pop("ran_p95")
    return found


@pytest.mark.parametrize("rolled", [False, True], ids=["live", "after-the-rollup-rolled"])
def test_a_tenants_figures_count_only_its_attempts(history, rolled):
    if rolled:
        assert rollup.roll(at=history, limit=None) >= 1  # the history's hour is in the rollup now
    every = insights.compute(window(history))
    acme = insights.compute(window(history), tenants=("acme",))
    globex = insights.compute(window(history), tenants=["globex"])
    assert without_p95(acme) == ACME
    assert without_p95(globex) == GLOBEX
    assert without_p95(every) == EVERY  # the unfiltered figures, from the rollup when rolled
    assert (acme["tenants"], globex["tenants"]) == (["acme"], ["globex"])
    assert "tenants" not in every  # the unfiltered JSON is as it was
    tolerance = 1 + histogram.MAX_RELATIVE_ERROR
    assert summary(acme)["ran_p95"] <= 2 * tolerance  # globex's 100 s attempts are not in it
    assert summary(globex)["ran_p95"] >= 100 / tolerance
    both = insights.compute(window(history), tenants=("acme", "globex"))
    assert without_p95(both)["attempts"] == 9 and without_p95(both)["started"] == 5  # not the run of no tenant
    nobody = insights.compute(window(history), tenants=())
    assert nobody["workflows"] == [] and nobody["steps"] == [] and nobody["stuck"]["paused"]["count"] == 0


def test_the_page_filters_by_tenant_with_a_select_of_the_tenants_in_the_window(login, history):
    client = login(make_user("ops", perms=PERMS))
    page = client.get(insights_url())
    assert page.status_code == 200
    assert without_p95(page.context["figures"]) == EVERY
    html = page.content.decode()
    assert '<select name="tenant">' in html
    assert '<option value="acme">acme</option>' in html and '<option value="globex">globex</option>' in html
    page = client.get(insights_url("24h") + "&tenant=acme")
    assert without_p95(page.context["figures"]) == ACME
    html = page.content.decode()
    assert '<option value="acme" selected>acme</option>' in html
    assert "?window=7d&amp;tenant=acme" in html  # the window links keep the tenant
    assert "Counted from the attempts of acme" in html
    data = client.get(insights_url("24h", as_json=True) + "&tenant=globex").json()
    assert data["tenants"] == ["globex"] and data["steps"][0]["attempts"] == 5
    bad = client.get(insights_url("24h", as_json=True) + "&tenant=" + "x" * 101)
    assert bad.status_code == 400 and "at most 100 characters" in bad.json()["error"]


def test_a_restricted_user_sees_their_tenants_insights_and_not_anothers(login, history):
    client = login(make_user("acme-ops", perms=PERMS))
    page = client.get(insights_url())
    assert page.status_code == 200
    assert without_p95(page.context["figures"]) == ACME
    html = page.content.decode()
    assert '<option value="acme">acme</option>' in html and "globex" not in html
    data = client.get(insights_url(as_json=True)).json()
    assert data["tenants"] == ["acme"] and data["steps"][0]["attempts"] == 4
    # Another tenant's insights: a 403 saying which tenants the user sees.
    refused = client.get(insights_url("24h") + "&tenant=globex")
    assert refused.status_code == 403
    assert "your user does not see the runs of tenant &#x27;globex&#x27; (the tenants you see: acme)" in (
        refused.content.decode()
    )
    refused = client.get(insights_url("24h", as_json=True) + "&tenant=globex")
    assert refused.status_code == 403
    assert refused.json() == {"error": "your user does not see the runs of tenant 'globex' (the tenants you see: acme)"}
    assert without_p95(client.get(insights_url("24h") + "&tenant=acme").context["figures"]) == ACME


def call_tools(user, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def session() -> list[Any]:
        async with Client(build(Principal(user_id=user.pk))) as client:
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
        await sync_to_async(connections.close_all, thread_sensitive=True)()  # the tools' thread's
        return results

    return anyio.run(session)


def answer(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def test_mcp_insights_and_stuck_honour_the_users_tenants(history):
    restricted, everyone = make_user("globex-agent", perms=PERMS), make_user("agent", perms=PERMS)
    mine, stuck, theirs, theirs_stuck = call_tools(
        restricted,
        [("insights", {}), ("stuck", {}), ("insights", {"tenant": "acme"}), ("stuck", {"tenant": "acme"})],
    )
    figures = answer(mine)
    assert figures["tenants"] == ["globex"]
    assert (figures["steps"][0]["attempts"], figures["steps"][0]["failures"]) == (5, 3)
    assert {row["error_class"] for row in figures["errors"]} == {"GlobexError"}
    assert answer(stuck)["paused"]["count"] == 1 and answer(stuck)["tenants"] == ["globex"]
    for refused in (theirs, theirs_stuck):
        assert refused.is_error and "does not see the runs of tenant 'acme'" in refused.content[0].text
    every, acme, acme_stuck = call_tools(
        everyone, [("insights", {}), ("insights", {"tenant": "acme"}), ("stuck", {"tenant": "acme"})]
    )
    assert "tenants" not in answer(every) and answer(every)["steps"][0]["attempts"] == 10
    assert answer(acme)["steps"][0]["attempts"] == 4 and answer(acme_stuck)["paused"]["count"] == 0


@pytest.mark.django_db(transaction=False)  # pure: no row is read
def test_which_tenants_the_insights_count():
    assert tenancy.narrowed(None, None) is None  # every tenant: the rollup's figures
    assert tenancy.narrowed(None, "") is None
    assert tenancy.narrowed(None, "globex") == ("globex",)
    assert tenancy.narrowed(frozenset({"globex", "acme"}), None) == ("acme", "globex")
    assert tenancy.narrowed(frozenset({"globex", "acme"}), "acme") == ("acme",)
    assert tenancy.narrowed(frozenset(), None) == ()  # sees no tenant: counts nothing
    with pytest.raises(tenancy.NotVisible, match=r"tenant 'globex' \(the tenants you see: acme\)"):
        tenancy.narrowed(frozenset({"acme"}), "globex")
    with pytest.raises(tenancy.NotVisible, match=r"\(the tenants you see: none\)"):
        tenancy.narrowed(frozenset(), "acme")
    with pytest.raises(ValueError, match="tenant must be a non-empty string of at most 100 characters"):
        tenancy.narrowed(None, "x" * 101)


# --- manage.py pgflow_insights --tenant ---------------------------------------------------------


def command(*args: str) -> str:
    out = StringIO()
    call_command("pgflow_insights", *args, stdout=out)
    return out.getvalue()


def test_the_command_counts_one_tenant_as_the_dashboards_filter_does(login, history):
    printed = json.loads(command("--window", "24h", "--tenant", "globex", "--json"))
    assert printed["tenants"] == ["globex"]
    assert without_p95(printed) == GLOBEX
    shown = login(make_user("ops", perms=PERMS)).get(insights_url("24h", as_json=True) + "&tenant=globex").json()
    assert without_p95(printed) == without_p95(shown)
    assert printed["stuck"] == shown["stuck"] and printed["workflows"] == shown["workflows"]
    text = command("--tenant", "acme")
    assert text.startswith("pgflow insights: window 24h, tenant acme (")
    assert "runs: 3 started, 3 finished, 0 cancelled; failed attempts: 1" in text
    assert "AcmeError" in text and "GlobexError" not in text
    everyone = command()
    assert "runs: 6 started, 5 finished, 0 cancelled; failed attempts: 4" in everyone
    assert ", tenant " not in everyone.splitlines()[0]


def test_the_command_takes_a_tenant_only_a_schedule_has_yet(history):
    Schedule.objects.create(
        workflow_class=FLOW,
        name="hooli nightly",
        cron="0 3 * * *",
        tenant="hooli",
        created_at=history,
        updated_at=history,
    )
    printed = json.loads(command("--tenant", "hooli", "--json"))
    assert printed["tenants"] == ["hooli"] and printed["workflows"] == []


@pytest.mark.parametrize(
    ("tenant", "said"),
    [
        ("initech", "unknown tenant 'initech': no run or schedule has it (the tenants of runs: acme, globex)"),
        ("", "--tenant must be a non-empty string of at most 100 characters, got ''"),
        ("x" * 101, "--tenant must be a non-empty string of at most 100 characters, got 'xxx"),
    ],
)
def test_the_command_refuses_an_unknown_tenant_naming_the_known_ones(history, tenant, said):
    with pytest.raises(CommandError) as refused:
        command("--tenant", tenant)
    assert said in str(refused.value)
