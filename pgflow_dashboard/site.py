"""Puts the insights page at ``/admin/pgflow/insights/`` on the stock admin site.

Why this shape: the public API (docs/reference.md) fixes the URLs under ``/admin/pgflow/`` and the install steps add
no line to the project's ``urls.py``, so the pages must come with ``admin.site.urls``.
The stock ``AdminSite`` gives a ``ModelAdmin`` only ``/admin/<app>/<model>/…`` (the run
pages live there), and the other routes to an ``/admin/pgflow/…`` URL are worse: a proxy
or unmanaged "Insights" model under the ``pgflow`` label would need a migration in the
engine's app (and ``insights.json`` would still not fit under ``pgflow/insights/``), and
a custom ``AdminSite`` class is not what users run.

So :func:`mount` wraps two methods of the one site instance given (``admin.site``):
``get_urls`` gains the two insights routes and the approvals inbox's two
(:mod:`pgflow_dashboard.inbox`) in front of the site's own, each wrapped with
``admin_site.admin_view`` (login, staff, CSRF, never-cache) and checked for the
``WorkflowRun`` view permission by the view; ``get_app_list`` gains an "Insights" row in
the pgflow block of the index, the app index and the navigation sidebar, for users who
may view runs, and an "Approvals inbox (N)" row for every staff user (N: the approvals
waiting for them; the block is made for an approver who sees no pgflow model).
Everything else is delegated unchanged, the class is untouched, and a second call
changes nothing. The views themselves are methods of the registered
``WorkflowRunAdmin`` (:mod:`pgflow_dashboard.admin.runs`), looked up on each call, so
unregistering it removes the pages too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.exceptions import NotRegistered
from django.http import HttpRequest
from django.urls import URLPattern, path, reverse

from pgflow.models import WorkflowRun

from .archived import archived_urls
from .inbox import inbox_urls, with_inbox_row

if TYPE_CHECKING:
    from .admin.runs import WorkflowRunAdmin

INSIGHTS_URL_NAME = "pgflow_insights"
INSIGHTS_JSON_URL_NAME = "pgflow_insights_json"
_MOUNTED = "_pgflow_dashboard_mounted"


def run_admin(site: admin.AdminSite) -> WorkflowRunAdmin | None:
    """The site's ``WorkflowRunAdmin`` (or a subclass of it), if registered."""
    # cycle: admin.runs -> here (admin.runs mounts this site at import)
    from .admin.runs import WorkflowRunAdmin

    try:
        model_admin = site.get_model_admin(WorkflowRun)
    except NotRegistered:
        return None
    return model_admin if isinstance(model_admin, WorkflowRunAdmin) else None


def mount(site: admin.AdminSite) -> None:
    """Add the insights routes and the app-list row to ``site`` (idempotent)."""
    if getattr(site, _MOUNTED, False):
        return
    site_urls: Callable[[], list[Any]] = site.get_urls
    site_app_list: Callable[..., list[dict[str, Any]]] = site.get_app_list

    def get_urls() -> list[Any]:
        return insights_urls(site) + inbox_urls(site) + archived_urls(site) + site_urls()

    def get_app_list(request: HttpRequest, app_label: str | None = None) -> list[dict[str, Any]]:
        listed = with_insights_row(site, request, site_app_list(request, app_label))
        if app_label is None or app_label == WorkflowRun._meta.app_label:
            listed = with_inbox_row(site, request, listed)
        return listed

    site.get_urls = get_urls  # type: ignore[method-assign]
    site.get_app_list = get_app_list  # type: ignore[method-assign]
    setattr(site, _MOUNTED, True)


def insights_urls(site: admin.AdminSite) -> list[URLPattern]:
    model_admin = run_admin(site)
    if model_admin is None:
        return []
    label = WorkflowRun._meta.app_label
    return [
        path(f"{label}/insights/", site.admin_view(model_admin.insights_view), name=INSIGHTS_URL_NAME),
        path(f"{label}/insights.json", site.admin_view(model_admin.insights_json_view), name=INSIGHTS_JSON_URL_NAME),
    ]


def with_insights_row(
    site: admin.AdminSite, request: HttpRequest, app_list: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``app_list`` with an "Insights" row after the pgflow app's models, for users who may view runs."""
    model_admin = run_admin(site)
    if model_admin is None or not model_admin.has_view_permission(request):
        return app_list
    for app in app_list:
        if app.get("app_label") == WorkflowRun._meta.app_label:
            app["models"].append(
                {
                    "name": "Insights",
                    "object_name": "Insights",
                    "perms": {"add": False, "change": False, "delete": False, "view": True},
                    "admin_url": reverse(f"{site.name}:{INSIGHTS_URL_NAME}", current_app=site.name),
                    "add_url": None,
                    "view_only": True,
                }
            )
    return app_list
