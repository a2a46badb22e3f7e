"""An archived run opened from the Archived runs page in headless Chromium: the same timeline
as a live run draws (its completed attempts green), with no script error."""

from __future__ import annotations

import pytest

from pgflow.models import WorkflowRun
from pgflow.runtime import sweep
from pgflow.store import now
from pgflow.testing import run_workflow
from tests import attribute_workflows as aw
from tests.browser.test_dashboard_browser import (  # noqa: F401 - the fixtures, imported to be used
    ARTIFACTS,
    GREEN,
    PIXELS_JS,
    browser_available,
    chromium,
    log_in,
    viewer_account,
    watch_errors,
)
from tests.integration.test_archive import configure, ended

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def archived_run(settings, tmp_path) -> int:
    configure(settings, tmp_path)
    run = ended(run_workflow(aw.TwoSteps.start(key="order-9", attributes={"plan": "gold"})), 40)
    assert sweep.purge(at=now()) == 1 and not WorkflowRun.objects.exists()
    return run.pk


def test_an_archived_run_opens_from_the_archive_with_its_timeline(
    viewer_account,  # noqa: F811 - the fixture imported above
    archived_run,
    live_server,
    chromium,  # noqa: F811 - the fixture imported above
):
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    errors = watch_errors(page)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/pgflow/archived/?key=order-9")
    page.click(f"text=#{archived_run}")
    page.wait_for_function("window.pgflowTimeline && window.pgflowTimeline.chartArea")
    assert f"TwoSteps #{archived_run} (archived)" in page.inner_text("#content")
    counts = page.evaluate(PIXELS_JS, ["pgflow-timeline", [GREEN]])
    assert counts["colours"][0] > 50, "no completed (green) bar was drawn"
    page.screenshot(path=str(ARTIFACTS / "archived_run.png"), full_page=True)
    assert errors == []
