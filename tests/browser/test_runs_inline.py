"""Runs on a model's admin pages, in headless Chromium, as a staff user drives them: a
``ModelAdmin`` for the shop's ``Notification`` (a model that declares no ``RunsRelation``)
gets ``RunsInline`` and ``start_workflow_action``; the user starts a workflow for two
notifications (one already has a run with the key), follows the message's link, then
pauses a run from the notification's page through its confirmation page.

The admin under test is its own ``AdminSite`` named "admin" (every stock registration, plus
this one), served as this module's ``urlpatterns``. Skipped like test_dashboard_browser.py
where Chromium or playwright is missing.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib import admin
from django.urls import path, reverse

from example_project.shop.models import Notification, Order
from pgflow_dashboard import site as dashboard_site
from pgflow_dashboard.admin import RunsInline, StartWorkflowMixin, start_workflow_action
from tests import workflows as wf
from tests.browser.test_dashboard_browser import (  # noqa: F401 - the fixtures
    ARTIFACTS,
    browser_available,
    chromium,
    watch_errors,
)
from tests.dashboard_support import PASSWORD, make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


class NotificationAdmin(StartWorkflowMixin, admin.ModelAdmin):
    list_display = ("id", "vendor_id", "order")
    inlines = [RunsInline]
    actions = [start_workflow_action(wf.Delayed, input={"via": "admin"}, key=lambda n: f"notice-{n.pk}")]


test_site = admin.AdminSite(name="admin")
for model, model_admin in admin.site._registry.items():
    test_site.register(model, type(model_admin))
test_site.register(Notification, NotificationAdmin)
dashboard_site.mount(test_site)

urlpatterns = [path("admin/", test_site.urls)]


@pytest.fixture
def staff(settings: Any) -> dict[str, Any]:
    """An operator who may change notifications and runs, two notifications, and a run of
    the first one holding the action's key; all written before the browser starts."""
    settings.ROOT_URLCONF = __name__
    user = make_user("operator", perms=("view_workflowrun", "change_workflowrun"))
    from django.contrib.auth.models import Permission

    for codename in ("view_notification", "change_notification"):
        user.user_permissions.add(Permission.objects.get(content_type__app_label="shop", codename=codename))
    order = Order.objects.create(customer="ada", email="ada@example.com", total_cents=900)
    first, second = (Notification.objects.create(order=order, vendor_id=vendor) for vendor in (1, 2))
    earlier = wf.Delayed.start(subject=first, key=f"notice-{first.pk}")
    return {
        "first": first.pk,
        "second": second.pk,
        "earlier": earlier.pk,
        "list": reverse("admin:shop_notification_changelist"),
        "first_url": reverse("admin:shop_notification_change", args=[first.pk]),
        "second_url": reverse("admin:shop_notification_change", args=[second.pk]),
    }


def log_in(page: Any, base: str) -> None:
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")


def test_a_staff_user_starts_runs_and_pauses_one_from_the_objects_page(staff, live_server, chromium):  # noqa: F811
    base = live_server.url
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    errors = watch_errors(page)
    log_in(page, base)

    # The action: select both notifications, choose it, see the confirmation.
    page.goto(f"{base}{staff['list']}")
    page.check("#action-toggle")
    page.select_option("select[name=action]", "start_delayed")
    page.click("button[name=index]")
    count = page.locator("#pgflow-start-count").inner_text()
    assert "Start Delayed: 1 of the 2 selected notifications would start a run" in count
    assert "1 already has a run with that key (1 open)" in count
    assert "Nothing has started yet" in count
    assert '"via": "admin"' in page.locator("pre.pgflow-json").inner_text()
    page.screenshot(path=str(ARTIFACTS / "start-action-confirm.png"), full_page=True)
    page.click("input[type=submit][value='Start 1 run']")

    # The message links to the run started and to the one the key found.
    success = page.locator(".messagelist .success").inner_text()
    assert success.startswith("Started 1 run of Delayed: #")
    info = page.locator(".messagelist .info").inner_text()
    assert f"#{staff['earlier']}" in info and "a run with that key exists" in info
    started = re.search(r"#(\d+)", success)
    assert started is not None
    page.click(f".messagelist .success a:has-text('#{started.group(1)}')")
    page.wait_for_url(f"{base}/admin/pgflow/workflowrun/{started.group(1)}/change/")
    subject = page.locator("dd a", has_text="vendor 2 told of order")
    assert subject.get_attribute("href") == staff["second_url"]  # the run page links back

    # A second click of the action starts nothing: both hold their key now.
    page.goto(f"{base}{staff['list']}")
    page.check("#action-toggle")
    page.select_option("select[name=action]", "start_delayed")
    page.click("button[name=index]")
    assert "0 of the 2 selected notifications would start a run" in page.locator("#pgflow-start-count").inner_text()
    assert page.locator("input[type=submit][value^='Start']").count() == 0

    # The inline on the first notification's page: its run, with a bar and its controls.
    page.goto(f"{base}{staff['first_url']}")
    row = page.locator(f"tr.pgflow-run-row[data-run='{staff['earlier']}']")
    assert "Delayed" in row.inner_text()
    bar = row.locator(".pgflow-runbar").bounding_box()
    assert bar is not None and bar["width"] > 50
    assert row.locator(".pgflow-runbar-piece").count() >= 1
    assert row.locator(".pgflow-run-controls a").all_inner_texts() == ["Skip", "Pause", "Cancel"]
    page.screenshot(path=str(ARTIFACTS / "runs-inline.png"), full_page=True)
    row.locator("a.pgflow-button-pause").click()
    assert "Nothing has changed yet" in page.locator("#pgflow-confirm-control").inner_text()
    page.fill("#pgflow-reason", "vendor asked")
    page.screenshot(path=str(ARTIFACTS / "runs-inline-control-confirm.png"), full_page=True)
    page.click("input[type=submit][value^='Pause run']")
    page.wait_for_url(f"{base}{staff['first_url']}")
    assert f"Run {staff['earlier']} paused." in page.locator(".messagelist").inner_text()
    row = page.locator(f"tr.pgflow-run-row[data-run='{staff['earlier']}']")
    assert row.locator(".pgflow-status-paused").count() == 1
    assert "Resume" in row.locator(".pgflow-run-controls a").all_inner_texts()

    # On a phone the page does not scroll sideways: the runs table scrolls in its own box.
    page.set_viewport_size({"width": 390, "height": 800})
    widths = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] <= widths[1] + 1, widths
    page.screenshot(path=str(ARTIFACTS / "runs-inline-390.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 900})

    # Saving the notification's own form still works with the inline on it.
    page.click("input[name=_save]")
    page.wait_for_url(f"{base}{staff['list']}")
    assert "was changed successfully" in page.locator(".messagelist").inner_text()
    assert errors == []
