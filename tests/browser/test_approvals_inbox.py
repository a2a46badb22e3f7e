"""The approvals inbox in headless Chromium: a staff user of the finance group finds the
approval waiting for them, submits the form with invalid data first and sees its errors,
then approves; the inbox empties and the run page shows who approved, and a staff user
outside the group is offered nothing. Skipped like test_dashboard_browser.py where Chromium
or playwright is missing."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group

from pgflow.testing import run_workflow
from tests import approval_workflows as aw
from tests.browser.test_dashboard_browser import (  # noqa: F401 - the fixtures
    ARTIFACTS,
    browser_available,
    chromium,
    watch_errors,
)
from tests.dashboard_support import PASSWORD, make_user, run_url

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def waiting() -> dict[str, Any]:
    """A finance approver, a staff user outside the group, and a refund waiting for approval;
    all written before the browser starts."""
    finance = Group.objects.create(name="finance")
    make_user("fiona", perms=("view_workflowrun",)).groups.add(finance)
    make_user("olga", perms=("view_workflowrun",))
    run = run_workflow(aw.Refund.start(input={"amount": "12.50", "requested_by": "rob"}))
    assert run.steps.get(step_name="review").status == "waiting"
    return {"run": run.pk, "run_url": run_url(run)}


def log_in(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")


def test_a_staff_user_decides_from_the_inbox(waiting, live_server, chromium):  # noqa: F811
    base = live_server.url
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    errors = watch_errors(page)
    log_in(page, base, "fiona")

    page.goto(f"{base}/admin/pgflow/inbox/")
    row = page.locator(f'tr.pgflow-inbox-row[data-run="{waiting["run"]}"]')
    assert row.count() == 1
    assert "review" in row.inner_text() and '"amount": "12.50"' in row.inner_text()
    row.get_by_role("link", name="Decide").click()

    page.get_by_label("Amount").fill("-5")
    page.get_by_label("Reason").fill("")
    page.get_by_role("button", name="Approve").click()
    body = page.locator("#content-main").inner_text()
    assert "Ensure this value is greater than or equal to 0." in body
    assert "This field is required." in body
    page.screenshot(path=str(ARTIFACTS / "approvals-form-errors.png"))

    page.get_by_label("Amount").fill("12.50")
    page.get_by_label("Reason").fill("damaged")
    page.get_by_label("Comment").fill("fine by me")
    page.get_by_role("button", name="Approve").click()
    page.wait_for_url(f"{base}/admin/pgflow/inbox/")
    message = page.locator("ul.messagelist").inner_text()
    assert f"Approved review of run {waiting['run']}: the step runs next." in message
    assert page.locator("#pgflow-inbox-empty").inner_text() == "No approval is waiting for you."

    page.goto(f"{base}{waiting['run_url']}")
    approvals = page.locator("section.pgflow-approvals").inner_text()
    assert "fiona" in approvals and "approved" in approvals and "fine by me" in approvals
    page.screenshot(path=str(ARTIFACTS / "approvals-run-page.png"), full_page=True)
    assert errors == []


def test_a_staff_user_outside_the_group_is_offered_nothing(waiting, live_server, chromium):  # noqa: F811
    base = live_server.url
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    log_in(page, base, "olga")
    page.goto(f"{base}/admin/pgflow/inbox/")
    assert page.locator("#pgflow-inbox-empty").inner_text() == "No approval is waiting for you."
    page.goto(f"{base}/admin/pgflow/inbox/{waiting['run']}/review/")
    assert "olga is in none of the approver groups (finance)" in page.locator("#pgflow-decide-refused").inner_text()
    assert page.locator("#pgflow-decide-form").count() == 0


@pytest.fixture
def purchase() -> int:
    """A staff user of the finance group with no pgflow permission at all, and a purchase
    waiting for approval; written before the browser starts."""
    finance = Group.objects.create(name="finance")
    make_user("nina").groups.add(finance)
    return run_workflow(aw.Purchase.start()).pk


def test_an_approver_without_run_permissions_finds_the_inbox_from_the_sidebar(purchase, live_server, chromium):  # noqa: F811
    base = live_server.url
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    errors = watch_errors(page)
    log_in(page, base, "nina")
    page.get_by_role("link", name="Approvals inbox (1)").first.click()  # the index's pgflow block
    page.wait_for_url(f"{base}/admin/pgflow/inbox/")
    assert page.locator(f'tr.pgflow-inbox-row[data-run="{purchase}"]').count() == 1
    sidebar = page.locator("#nav-sidebar")
    assert sidebar.get_by_role("link", name="Approvals inbox (1)").count() == 1
    page.screenshot(path=str(ARTIFACTS / "approvals-sidebar.png"))
    assert errors == []
