"""The insights page's p95-by-phase chart in headless Chromium: one line per phase, in the
run timeline's colours, on a duration axis that says its unit, in the light and the dark
theme. Skipped like test_dashboard_browser.py where Chromium or playwright is missing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.browser.test_dashboard_browser import (  # noqa: F401 - the fixtures
    ARTIFACTS,
    PIXELS_JS,
    browser_available,
    chromium,
    log_in,
    viewer_account,
    watch_errors,
)
from tests.dashboard_support import insights_url

pytest_plugins = ["tests.dashboard_fixtures"]  # the seed_attempt fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WAITED = (148, 163, 184)  # timeline.SERIES["waited"]
QUEUED = (245, 158, 11)  # timeline.SERIES["queued"]
RAN = (22, 163, 74)  # timeline.SERIES["ran_ok"]

LATENCY_JS = """() => {
  const chart = window.pgflowLatencyChart;
  const y = chart.scales.y;
  return {
    phases: chart.data.datasets.map((d) => d.phase),
    points: chart.data.datasets.map((d) => d.data.filter((v) => v !== null).length),
    title: chart.options.scales.y.title.text,
    type: y.type,
    ticks: y.ticks.map((t) => t.label).filter((label) => label),
    tooltip: chart.options.plugins.tooltip.callbacks.label({dataset: chart.data.datasets[0],
      dataIndex: chart.data.datasets[0].data.findIndex((v) => v !== null)}),
  };
}"""


@pytest.fixture
def latency_history(seed_attempt: Callable[..., None]) -> None:
    """Attempts ending over the day: waits of minutes, bodies of seconds, queues of a second."""
    now = timezone.now()
    for hours in (2, 5, 9, 14, 20):
        for index in range(3):
            seed_attempt(now - timedelta(hours=hours), waited=60 * hours + index, queued=1 + index, ran=hours + index)


@pytest.mark.usefixtures("viewer_account", "latency_history")
def test_the_latency_chart_draws_a_line_per_phase_in_both_themes(live_server, chromium):  # noqa: F811
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    errors = watch_errors(page)
    log_in(page, live_server.url)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.goto(f"{live_server.url}{insights_url('24h')}")
        page.wait_for_function("window.pgflowLatencyChart && window.pgflowLatencyChart.chartArea")
        chart = page.evaluate(LATENCY_JS)
        # Throttled has no point (no limited step): it is left out rather than drawn flat.
        assert chart["phases"] == ["waited", "queued", "ran"], chart
        assert chart["points"] == [5, 5, 5], chart
        assert chart["type"] == "logarithmic" and chart["title"] == "p95 duration (log scale)", chart
        assert {"1 s", "1 min"} <= set(chart["ticks"]), chart  # ticks name their unit
        assert chart["tooltip"].startswith("waited: p95 ") and chart["tooltip"].endswith(" min"), chart
        page.locator("#pgflow-latency-chart").scroll_into_view_if_needed()
        counts = page.evaluate(PIXELS_JS, ["pgflow-latency-chart", [WAITED, QUEUED, RAN]])
        assert min(counts["colours"]) > 50, (scheme, counts)  # every line is drawn in its colour
        page.screenshot(path=str(ARTIFACTS / f"insights_latency_{scheme}.png"), full_page=True)
    assert errors == []
