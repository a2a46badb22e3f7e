"""Every dashboard page fits its window in headless Chromium: no page scrolls sideways at
1400 px (a desktop) or at 390 px (a phone), measured as the document's scroll width against
its client width, in the light and the dark theme. Seeded so each page has its widest rows:
long errors and outputs, a fan-out's members, child runs, schedules, workers, alerts, tokens.

Skipped like test_dashboard_browser.py where Chromium or playwright is missing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse
from django.utils import timezone

from pgflow import queues, schedules
from pgflow.models import Alert, AlertDelivery, AlertRule, Batch, BatchMember, Schedule, Step
from pgflow.runtime import presence
from pgflow.testing import run_workflow
from pgflow_dashboard.mcp import tokens
from tests import composition_workflows as cw
from tests import dashboard_workflows as dw
from tests import schedule_workflows as sw
from tests import workflows as wf
from tests.browser.test_dashboard_browser import (  # noqa: F401 - the fixtures
    ARTIFACTS,
    browser_available,
    chromium,
    watch_errors,
)
from tests.dashboard_support import PASSWORD, insights_url, make_user, run_url

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (1400, 390)
LONG = "vendor 13's inbox refuses mail because its quota of 2,000 messages a day ran out " * 4
PATH = "example_project.shop.workflows.OrderFulfilment.notify_vendors_with_a_rather_long_name"

OVERFLOW_JS = """() => {
  const root = document.documentElement;
  const wide = [...document.querySelectorAll("body *")]
    .filter((el) => el.getBoundingClientRect().right > root.clientWidth + 1)
    .slice(0, 5).map((el) => el.tagName + "." + el.className + "#" + el.id);
  // At a desktop's width no table hides part of itself in its scroll box either.
  const clipped = root.clientWidth < 1000 ? [] : [...document.querySelectorAll(".pgflow-table-scroll")]
    .filter((box) => box.scrollWidth > box.clientWidth + 1)
    .map((box) => (box.closest("section") || box).className);
  return {scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, wide, clipped};
}"""


TIME_JS = """() => {
  const node = document.querySelector('time[data-pgflow-time="full"]');
  return {datetime: node.getAttribute("datetime"), text: node.textContent, title: node.title};
}"""

LINK_JS = """() => {
  const link = document.querySelector("#pgflow-children-title a");
  return {colour: getComputedStyle(link).color,
          background: getComputedStyle(document.getElementById("pgflow-children-title")).backgroundColor};
}"""


def distance(a: str, b: str) -> float:
    """Between two ``rgb(r, g, b)`` colours."""

    def channels(css: str) -> list[float]:
        return [float(part) for part in css[css.index("(") + 1 : css.index(")")].split(",")[:3]]

    return sum((x - y) ** 2 for x, y in zip(channels(a), channels(b), strict=True)) ** 0.5


@pytest.fixture
def pages() -> list[tuple[str, str]]:
    """(name, path) of every dashboard page, each with data in it. (Made before the browser
    starts: Playwright's event loop forbids the ORM in the test.)"""
    make_user("admin", superuser=True)
    now = timezone.now()
    failed = run_workflow(dw.Hostile.start(input={"text": LONG}))
    Step.objects.filter(run=failed, error_class__isnull=False).update(
        error_message=LONG, error_class=f"{PATH}.VendorInboxRefusesMail"
    )
    finished = run_workflow(wf.ThreeSteps.start(key="order-" + "7" * 60))
    Step.objects.filter(run=finished).update(output={"vendors": [{"id": n, "note": LONG} for n in range(3)]})
    batch = Batch.objects.create(
        run=finished, description=PATH, status="finished", total=2, succeeded=1, failed=1, created_at=now
    )
    BatchMember.objects.create(batch=batch, position=0, func=PATH, args=[LONG], status="succeeded")
    BatchMember.objects.create(batch=batch, position=1, func=PATH, args=[13], status="failed", error=LONG)
    parent = run_workflow(cw.Parent.start(input={"n": 2, "pause": [1]}))
    waiting = run_workflow(wf.WaitsForPayment.start())
    due = wf.ThreeSteps.start()  # no worker: "no live worker serves queue"
    queues.pause_queue("mail-" + "x" * 60, actor="user:admin (reason: " + "y" * 60 + ")")
    presence.register(name="worker-" + "w" * 50, queues=["workflows", "mail", "limits", "slow"], concurrency=8, at=now)
    schedule = schedules.save(
        Schedule(workflow_class=sw.Quick.workflow_path(), name="every-15-" + "s" * 40, every=timedelta(minutes=15))
    )
    rule = AlertRule.objects.create(
        name="paused runs " + "r" * 40,
        kind="runs_paused",
        params={"count": 0, "workflow_class": None},
        targets=["mail_admins", {"webhook": "https://hooks.example.com/" + "a" * 80, "secret": "s"}],
        cooldown=timedelta(minutes=30),
        created_at=now,
    )
    alert = Alert.objects.create(rule=rule, fired_at=now, value=3, message="3 runs paused: " + LONG)
    AlertDelivery.objects.create(
        alert=alert,
        event="fired",
        target={"webhook": "https://hooks.example.com/" + "a" * 80},
        last_error=LONG,
        created_at=now,
    )
    from django.contrib.auth.models import User

    tokens.issue(User.objects.get(username="admin"), "agent " + "t" * 60, at=now)
    return [
        ("index", reverse("admin:index")),
        ("app", reverse("admin:app_list", args=["pgflow"])),
        ("run list", reverse("admin:pgflow_workflowrun_changelist")),
        ("run failed", run_url(failed)),
        ("run finished", run_url(finished)),
        ("run parent", run_url(parent)),
        ("run waiting", run_url(waiting)),
        ("run due", run_url(due)),
        ("rerun", reverse("admin:pgflow_workflowrun_rerun", args=[finished.pk]) + "?step=two"),
        ("insights", insights_url("24h")),
        ("queues", reverse("admin:pgflow_queuestate_changelist")),
        ("workers", reverse("admin:pgflow_worker_changelist")),
        ("schedules", reverse("admin:pgflow_schedule_changelist")),
        ("schedule", reverse("admin:pgflow_schedule_change", args=[schedule.pk])),
        ("alert rules", reverse("admin:pgflow_alertrule_changelist")),
        ("alerts", reverse("admin:pgflow_alert_changelist")),
        ("alert", reverse("admin:pgflow_alert_change", args=[alert.pk])),
        ("tokens", reverse("admin:pgflow_accesstoken_changelist")),
    ]


def log_in_admin(page: Any, base: str) -> None:
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_no_dashboard_page_scrolls_sideways_at_1400_or_390_px(pages, live_server, chromium, theme):  # noqa: F811
    # The dark run also reads from Tokyo: every moment is shown in the viewer's own zone.
    context = chromium.new_context(color_scheme=theme, timezone_id="Asia/Tokyo" if theme == "dark" else "UTC")
    page = context.new_page()
    errors = watch_errors(page)
    page.set_viewport_size({"width": 1400, "height": 1000})
    log_in_admin(page, live_server.url)
    overflowing = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in pages:
            page.goto(f"{live_server.url}{path}")
            page.wait_for_load_state("load")
            measured = page.evaluate(OVERFLOW_JS)
            if name == "run parent":  # the child runs' "list" link reads on its coloured header
                link = page.evaluate(LINK_JS)
                assert distance(link["colour"], link["background"]) > 150, link
            if name == "run finished":
                moment = page.evaluate(TIME_JS)
                utc = datetime.fromisoformat(moment["datetime"])
                zone = ZoneInfo("Asia/Tokyo" if theme == "dark" else "UTC")
                assert moment["text"] == f"{utc.astimezone(zone):%Y-%m-%d %H:%M:%S}", moment
                assert moment["title"].startswith(f"{utc.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"), moment
            if name == "run list":  # auto-refresh, which the operator can pause (remembered)
                button = page.locator("#pgflow-refresh")
                if width == WIDTHS[0]:  # the first visit pauses it; the next must find it paused
                    assert button.get_attribute("aria-pressed") == "true"
                    button.click()
                assert button.get_attribute("aria-pressed") == "false"
                assert page.evaluate("localStorage.getItem('pgflow.runlist.refresh')") == "paused"
            if name == "alert":
                assert "deliverys" not in page.content().lower()
            shot = ARTIFACTS / f"layout_{theme}_{width}_{name.replace(' ', '_')}.png"
            if name in ("run failed", "run finished", "insights", "queues"):  # for a human to look at
                page.screenshot(path=str(shot), full_page=True)
            if measured["scrollWidth"] > measured["clientWidth"] or measured["clipped"]:
                overflowing.append((width, name, measured))
                page.screenshot(path=str(ARTIFACTS / f"overflow_{theme}_{width}_{name.replace(' ', '_')}.png"))
    context.close()
    assert overflowing == [], "\n".join(map(str, overflowing))
    assert errors == []
