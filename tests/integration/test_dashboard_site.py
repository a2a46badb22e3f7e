"""How the insights pages are mounted on an admin site: only through the registered
WorkflowRunAdmin, once however often mount() runs, and nothing else of the site changes."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import RequestFactory

from pgflow.models import WorkflowRun
from pgflow_dashboard import site as mounting
from pgflow_dashboard.admin import WorkflowRunAdmin
from tests import dashboard_workflows as dw
from tests.dashboard_support import changelist_url, make_user

pytest_plugins = ["tests.dashboard_fixtures"]

pytestmark = pytest.mark.django_db


def insight_routes(site: admin.AdminSite) -> list[str]:
    return [str(pattern.pattern) for pattern in site.get_urls() if "insights" in str(pattern.pattern)]


def test_mount_adds_the_two_routes_once_and_keeps_the_sites_own():
    other = admin.AdminSite(name="other")
    other.register(WorkflowRun, WorkflowRunAdmin)
    before = len(other.get_urls())
    mounting.mount(other)
    mounting.mount(other)
    assert insight_routes(other) == ["pgflow/insights/", "pgflow/insights.json"]
    assert len(other.get_urls()) == before + 6  # and the approvals inbox's two, the archive's two


def test_without_the_run_admin_there_are_no_insights():
    other = admin.AdminSite(name="bare")
    mounting.mount(other)
    assert insight_routes(other) == []
    other.register(WorkflowRun, admin.ModelAdmin)  # someone else's admin for the model
    assert insight_routes(other) == []


def test_the_app_list_gains_the_row_only_for_users_who_may_view_runs():
    viewer = make_user("row-viewer", perms=("view_workflowrun",))
    request = RequestFactory().get("/admin/")
    request.user = viewer
    (app,) = admin.site.get_app_list(request)
    # Queues and Workers: the queues and live workers pages, shown to whoever may view runs
    # (the approvals inbox only to who could decide an approval: not this viewer).
    assert [model["name"] for model in app["models"]] == ["Queues", "Workers", "Workflow runs", "Insights"]
    assert app["models"][0]["admin_url"] == "/admin/pgflow/queuestate/"
    assert app["models"][3]["admin_url"] == "/admin/pgflow/insights/"
    request.user = make_user("row-bystander")
    assert admin.site.get_app_list(request) == []


def test_the_list_with_facet_counts(login, viewer):
    dw.Later.start()
    dw.Later.start()
    dw.AwaitsApproval.start()
    response = login(viewer).get(changelist_url(), {"_facets": "True"})
    assert response.status_code == 200
    text = response.content.decode()
    assert "Later (2)" in text and "AwaitsApproval (1)" in text
    assert "Running (3)" in text
