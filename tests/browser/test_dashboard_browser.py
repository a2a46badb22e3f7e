"""The dashboard in headless Chromium: the charts draw, the tooltip tells a segment's kind
and duration, an open run's timeline refreshes itself. Screenshots go to
tests/browser/artifacts/ (git-ignored) for a human to look at.

Skipped, with the reason, where Chromium or playwright is missing; with
PGFLOW_REQUIRE_BROWSER=1 (CI) they fail instead, so CI never passes without running them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from pgflow.models import Batch, Event, Step, WorkflowRun
from pgflow.testing import run_workflow
from tests import dashboard_workflows as dw
from tests import workflows as wf
from tests.dashboard_support import PASSWORD, changelist_url, insights_url, make_user, run_url

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = os.environ.get("PGFLOW_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).parent / "artifacts"
GREEN = (22, 163, 74)  # ran: completed (timeline.SERIES["ran_ok"])
RED = (220, 38, 38)  # ran: failed


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (set PGFLOW_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    return None


@pytest.fixture(autouse=True)
def browser_available() -> None:
    """Skip (or, in CI, fail) before any data is seeded."""
    reason = _missing()
    if reason:
        if os.environ.get("PGFLOW_REQUIRE_BROWSER") == "1":
            pytest.fail(f"PGFLOW_REQUIRE_BROWSER=1, but the browser tests cannot run: {reason}")
        pytest.skip(f"browser tests skipped: {reason}")


@pytest.fixture
def chromium(browser_available: None) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs the test inside its own event loop, where Django would open
    # a second, never-closed connection: tests request their data fixtures before this one,
    # so every ORM call happens before the browser starts.
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def viewer_account() -> None:
    make_user("viewer", perms=("view_workflowrun",))


@pytest.fixture
def timeline_run() -> WorkflowRun:
    """A run that used every series: a failed attempt and its reattempt after a backoff, a
    signal wait, a failure that paused the run for 15 minutes, and an attempt running now."""
    now = timezone.now()
    t0 = now - timedelta(hours=1)
    s = timedelta(seconds=1)
    run = dw.AwaitsApproval.start(input={"order": 42, "note": dw.SCRIPT})
    Step.objects.filter(run=run).delete()
    Event.objects.filter(run=run).exclude(event="started").delete()
    WorkflowRun.objects.filter(pk=run.pk).update(created_at=t0, updated_at=now, current_step="decide")
    Event.objects.filter(run=run).update(created_at=t0)
    rows = [
        dict(
            step_name="ask",
            attempt=1,
            status="failed",
            outcome="reattempted",
            created_at=t0,
            scheduled_at=t0,
            started_at=t0 + 5 * s,
            finished_at=t0 + 45 * s,
            error_class="ConnectionError",
            error_message="connection refused",
        ),
        dict(
            step_name="ask",
            attempt=2,
            status="completed",
            outcome="completed",
            created_at=t0 + 45 * s,
            scheduled_at=t0 + 105 * s,
            started_at=t0 + 108 * s,
            finished_at=t0 + 138 * s,
            output="asked",
        ),
        dict(
            step_name="decide",
            attempt=1,
            status="failed",
            outcome="paused",
            created_at=t0 + 138 * s,
            waiting_since=t0 + 140 * s,
            scheduled_at=t0 + 1340 * s,
            started_at=t0 + 1342 * s,
            finished_at=t0 + 1352 * s,
            error_class="ValueError",
            error_message=f"bad {dw.SCRIPT}",
        ),
        dict(
            step_name="decide",
            attempt=2,
            status="in_progress",
            created_at=t0 + 2252 * s,
            scheduled_at=t0 + 2252 * s,
            started_at=t0 + 2254 * s,
            worker="browser-test",
            lease_expires_at=now + timedelta(hours=1),
        ),
    ]
    Step.objects.bulk_create(Step(run=run, queue="workflows", **row) for row in rows)
    Event.objects.bulk_create(
        [
            Event(run=run, event="paused", actor="system", created_at=t0 + 1352 * s, details={"reason": "failed"}),
            Event(run=run, event="resumed", actor="user:ops", created_at=t0 + 2252 * s),
        ]
    )
    return run


@pytest.fixture
def insights_history() -> None:
    """A day of runs: some finished, one paused by a failure, some running."""
    for _ in range(4):
        run_workflow(wf.ThreeSteps.start())
    run_workflow(dw.Hostile.start())
    dw.Later.start()
    now = timezone.now()
    for hours, status in ((20, "finished"), (14, "cancelled"), (9, "finished"), (3, "finished")):
        created = now - timedelta(hours=hours)
        WorkflowRun.objects.create(
            workflow_class=wf.ThreeSteps.workflow_path(),
            status=status,
            definition_digest=wf.ThreeSteps.definition_digest(),
            created_at=created,
            updated_at=created,
            finished_at=created + timedelta(minutes=7),
        )


def log_in(page: Any, base: str) -> None:
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", "viewer")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")


def watch_errors(page: Any) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # A failed request is reported by its URL below, not by the console's "Failed to load".
    page.on(
        "console",
        lambda message: (
            errors.append(message.text)
            if message.type == "error" and not message.text.startswith("Failed to load resource")
            else None
        ),
    )
    page.on(
        "response",
        lambda response: (
            errors.append(f"{response.status} {response.url}")
            if response.status >= 400 and not response.url.endswith("/favicon.ico")
            else None
        ),
    )
    return errors


PIXELS_JS = """
([id, colours]) => {
  const canvas = document.getElementById(id);
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  const counts = {painted: 0, colours: colours.map(() => 0)};
  for (let i = 0; i < data.length; i += 4) {
    if (data[i + 3] === 0) continue;
    counts.painted++;
    colours.forEach((c, k) => {
      const near = (a, b) => Math.abs(a - b) < 6;
      if (near(data[i], c[0]) && near(data[i + 1], c[1]) && near(data[i + 2], c[2])) counts.colours[k]++;
    });
  }
  return counts;
}
"""

SEGMENT_JS = """
([series, row]) => {
  const chart = window.pgflowTimeline;
  const index = chart.data.datasets.findIndex((dataset) => dataset.series === series);
  const element = chart.getDatasetMeta(index).data[row];
  const segment = chart.data.datasets[index].segments[row];
  return {x: (element.x + element.base) / 2, y: element.y, kind: segment.kind, duration: segment.duration};
}
"""

BAND_JS = """
() => {
  const chart = window.pgflowTimeline;
  const band = chart.options.plugins.pgflowPausedBands.periods[0];
  return {x: chart.scales.x.getPixelForValue((band.from + band.to) / 2), y: chart.chartArea.top + 8,
          duration: band.duration};
}
"""


# The tallest bar of started runs: where to click it.
BAR_JS = """() => {
  const chart = window.pgflowRunsChart;
  const values = chart.data.datasets[0].data;
  const index = values.indexOf(Math.max(...values));
  const element = chart.getDatasetMeta(0).data[index];
  return {x: element.x, y: (element.y + element.base) / 2};
}"""


# The page's background, the admin's quiet text colour, and the colour the charts draw text in.
THEME_JS = """() => ({
  background: getComputedStyle(document.body).backgroundColor,
  quiet: getComputedStyle(document.documentElement).getPropertyValue("--body-quiet-color").trim(),
  chart_text: Chart.defaults.color,
})"""


def brightness(css_rgb: str) -> float:
    """The mean channel of an ``rgb(r, g, b)`` colour, 0 (black) to 255 (white)."""
    channels = [float(part) for part in css_rgb[css_rgb.index("(") + 1 : css_rgb.index(")")].split(",")[:3]]
    return sum(channels) / 3


def test_the_run_page_draws_the_timeline_and_its_tooltips(viewer_account, timeline_run, live_server, chromium):
    run = timeline_run
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    errors = watch_errors(page)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{run_url(run)}")
    page.wait_for_function("window.pgflowTimeline && window.pgflowTimeline.chartArea")

    counts = page.evaluate(PIXELS_JS, ["pgflow-timeline", [GREEN, RED]])
    assert counts["painted"] > 5_000
    green, red = counts["colours"]
    assert green > 50, "no completed (green) bar was drawn"
    assert red > 50, "no failed (red) bar was drawn"
    # A hostile string in the run is text on the page, not a script.
    assert page.locator("pre.pgflow-json").first.inner_text().count("<script>") == 1
    page.screenshot(path=str(ARTIFACTS / "run_page.png"), full_page=True)

    # Hover the first attempt's failed run: 40 seconds.
    canvas = page.locator("#pgflow-timeline").bounding_box()
    segment = page.evaluate(SEGMENT_JS, ["ran_failed", 0])
    page.mouse.move(canvas["x"] + segment["x"], canvas["y"] + segment["y"])
    tooltip = page.locator("#pgflow-tooltip")
    tooltip.wait_for(state="visible")
    assert "ask #1 (failed)" in tooltip.inner_text()
    assert "ran: 40s" in tooltip.inner_text()
    assert "error: ConnectionError" in tooltip.inner_text()
    page.screenshot(path=str(ARTIFACTS / "run_page_tooltip.png"))

    # The signal wait of "decide #1": 20 minutes.
    segment = page.evaluate(SEGMENT_JS, ["waiting", 2])
    page.mouse.move(canvas["x"] + segment["x"], canvas["y"] + segment["y"])
    page.wait_for_function("document.getElementById('pgflow-tooltip').innerText.includes('waiting: 20m')")

    # The paused band, between the failure and the resume: 15 minutes.
    band = page.evaluate(BAND_JS)
    page.mouse.move(canvas["x"] + band["x"], canvas["y"] + band["y"])
    page.wait_for_function("document.getElementById('pgflow-tooltip').innerText.includes('paused: 15m')")
    assert band["duration"] == "15m"

    # The run is open: the timeline refreshes itself from timeline.json.
    page.wait_for_function(
        "document.getElementById('pgflow-timeline-status').innerText.startsWith('Refreshed at')", timeout=15_000
    )
    # The admin's dark theme: the page and its chart follow it.
    light = page.evaluate(THEME_JS)
    page.emulate_media(color_scheme="dark")
    page.reload()
    page.wait_for_function("window.pgflowTimeline && window.pgflowTimeline.chartArea")
    dark = page.evaluate(THEME_JS)
    assert brightness(light["background"]) > 200 and brightness(dark["background"]) < 60, (light, dark)
    assert dark["chart_text"] == dark["quiet"] != light["quiet"], (light, dark)  # the axes' text follows
    page.screenshot(path=str(ARTIFACTS / "run_page_dark.png"))
    assert errors == []


def test_the_insights_page_draws_its_charts(viewer_account, insights_history, live_server, chromium):
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    errors = watch_errors(page)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{insights_url('24h')}")
    page.wait_for_function("window.pgflowRunsChart && window.pgflowFailuresChart")
    started_blue = (37, 99, 235)
    paused_pink = (219, 39, 119)
    runs = page.evaluate(PIXELS_JS, ["pgflow-runs-chart", [started_blue, GREEN]])
    failures = page.evaluate(PIXELS_JS, ["pgflow-failures-chart", [paused_pink]])
    assert min(runs["colours"]) > 50, runs
    assert failures["colours"][0] > 20, failures
    assert page.locator("#pgflow-paused-groups tbody tr").count() == 1
    page.screenshot(path=str(ARTIFACTS / "insights_page.png"), full_page=True)
    # The axes say their units; a bar of started runs leads to the runs started in its bucket.
    titles = page.evaluate(
        "() => [pgflowRunsChart.options.scales.y.title.text, pgflowFailuresChart.options.scales.y.title.text,"
        " pgflowRunsChart.options.scales.x.title.text]"
    )
    assert titles[:2] == ["runs", "failed attempts"] and titles[2].startswith("bucket start ("), titles
    bar = page.evaluate(BAR_JS)
    canvas = page.locator("#pgflow-runs-chart").bounding_box()
    page.mouse.click(canvas["x"] + bar["x"], canvas["y"] + bar["y"])
    page.wait_for_url("**/admin/pgflow/workflowrun/?created_at__gte=*")
    assert page.locator("#result_list tbody tr").count() >= 1
    # The index links to the page.
    page.goto(f"{live_server.url}/admin/")
    page.screenshot(path=str(ARTIFACTS / "admin_index.png"))
    page.click("#content-main >> text=Insights")
    page.wait_for_url(f"{live_server.url}{insights_url()}")
    assert errors == []


def make_span_run(seconds: float) -> WorkflowRun:
    """A finished run of three attempts spread evenly over ``seconds``."""
    end = timezone.now() - timedelta(minutes=1)
    start = end - timedelta(seconds=seconds)
    run = wf.ThreeSteps.start()
    Step.objects.filter(run=run).delete()
    WorkflowRun.objects.filter(pk=run.pk).update(
        status="finished", created_at=start, finished_at=end, current_step=None
    )
    third = timedelta(seconds=seconds / 3)
    Step.objects.bulk_create(
        Step(
            run=run,
            step_name=name,
            attempt=1,
            status="completed",
            outcome="completed",
            queue="workflows",
            created_at=start + index * third,
            scheduled_at=start + index * third + third / 4,
            started_at=start + index * third + third / 2,
            finished_at=start + (index + 1) * third,
        )
        for index, name in enumerate(("one", "two", "three"))
    )
    return run


@pytest.fixture
def span_runs() -> dict[str, WorkflowRun]:
    return {"3s": make_span_run(3), "30d": make_span_run(30 * 86_400)}


@pytest.mark.parametrize(
    ("span", "pattern"),
    [
        ("3s", r"^\d\d:\d\d:\d\d\.\d{3}$"),  # a run of three seconds: ticks in milliseconds
        ("30d", r"^[A-Z][a-z]{2} \d{1,2}$"),  # a run of thirty days: ticks by day ("Nov 3")
    ],
)
def test_the_time_axis_reads_well_for_short_and_long_runs(
    viewer_account, span_runs, live_server, chromium, span, pattern
):
    import re

    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    errors = watch_errors(page)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{run_url(span_runs[span])}")
    page.wait_for_function("window.pgflowTimeline && window.pgflowTimeline.chartArea")
    labels = page.evaluate("() => window.pgflowTimeline.scales.x.ticks.map((tick) => tick.label)")
    assert 3 <= len(labels) <= 10, labels
    assert len(set(labels)) == len(labels), labels  # no two ticks read the same
    assert all(re.match(pattern, label) for label in labels), labels
    counts = page.evaluate(PIXELS_JS, ["pgflow-timeline", [GREEN]])
    assert counts["colours"][0] > 50
    page.locator("#pgflow-timeline-box").screenshot(path=str(ARTIFACTS / f"timeline_{span}.png"))
    if span == "30d":
        page.goto(f"{live_server.url}/admin/pgflow/workflowrun/")
        page.screenshot(path=str(ARTIFACTS / "run_list.png"), full_page=True)
    assert errors == []


FITS_JS = """
([table, panel]) => {
  const t = document.querySelector(table).getBoundingClientRect();
  const p = document.querySelector(panel).getBoundingClientRect();
  const scroller = document.querySelector(table).parentElement;
  return {tableRight: t.right, panelRight: p.right, hiddenByScroll: scroller.scrollWidth - scroller.clientWidth};
}
"""


@pytest.fixture
def wide_tables() -> WorkflowRun:
    """A finished run with a fan-out batch named by a long dotted path, and a run list whose
    rows carry the widest cells the engine writes (a subject, a current step, a date)."""
    run = run_workflow(wf.ThreeSteps.start())
    now = timezone.now()
    Batch.objects.create(
        run=run,
        description="example_project.shop.workflows.OrderFulfilment#notify_vendors run",
        status="finished",
        total=3,
        succeeded=3,
        created_at=now,
        finished_at=now,
    )
    for _ in range(3):
        dw.Later.start()
    return run


def test_the_batches_table_and_the_run_lists_duration_fit_at_1400_px(
    viewer_account, wide_tables, live_server, chromium
):
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    errors = watch_errors(page)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{run_url(wide_tables)}")
    fit = page.evaluate(FITS_JS, [".pgflow-batches table", ".pgflow-batches"])
    assert fit["tableRight"] <= fit["panelRight"] + 0.5, fit
    assert fit["hiddenByScroll"] == 0, fit

    page.goto(f"{live_server.url}{changelist_url()}")
    fit = page.evaluate(FITS_JS, ["#result_list", "#changelist .results"])
    duration = page.locator("#result_list th.column-duration_label").bounding_box()
    page.screenshot(path=str(ARTIFACTS / "run_list.png"))
    assert fit["hiddenByScroll"] == 0, fit
    assert duration["x"] + duration["width"] <= fit["panelRight"] + 0.5, (duration, fit)
    assert errors == []


@pytest.fixture
def waiting_parent() -> WorkflowRun:
    """A parent whose fan-out waits on two child runs: child 0 finished, child 1 paused.
    (Made before the browser starts: Playwright's event loop forbids the ORM in the test.)"""
    from tests import composition_workflows as cw

    return run_workflow(cw.Parent.start(input={"n": 2, "pause": [1]}))


def test_a_parents_wait_on_its_children_is_drawn_and_counted(viewer_account, waiting_parent, live_server, chromium):
    parent = waiting_parent
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    errors = watch_errors(page)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{run_url(parent)}")
    page.wait_for_function("window.pgflowTimeline && window.pgflowTimeline.chartArea")
    assert "waiting for child runs" in page.locator(".pgflow-legend").inner_text()
    canvas = page.locator("#pgflow-timeline").bounding_box()
    segment = page.evaluate(SEGMENT_JS, ["waiting_children", 0])
    assert segment["kind"] == "waiting"
    page.mouse.move(canvas["x"] + segment["x"], canvas["y"] + segment["y"])
    tooltip = page.locator("#pgflow-tooltip")
    tooltip.wait_for(state="visible")
    assert "spread #1 (waiting)" in tooltip.inner_text()
    assert "waiting for 2 child runs (1 ended)" in tooltip.inner_text()
    page.screenshot(path=str(ARTIFACTS / "run_page_children.png"))
    assert errors == []
