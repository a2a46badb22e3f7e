"""The "Archived runs" pages at ``/admin/pgflow/archived/``: the runs retention wrote to
``PGFLOW["ARCHIVE"]`` before purging them (:mod:`pgflow.archive`), searched by day, key,
class and attribute, and one archived run opened read-only: its facts, the same timeline as
a live run's page, its attempts, events, signals and batches.

Looking needs what the run list needs (the view permission on runs); a user restricted to
some tenants' runs is refused, as on the insights page: the archive is not split by tenant.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from pgflow import archive
from pgflow.core import archiving
from pgflow.core.attributes import KEY_PATTERN
from pgflow.models import WorkflowRun

from . import timeline
from .tenancy import visible_to
from .timeline import SERIES

LIST_URL_NAME = "pgflow_archived_runs"
RUN_URL_NAME = "pgflow_archived_run"
DAYS_BY_DEFAULT = 7  # without a day, the search reads the latest week the archive holds
_MOMENTS = ("created_at", "scheduled_at", "started_at", "finished_at", "waiting_since", "updated_at", "received_at")


def archived_urls(site: admin.AdminSite) -> list[URLPattern]:
    label = WorkflowRun._meta.app_label
    return [
        path(f"{label}/archived/", site.admin_view(lambda request: list_page(site, request)), name=LIST_URL_NAME),
        path(
            f"{label}/archived/<int:run_id>/",
            site.admin_view(lambda request, run_id: run_page(site, request, run_id)),
            name=RUN_URL_NAME,
        ),
    ]


def _allowed(site: admin.AdminSite, request: HttpRequest) -> archiving.Archive:
    model_admin = site.get_model_admin(WorkflowRun)
    if not model_admin.has_view_permission(request) or visible_to(request) is not None:
        raise PermissionDenied
    configured = archive.configured()
    if configured is None:
        raise Http404("no archive is configured (PGFLOW['ARCHIVE'])")
    return configured


def _context(site: admin.AdminSite, request: HttpRequest, title: str) -> dict[str, Any]:
    request.current_app = site.name
    return {**site.each_context(request), "title": title, "opts": WorkflowRun._meta}


def list_page(site: admin.AdminSite, request: HttpRequest) -> HttpResponse:
    configured = _allowed(site, request)
    held = archive.days(configured)
    day = request.GET.get("day", "").strip()
    key = request.GET.get("key", "").strip()
    workflow = request.GET.get("class", "").strip()
    attr = request.GET.get("attr", "").strip()
    problems = []
    if day and archiving.parse_day(day) is None:
        problems.append(f"day must be a date written YYYY-MM-DD, got {day!r}")
    attributes: dict[str, Any] = {}
    if attr:
        name, sep, value = attr.partition(":")
        if not sep or not archiving_name(name):
            problems.append(f"attr must be written name:value (e.g. plan:gold), got {attr!r}")
        else:
            attributes[name] = _scalar(value)
    found: list[dict[str, Any]] = []
    if not problems:
        days = [day] if day else held[:DAYS_BY_DEFAULT]
        found = archive.search(configured, days_=days, key=key, workflow=workflow, attributes=attributes)
    # Restored runs (pgflow_archive restore) are back in the database: their live page is the one to open.
    live = set(
        WorkflowRun.objects.filter(pk__in=[record["run"]["id"] for record in found]).values_list("pk", flat=True)
    )
    rows = [
        {
            "id": record["run"]["id"],
            "url": reverse(f"{site.name}:{RUN_URL_NAME}", args=[record["run"]["id"]]) + f"?day={record['day']}",
            "workflow": (record["run"]["workflow_class"] or "").rsplit(".", 1)[-1],
            "workflow_class": record["run"]["workflow_class"],
            "status": record["run"]["status"],
            "key": record["run"]["key"],
            "attributes": record["run"].get("attributes") or {},
            "finished_at": _moment(record["run"]["finished_at"]),
            "day": record["day"],
            "live_url": reverse(f"{site.name}:pgflow_workflowrun_change", args=[record["run"]["id"]])
            if record["run"]["id"] in live
            else "",
        }
        for record in found
    ]
    context = {
        **_context(site, request, "Archived runs"),
        "rows": rows,
        "days": held,
        "problems": problems,
        "query": {"day": day, "key": key, "class": workflow, "attr": attr},
        "searched_days": [day] if day else held[:DAYS_BY_DEFAULT],
    }
    return TemplateResponse(request, "admin/pgflow_dashboard/archived_runs.html", context)


def run_page(site: admin.AdminSite, request: HttpRequest, run_id: int) -> HttpResponse:
    configured = _allowed(site, request)
    day = request.GET.get("day", "").strip() or None
    record = archive.find(configured, run_id, day if day and archiving.is_day(day) else None)
    if record is None:
        raise Http404(f"run {run_id} is not in the archive")
    run = _with_moments(record["run"])
    steps = [_with_moments(step) for step in record["steps"]]
    events = [_with_moments(event) for event in record["events"]]
    ended = run["finished_at"] or timezone.now()
    chart = timeline.chart(steps, events, status=run["status"], now=ended)
    context = {
        **_context(site, request, f"{(run['workflow_class'] or '').rsplit('.', 1)[-1]} #{run['id']} (archived)"),
        "run": run,
        "day": record["day"],
        "steps": steps,
        "events": events,
        "signals": [_with_moments(signal) for signal in record["signals"]],
        "batches": record["batches"],
        "legend": timeline.legend(),
        "chart": {**chart, "status": run["status"], "now": timeline.millis(ended), "attempts": len(steps)},
        "chart_config": {
            "url": "",
            "poll_ms": None,  # an archived run never changes
            "time_zone": timezone.get_current_timezone_name(),
            "series": {name: {"colour": colour, "label": label} for name, (colour, label) in SERIES.items()},
        },
        "list_url": reverse(f"{site.name}:{LIST_URL_NAME}"),
    }
    return TemplateResponse(request, "admin/pgflow_dashboard/archived_run.html", context)


def archiving_name(name: str) -> bool:
    return bool(KEY_PATTERN.fullmatch(name))  # the names start() accepts


def _scalar(value: str) -> Any:
    """An attribute value as typed in the box: a number, true/false/null, or text."""
    literals: dict[str, Any] = {"true": True, "false": False, "null": None}
    if value in literals:
        return literals[value]
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value


def _moment(value: Any) -> Any:
    return parse_datetime(value) if isinstance(value, str) else value


def _with_moments(row: dict[str, Any]) -> dict[str, Any]:
    """An archived row with its date-times read back from their ISO text."""
    return {key: _moment(value) if key in _MOMENTS else value for key, value in row.items()}
