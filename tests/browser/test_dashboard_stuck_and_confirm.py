"""In headless Chromium: each kind of stuck run says why, and what next, on its run page and
in the run list's reason column; the dangerous actions ask first — a bulk cancel counts the
runs and records the reason in each run's audit trail, pausing a queue shows its own page,
and Skip warns in its dialog that a later step reads the skipped output.

Skipped like test_dashboard_browser.py where Chromium or playwright is missing.
"""

from __future__ import annotations

from typing import Any

import pytest

from pgflow.testing import run_workflow
from tests import composition_workflows as cw
from tests import dashboard_workflows as dw
from tests import fanout_workflows as fw
from tests import workflows as wf
from tests.browser.test_dashboard_browser import (  # noqa: F401 - the fixtures
    ARTIFACTS,
    browser_available,
    chromium,
    watch_errors,
)
from tests.browser.test_dashboard_layout import OVERFLOW_JS, WIDTHS
from tests.dashboard_support import PASSWORD, changelist_url, make_user, run_url

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REFUSED = "vendor 13's inbox refuses mail"


@pytest.fixture
def stuck() -> dict[str, tuple[int, list[str]]]:
    """Each kind of stuck run: its id and the pieces its why sentence holds. (Made before the
    browser starts: Playwright's event loop forbids the ORM in the test.)"""
    make_user("admin", superuser=True)
    tasks = [("tests.fanout_tasks.double", [1]), ("tests.fanout_tasks.fail", [REFUSED])]
    kinds = {
        "signal": (run_workflow(wf.WaitsForPayment.start()), ["waiting for signal 'payment' since ", "(then: cancel)"]),
        "no worker": (
            wf.ThreeSteps.start(),
            ["no live worker serves queue 'workflows'", "start `pgflow_worker --queues workflows`"],
        ),
        "policy": (
            run_workflow(wf.Failing.start()),
            ["paused since ", "failed with RuntimeError: boom (policy: pause); resume after fixing the cause"],
        ),
        "fan-out": (
            run_workflow(fw.Fan.start(input={"tasks": tasks})),
            ["fan-out failed: 1 of 2 jobs failed", f"failed with RuntimeError: {REFUSED}"],
        ),
        "children": (run_workflow(cw.Parent.start(input={"n": 2, "pause": [1]})), ["waiting for 2 child runs"]),
        "sleeping": (dw.Later.start(), ["is due at ", "sleeping until then"]),
    }
    return {name: (run.pk, pieces) for name, (run, pieces) in kinds.items()}


def assert_fits(page: Any, name: str) -> None:
    """The page does not scroll sideways at a desktop's or a phone's width (then back to 1400)."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        measured = page.evaluate(OVERFLOW_JS)
        assert measured["scrollWidth"] <= measured["clientWidth"] and not measured["clipped"], (name, width, measured)
    page.set_viewport_size({"width": 1400, "height": 1000})


def log_in(page: Any, base: str) -> None:
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")


def test_each_stuck_run_says_why_and_the_dangerous_actions_ask_first(stuck, live_server, chromium):  # noqa: F811
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    errors = watch_errors(page)
    base = live_server.url
    log_in(page, base)

    # The sentence, on the run page and in the run list's reason column.
    for name, (pk, pieces) in stuck.items():
        page.goto(f"{base}{run_url(pk)}")
        said = page.locator("#pgflow-why").inner_text()
        for piece in pieces:
            assert piece in said, (name, said)
    page.goto(f"{base}{changelist_url()}")
    for name, (pk, pieces) in stuck.items():
        row = page.locator("#result_list tbody tr", has=page.locator(f"input.action-select[value='{pk}']"))
        reason = row.locator(".pgflow-reason-cell").inner_text()
        assert pieces[-1] in reason, (name, reason)
    fan_out_row = page.locator(
        "#result_list tbody tr", has=page.locator(f"input.action-select[value='{stuck['fan-out'][0]}']")
    )
    assert "paused: RuntimeError" in fan_out_row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "stuck_run_list.png"), full_page=True)

    # Bulk cancel: a page with the count, then the reason in each run's audit trail.
    paused = [stuck["policy"][0], stuck["fan-out"][0]]
    for pk in paused:
        page.check(f"input.action-select[value='{pk}']")
    page.select_option("select[name=action]", "cancel_runs")
    page.click("button[name=index]")
    assert "Cancel: 2 of the 2 selected runs would be cancelled" in page.locator("#pgflow-confirm-count").inner_text()
    assert_fits(page, "bulk cancel")
    page.fill("#pgflow-reason", "vendor outage, refunded by hand")
    page.screenshot(path=str(ARTIFACTS / "confirm_bulk_cancel.png"), full_page=True)
    page.click(".pgflow-confirm-form [type=submit]")
    assert "Cancelled 2 runs" in page.locator(".messagelist").inner_text()
    for pk in paused:
        page.goto(f"{base}{run_url(pk)}")
        assert page.locator("#pgflow-why").inner_text().startswith("Why: cancelled at ")
        assert "user:admin (reason: vendor outage, refunded by hand)" in page.locator(".pgflow-audit").inner_text()

    # Pausing a queue asks on its own page first.
    page.goto(f"{base}/admin/pgflow/queuestate/")
    page.fill("#pgflow-queue-name", "mail")
    page.click(".pgflow-queue-form button[value=pause]")
    assert "Pausing queue mail stops every worker claiming its attempts" in page.locator("#content-main").inner_text()
    assert_fits(page, "queue pause")
    page.fill("#pgflow-reason", "mail vendor down")
    page.click(".pgflow-confirm-form button[value=pause]")
    assert "Queue 'mail' paused." in page.locator(".messagelist").inner_text()
    assert "(reason: mail vendor down)" in page.locator("#content-main").inner_text()
    # Resuming it asks too: every worker serving it claims what piled up at once.
    page.click("button[value=resume]")
    assert "Resuming queue mail lets every worker serving it claim" in page.locator("#content-main").inner_text()
    assert_fits(page, "queue resume")
    page.click(".pgflow-confirm-form button[value=resume]")
    assert "Queue 'mail' resumed." in page.locator(".messagelist").inner_text()

    # Skip warns in its dialog that a later step reads the skipped output; dismissed, nothing changes.
    page.goto(f"{base}{run_url(stuck['no worker'][0])}")
    asked: list[str] = []

    def dismiss(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.click("button.pgflow-button-skip")
    assert asked and asked[0].startswith("Skipping step one: later step two reads outputs['one']"), asked
    # Step two would wait on the same queue: the page, read again, must still name step one.
    page.reload()
    why = page.locator("#pgflow-why").inner_text()
    assert "no live worker serves queue 'workflows'" in why and "step one" in why, why
    assert errors == []
