"""The insights page, insights.json and ``manage.py pgflow_insights`` over a real database."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from pgflow import rollup
from pgflow.models import WorkflowRun
from pgflow.testing import run_workflow
from tests import dashboard_workflows as dw
from tests import workflows as wf
from tests.dashboard_support import changelist_url, insights_url, run_url

pytest_plugins = ["tests.dashboard_fixtures"]  # the users, login and seed_attempt fixtures

pytestmark = pytest.mark.django_db(transaction=True)

CHOICES = "(one of 1h, 24h, 7d, 30d)"


@pytest.fixture
def history() -> dict[str, WorkflowRun]:
    return {
        "finished": run_workflow(wf.ThreeSteps.start()),
        "paused": run_workflow(dw.Hostile.start(input={"text": dw.SCRIPT})),
        "running": dw.Later.start(),
    }


def test_the_page_shows_every_section(login, viewer, history):
    page = login(viewer).get(insights_url())
    assert page.status_code == 200
    text = page.content.decode()
    for heading in ("Runs started and ended", "Step failures", "Stuck now", "Workflows", "Steps", "Top errors"):
        assert heading in text, heading
    assert page.context["window"].name == "24h"
    figures = page.context["figures"]
    assert {row["workflow_class"] for row in figures["workflows"]} == {
        "tests.workflows.ThreeSteps",
        "tests.dashboard_workflows.Hostile",
        "tests.dashboard_workflows.Later",
    }
    assert figures["errors"] == [
        {"error_class": "ValueError", "count": 1, "runs_url": f"{changelist_url()}?error_class=ValueError"}
    ]
    # The paused run is on the stuck list with its reason, escaped.
    assert f'href="{run_url(history["paused"])}"' in text
    assert "bad value &lt;script&gt;" in text
    assert dw.SCRIPT not in text
    # Charts' data and the window selector.
    assert 'id="pgflow-insights-data"' in text
    for name in ("1h", "24h", "7d", "30d"):
        assert f'href="{insights_url(name)}"' in text
    assert 'aria-current="page">24h<' in text
    # The percentiles say how exact they are.
    assert "within 9.1% of the exact value" in text


@pytest.mark.parametrize("name", ["1h", "24h", "7d", "30d"])
def test_every_window_renders(login, viewer, history, name):
    response = login(viewer).get(insights_url(name))
    assert response.status_code == 200
    assert response.context["window"].name == name


def test_an_unknown_window_is_a_400_naming_the_choices(login, viewer):
    client = login(viewer)
    page = client.get(insights_url("2d"))
    assert page.status_code == 400
    assert f"unknown window &#x27;2d&#x27; {CHOICES}" in page.content.decode()
    response = client.get(insights_url("<script>", as_json=True))
    assert response.status_code == 400
    assert response.json() == {"error": f"unknown window '<script>' {CHOICES}", "choices": ["1h", "24h", "7d", "30d"]}
    assert b"<script>" not in client.get(insights_url("<script>")).content.split(b"</head>", 1)[1].replace(
        b"<script src", b""
    ).replace(b'<script id="', b"")


@override_settings(PGFLOW={"RETENTION": timedelta(days=3)})
def test_a_window_capped_by_retention_says_so(login, viewer):
    client = login(viewer)
    page = client.get(insights_url("7d"))
    assert page.status_code == 200
    assert "The 7d window is capped to 3d" in page.content.decode()
    assert "runs are kept for 3d" in page.content.decode()
    data = client.get(insights_url("7d", as_json=True)).json()
    assert data["window"] == {**data["window"], "name": "7d", "seconds": 3 * 86_400, "capped": True}
    assert "capped" not in client.get(insights_url("24h")).content.decode()


def test_insights_json_serves_the_same_figures(login, viewer, history):
    client = login(viewer)
    data = client.get(insights_url("24h", as_json=True)).json()
    assert set(data) == {
        "window",
        "runs_per_bucket",
        "step_failures_per_bucket",
        "phase_p95_per_bucket",
        "workflows",
        "steps",
        "errors",
        "percentiles",
        "stuck",
        "schedules",
        "approvals",
    }
    assert data["percentiles"]["max_relative_error"] == pytest.approx(0.0905, abs=1e-4)
    assert data["window"]["name"] == "24h" and data["window"]["bucket_seconds"] == 3600
    assert sum(bucket["started"] for bucket in data["runs_per_bucket"]) == 3
    assert sum(bucket["finished"] for bucket in data["runs_per_bucket"]) == 1
    assert data["stuck"]["paused"]["count"] == 1
    assert data["stuck"]["paused"]["rows"][0]["paused_reason"].endswith(dw.SCRIPT)  # JSON keeps text as text
    assert data["errors"] == [{"error_class": "ValueError", "count": 1}]


def test_the_links_lead_to_the_filtered_runs(login, viewer, history):
    client = login(viewer)
    figures = client.get(insights_url()).context["figures"]
    by_class = {row["workflow_class"]: row["runs_url"] for row in figures["workflows"]}
    listed = client.get(by_class["tests.workflows.ThreeSteps"])
    assert listed.status_code == 200
    assert [run.pk for run in listed.context["cl"].result_list] == [history["finished"].pk]
    listed = client.get(figures["errors"][0]["runs_url"])
    assert [run.pk for run in listed.context["cl"].result_list] == [history["paused"].pk]


def test_the_page_costs_the_same_number_of_queries_for_more_rows(login, viewer, django_assert_max_num_queries):
    client = login(viewer)
    run_workflow(wf.ThreeSteps.start())
    with django_assert_max_num_queries(28) as few:  # 28: stuck now's paused groups, approval waits, inbox count
        assert client.get(insights_url()).status_code == 200
    for _ in range(5):
        run_workflow(wf.ThreeSteps.start())
        run_workflow(dw.Hostile.start())
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert client.get(insights_url()).status_code == 200


def test_one_now_per_request_ends_the_window_and_the_stuck_list(login, viewer, monkeypatch):
    from pgflow_dashboard import insights

    seen = []
    real_stuck = insights.stuck

    def spy(now, **kwargs):
        seen.append(now)
        return real_stuck(now, **kwargs)

    monkeypatch.setattr(insights, "stuck", spy)
    client = login(viewer)
    data = client.get(insights_url(as_json=True)).json()
    (now,) = seen
    assert data["window"]["now"].replace("Z", "+00:00")[:23] == now.isoformat()[:23]
    assert data["window"]["since"].replace("Z", "+00:00")[:23] == (now - timedelta(days=1)).isoformat()[:23]


# --- the command ------------------------------------------------------------------------------------


def test_the_command_prints_the_figures(history):
    out = StringIO()
    call_command("pgflow_insights", "--window", "24h", stdout=out)
    text = out.getvalue()
    assert text.startswith("pgflow insights: window 24h")
    assert "runs: 3 started, 1 finished, 0 cancelled; failed attempts: 1" in text
    assert "tests.workflows.ThreeSteps: 1 started" in text
    assert "ValueError" in text
    assert "runs paused: 1" in text


def test_the_command_prints_json_for_machines(history):
    out = StringIO()
    call_command("pgflow_insights", "--window", "7d", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["window"]["name"] == "7d"
    assert data["stuck"]["paused"]["count"] == 1


def test_the_command_refuses_an_unknown_window():
    with pytest.raises(CommandError, match=r"unknown window '2w' \(one of 1h, 24h, 7d, 30d\)"):
        call_command("pgflow_insights", "--window", "2w")


def test_the_p95_of_each_phase_is_charted_per_bucket_rolled_or_not(login, viewer, seed_attempt):
    now = timezone.now()
    three_hours_ago, ten_hours_ago = now - timedelta(hours=3), now - timedelta(hours=10)
    for ran in (30, 29, 31):
        seed_attempt(three_hours_ago, waited=120, queued=5, ran=ran)
    seed_attempt(ten_hours_ago, waited=0, queued=1, ran=2)
    client = login(viewer)

    def by_bucket() -> dict[int, dict]:
        data = client.get(insights_url("24h", as_json=True)).json()
        buckets = {}
        for row in data["phase_p95_per_bucket"]:
            start = datetime.fromisoformat(row.pop("start"))
            hours_ago = int((now - start).total_seconds() // 3600)
            buckets[hours_ago] = row
        return buckets

    buckets = by_bucket()
    assert len(buckets) in (24, 25)
    assert buckets[3]["waited"] == pytest.approx(120, rel=0.0905)
    assert buckets[3]["queued"] == pytest.approx(5, rel=0.0905)
    assert buckets[3]["ran"] == pytest.approx(31, rel=0.0905)
    assert buckets[3]["throttled"] is None  # not a limited step
    assert buckets[10]["ran"] == pytest.approx(2, rel=0.0905) and buckets[10]["waited"] == 0
    assert all(row == dict.fromkeys(row) for hours, row in buckets.items() if hours not in (3, 10)), buckets
    # The same figures once the sweep has rolled the closed hours into the rollup.
    assert rollup.roll(at=now, limit=None) > 0
    assert by_bucket() == buckets
    # The page draws them: the canvas and the series with their colours.
    page = client.get(insights_url("24h"))
    assert 'id="pgflow-latency-chart"' in page.content.decode()
    series = page.context["chart_data"]["latency_series"]
    assert [s["key"] for s in series] == ["waited", "throttled", "queued", "ran"]
    assert len({s["colour"] for s in series}) == 4
