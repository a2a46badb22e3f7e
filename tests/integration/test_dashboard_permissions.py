"""Who may see and do what on the dashboard, over HTTP: every page and JSON endpoint needs
login, staff and the WorkflowRun view permission; every action needs the change
permission, a POST and a CSRF token, and a refused action changes nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from pgflow.models import Event, Signal, WorkflowRun
from tests import dashboard_workflows as dw
from tests.dashboard_support import changelist_url, control_url, insights_url, messages_of, run_url, timeline_url

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db


@pytest.fixture
def run() -> WorkflowRun:
    return dw.Later.start(input={"n": 1})


def get_endpoints(run: WorkflowRun) -> list[str]:
    return [
        changelist_url(),
        run_url(run),
        timeline_url(run),
        insights_url(),
        insights_url("7d"),
        insights_url(as_json=True),
    ]


def post_endpoints(run: WorkflowRun) -> list[tuple[str, dict[str, str]]]:
    return [
        (control_url(run), {"action": "pause"}),
        (control_url(run), {"action": "cancel"}),
        (control_url(run), {"action": "signal", "name": "approval", "payload": "{}"}),
        (changelist_url(), {"action": "cancel_runs", "_selected_action": str(run.pk)}),
    ]


def assert_unchanged(run: WorkflowRun) -> None:
    fresh = WorkflowRun.objects.get(pk=run.pk)
    assert fresh.status == "running"
    assert list(fresh.events.values_list("event", flat=True)) == ["started"]
    assert not Signal.objects.filter(run=run).exists()


def test_anonymous_users_get_the_login_page_everywhere(login, run):
    client = login(None)
    for url in get_endpoints(run):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login") + "?next="), url
    for url, data in post_endpoints(run):
        response = client.post(url, data)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url
    assert_unchanged(run)


def test_users_who_are_not_staff_get_the_login_page_even_with_permissions(login, not_staff, run):
    client = login(not_staff)
    for url in get_endpoints(run):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url
    for url, data in post_endpoints(run):
        assert client.post(url, data).status_code == 302, url
    assert_unchanged(run)


def test_staff_without_the_view_permission_get_403(login, staff_without_perms, run):
    client = login(staff_without_perms)
    for url in get_endpoints(run):
        assert client.get(url).status_code == 403, url
    for url, data in post_endpoints(run):
        assert client.post(url, data).status_code == 403, url
    assert_unchanged(run)


def test_the_insights_link_is_in_the_pgflow_block_for_those_who_may_view_runs(login, staff_without_perms, viewer):
    bystander = login(staff_without_perms)
    assert b"Insights" not in bystander.get(reverse("admin:index")).content
    # Django's own answer to an app index with nothing the user may see.
    assert bystander.get(reverse("admin:app_list", args=["pgflow"])).status_code == 404
    client = login(viewer)
    for url in (reverse("admin:index"), reverse("admin:app_list", args=["pgflow"]), changelist_url()):
        page = client.get(url)
        assert page.status_code == 200
        assert f'href="{insights_url()}"'.encode() in page.content, url


def test_the_view_permission_opens_every_page_but_acts_on_nothing(login, viewer, run):
    client = login(viewer)
    for url in get_endpoints(run):
        assert client.get(url).status_code == 200, url
    for url, data in post_endpoints(run)[:3]:
        assert client.post(url, data).status_code == 403, url
    # The bulk actions are not offered, and posting one anyway does nothing.
    page = client.get(changelist_url())
    assert b"cancel_runs" not in page.content
    client.post(changelist_url(), {"action": "cancel_runs", "_selected_action": str(run.pk)})
    assert_unchanged(run)
    # Nor does the run page show the buttons.
    assert b'name="action"' not in client.get(run_url(run)).content


def test_actions_without_a_csrf_token_are_refused(login, operator, run):
    client = login(operator, csrf=True)
    for url, data in post_endpoints(run):
        response = client.post(url, data)
        assert response.status_code == 403, url
        assert b"CSRF" in response.content
    assert_unchanged(run)


def test_actions_with_a_csrf_token_work(login, operator, run):
    client = login(operator, csrf=True)
    client.get(run_url(run))  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = client.post(control_url(run), {"action": "pause", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert WorkflowRun.objects.get(pk=run.pk).status == "paused"
    assert Event.objects.get(run=run, event="paused").actor == "user:operator"


def test_the_run_page_takes_no_form_posts_and_nothing_is_added_or_deleted(login, operator, run):
    client = login(operator)
    assert client.post(run_url(run), {"status": "finished"}).status_code == 405
    assert client.get(reverse("admin:pgflow_workflowrun_add")).status_code == 403
    assert client.get(reverse("admin:pgflow_workflowrun_delete", args=[run.pk])).status_code == 403
    assert client.post(reverse("admin:pgflow_workflowrun_delete", args=[run.pk]), {"post": "yes"}).status_code == 403
    page = client.get(changelist_url())
    assert b"delete_selected" not in page.content
    assert b"addlink" not in page.content
    assert_unchanged(run)


def test_control_and_timeline_answer_only_their_methods(login, operator, run):
    client = login(operator)
    assert client.get(control_url(run)).status_code == 405
    assert client.post(timeline_url(run)).status_code == 405
    assert_unchanged(run)


def test_a_missing_run_is_404_for_the_json_and_control_endpoints(login, operator):
    client = login(operator)
    assert client.get(timeline_url(999_999)).status_code == 404
    assert client.post(control_url(999_999), {"action": "pause"}).status_code == 404
    # The run page behaves as every admin page does for a missing object.
    response = client.get(run_url(999_999))
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:index")
    assert "doesn’t exist" in messages_of(client.get(response["Location"]))[0]


def test_endpoints_serve_only_workflow_runs(login, operator, viewer):
    """A user id in the run URL is not a way to reach another model's rows."""
    client = login(operator)
    other = viewer.pk  # a row that exists, in another model: the user's
    assert User.objects.filter(pk=other).exists() and not WorkflowRun.objects.filter(pk=other).exists()
    assert client.get(timeline_url(other)).status_code == 404
    assert client.post(control_url(other), {"action": "pause"}).status_code == 404
    assert client.get(timeline_url("1 OR 1=1")).status_code == 404
    assert client.get(timeline_url("../../auth/user/1")).status_code == 404
