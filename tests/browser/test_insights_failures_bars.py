"""A bar of the insights failures chart leads to its runs: a click opens the run list searched
with failed:<bucket start>..<bucket end>, which lists the runs with an attempt that failed in
that bucket and no other. Skipped like test_dashboard_browser.py where Chromium or
playwright is missing."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from django.utils import timezone

from pgflow.models import Step, WorkflowRun
from pgflow.testing import run_workflow
from tests import dashboard_workflows as dw
from tests import workflows as wf
from tests.browser.test_dashboard_browser import (  # noqa: F401 - the fixtures
    ARTIFACTS,
    browser_available,
    chromium,
    log_in,
    viewer_account,
    watch_errors,
)
from tests.dashboard_support import insights_url

pytest_plugins = ["tests.dashboard_fixtures"]

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The earliest bucket with a failure, and where to click its bar.
FIRST_FAILURE_BAR_JS = """() => {
  const chart = window.pgflowFailuresChart;
  const buckets = chart.data.labels.length;
  for (let i = 0; i < buckets; i++) {
    for (let d = 0; d < chart.data.datasets.length; d++) {
      if (chart.data.datasets[d].data[i] > 0) {
        const element = chart.getDatasetMeta(d).data[i];
        return {x: element.x, y: (element.y + element.base) / 2, index: i};
      }
    }
  }
  return null;
}"""


def failed_hours_ago(hours: int) -> WorkflowRun:
    """A run paused by an attempt that failed ``hours`` ago."""
    ended = timezone.now() - timedelta(hours=hours)
    run = WorkflowRun.objects.create(
        workflow_class=wf.ThreeSteps.workflow_path(),
        status="paused",
        current_step="one",
        definition_digest=wf.ThreeSteps.definition_digest(),
        created_at=ended - timedelta(minutes=2),
        updated_at=ended,
    )
    Step.objects.create(
        run=run,
        step_name="one",
        attempt=1,
        status="failed",
        outcome="paused",
        queue="workflows",
        created_at=ended - timedelta(minutes=1),
        scheduled_at=ended - timedelta(minutes=1),
        started_at=ended - timedelta(seconds=30),
        finished_at=ended,
        error_class="ValueError",
        error_message="bad input",
    )
    return run


@pytest.fixture
def failures_history() -> dict[str, WorkflowRun]:
    """A run whose attempt failed 6 hours ago, one failing now (another bucket), one that did not fail."""
    history = {"old": failed_hours_ago(6), "now": run_workflow(dw.Hostile.start())}
    run_workflow(wf.ThreeSteps.start())
    return history


# The data fixtures come before chromium: the ORM cannot be called once the browser runs.
@pytest.mark.usefixtures("viewer_account")
def test_a_failures_bar_opens_the_runs_that_failed_in_its_bucket(failures_history, live_server, chromium):  # noqa: F811
    old, now_failing = failures_history["old"], failures_history["now"]
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    errors = watch_errors(page)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{insights_url('24h')}")
    page.wait_for_function("window.pgflowFailuresChart && window.pgflowFailuresChart.chartArea")
    page.locator("#pgflow-failures-chart").scroll_into_view_if_needed()
    bar = page.evaluate(FIRST_FAILURE_BAR_JS)
    assert bar is not None
    canvas = page.locator("#pgflow-failures-chart").bounding_box()
    page.mouse.click(canvas["x"] + bar["x"], canvas["y"] + bar["y"])
    page.wait_for_url("**/admin/pgflow/workflowrun/?q=failed*")
    query = parse_qs(urlparse(page.url).query)["q"][0]
    assert query.startswith("failed:") and ".." in query, query
    listed = page.locator("#result_list tbody tr td.field-id, #result_list tbody tr th.field-id").all_inner_texts()
    assert [text.strip() for text in listed] == [str(old.pk)], (listed, now_failing.pk)
    assert page.locator("#searchbar").input_value() == query  # the search box shows what was asked
    assert page.locator(".errornote, .messagelist .error").count() == 0
    page.screenshot(path=str(ARTIFACTS / "insights_failures_bar_runs.png"), full_page=True)
    assert errors == []
