"""The approvals inbox: ``/admin/pgflow/inbox/`` lists the approvals the signed-in user may
decide, oldest wait first, and ``/admin/pgflow/inbox/<run>/<step>/`` decides one with the
approval's own Django form.

Mounted by :mod:`pgflow_dashboard.site` behind ``admin_site.admin_view`` (login, staff, CSRF).
Who may decide is the approval's rule (groups, permission, self-approval), not the
``WorkflowRun`` model permissions: an approver need not see the run list. Deciding goes through
``pgflow.decide``, which records the decision as a signal with the user as its actor.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.apps import apps
from django.contrib import admin, messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

import pgflow
from pgflow.approvals import Approval
from pgflow.deciding import (
    Waiting,
    approval_of,
    may_decide_some,
    open_votes,
    user_groups,
    waiting_for,
    why_not,
)
from pgflow.exceptions import ApprovalError, InputTooLarge, InvalidDecision
from pgflow.models import Step, WorkflowRun

from .runpage import subject
from .tenancy import scoped, visible_to
from .timeformat import duration

INBOX_URL_NAME = "pgflow_inbox"
DECIDE_URL_NAME = "pgflow_inbox_decide"
INPUT_SUMMARY = 160  # characters of a run's input shown in a row
NAV_COUNT_CAP = 99  # the navigation's count reads "99+" past this: it stops looking there


class DecisionForm(forms.Form):
    """What every decision takes besides the approval's own form."""

    comment = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}))


def inbox_urls(site: admin.AdminSite) -> list[URLPattern]:
    label = WorkflowRun._meta.app_label
    return [
        path(f"{label}/inbox/", site.admin_view(lambda request: inbox_page(site, request)), name=INBOX_URL_NAME),
        path(
            f"{label}/inbox/<int:run_id>/<str:step_name>/",
            site.admin_view(lambda request, run_id, step_name: decide_page(site, request, run_id, step_name)),
            name=DECIDE_URL_NAME,
        ),
    ]


def input_summary(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= INPUT_SUMMARY else text[: INPUT_SUMMARY - 1] + "…"


def _context(site: admin.AdminSite, request: HttpRequest, title: str) -> dict[str, Any]:
    request.current_app = site.name
    return {**site.each_context(request), "title": title, "subtitle": None, "opts": WorkflowRun._meta}


def _run_url(site: admin.AdminSite, request: HttpRequest, run: WorkflowRun) -> str | None:
    if not request.user.has_perm("pgflow.view_workflowrun"):
        return None
    return reverse(f"{site.name}:pgflow_workflowrun_change", args=[run.pk])


def row(site: admin.AdminSite, request: HttpRequest, item: Waiting, *, now: Any) -> dict[str, Any]:
    run = item.run
    return {
        "run": run,
        "step_name": item.step.step_name,
        "subject": subject(run, site),
        "input": input_summary(run.input),
        "waiting_for": duration((now - item.waiting_since).total_seconds()) if item.waiting_since else "",
        "waiting_since": item.waiting_since,
        "approvals": len(item.votes),
        "quorum": item.approval.quorum,
        "decide_url": reverse(f"{site.name}:{DECIDE_URL_NAME}", args=[run.pk, item.step.step_name]),
        "run_url": _run_url(site, request, run),
    }


def waiting_here(request: HttpRequest, *, limit: int = 200, groups: frozenset[str] | None = None) -> list[Waiting]:
    """The approvals the request's user may decide, of the tenants they see (``groups``: the
    user's group names, when read already)."""
    keys = visible_to(request)  # PGFLOW["TENANT_VISIBLE"]: another tenant's approvals are not listed
    return waiting_for(request.user, limit=limit, tenants=keys, groups=groups)


def inbox_page(site: admin.AdminSite, request: HttpRequest) -> TemplateResponse:
    now = timezone.now()
    context = _context(site, request, "Approvals waiting for you")
    context["rows"] = [row(site, request, item, now=now) for item in waiting_here(request)]
    return TemplateResponse(request, "admin/pgflow_dashboard/inbox.html", context)


def with_inbox_row(site: admin.AdminSite, request: HttpRequest, app_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``app_list`` with an "Approvals inbox" row, and how many approvals wait for the user, in
    the pgflow block (the index, the app index and the navigation sidebar), for a staff user
    who could decide some approval. An approver need not see any pgflow model: for them the
    block is made, holding only this row."""
    user = getattr(request, "user", None)
    if not (getattr(user, "is_active", False) and getattr(user, "is_staff", False)):
        return app_list
    groups = user_groups(user)  # one query for both: who may decide some, and what waits
    if not may_decide_some(user, groups=groups):
        return app_list
    count = len(waiting_here(request, limit=NAV_COUNT_CAP + 1, groups=groups))
    name = "Approvals inbox"
    if count:
        name += f" ({NAV_COUNT_CAP}+)" if count > NAV_COUNT_CAP else f" ({count})"
    url = reverse(f"{site.name}:{INBOX_URL_NAME}", current_app=site.name)
    entry = {
        "name": name,
        "object_name": "ApprovalsInbox",
        "perms": {"add": False, "change": False, "delete": False, "view": True},
        "admin_url": url,
        "add_url": None,
        "view_only": True,
    }
    label = WorkflowRun._meta.app_label
    block = next((app for app in app_list if app.get("app_label") == label), None)
    if block is None:
        block = {
            "name": apps.get_app_config(label).verbose_name,
            "app_label": label,
            "app_url": url,
            "has_module_perms": True,
            "models": [],
        }
        app_list.append(block)
        app_list.sort(key=lambda app: str(app["name"]).lower())
    block["models"].append(entry)
    return app_list


def decide_page(site: admin.AdminSite, request: HttpRequest, run_id: int, step_name: str) -> HttpResponse:
    run = scoped(WorkflowRun.objects.all(), visible_to(request)).filter(pk=run_id).first()
    if run is None:
        raise Http404(f"no run {run_id}")
    try:
        approval = approval_of(run, step_name)
    except ApprovalError as exc:
        raise Http404(str(exc)) from None
    inbox_url = reverse(f"{site.name}:{INBOX_URL_NAME}")
    context = _context(site, request, f"Decide {step_name} of {run.workflow_name} #{run.pk}")
    refused = why_not(request.user, run, approval)
    waiting = Step.objects.filter(run=run, step_name=step_name, status="waiting").first()
    posted = request.method == "POST"
    form = _form(approval, request.POST if posted else None)
    decision_form = DecisionForm(request.POST if posted else None)
    context.update(
        run=run,
        step_name=step_name,
        approval=approval,
        subject=subject(run, site),
        input=json.dumps(run.input, indent=2, ensure_ascii=False, default=str),
        waiting=waiting,
        votes=open_votes(run, step_name),
        refused=refused,
        form=form,
        decision_form=decision_form,
        inbox_url=inbox_url,
        run_url=_run_url(site, request, run),
    )
    if refused is not None:
        return TemplateResponse(request, "admin/pgflow_dashboard/decide.html", context, status=403)
    if not posted:
        return TemplateResponse(request, "admin/pgflow_dashboard/decide.html", context)
    approve = request.POST.get("decision") == "approve"
    if request.POST.get("decision") not in ("approve", "reject"):
        context["problem"] = "Choose Approve or Reject."
        return TemplateResponse(request, "admin/pgflow_dashboard/decide.html", context, status=400)
    if not decision_form.is_valid():  # a comment PostgreSQL cannot store: said by its field, not dropped
        context["problem"] = "The comment cannot be recorded; see below."
        return TemplateResponse(request, "admin/pgflow_dashboard/decide.html", context, status=400)
    # Only an approval's own form reads the post: without one, there is no data to record
    # (the post holds the CSRF token, the decision and the comment).
    data = request.POST if approval.form is not None else None
    comment = decision_form.cleaned_data["comment"]
    try:
        recorded = pgflow.decide(run, step_name, user=request.user, approve=approve, data=data, comment=comment)
    except InvalidDecision:
        # The bound form shows its own errors by its fields (200, as the admin's own forms answer).
        return TemplateResponse(request, "admin/pgflow_dashboard/decide.html", context)
    except InputTooLarge as exc:
        context["problem"] = f"This decision is too large to record: {exc}."
        return TemplateResponse(request, "admin/pgflow_dashboard/decide.html", context, status=400)
    except ApprovalError as exc:
        messages.error(request, str(exc))
        return redirect(inbox_url)
    what = "Approved" if approve else "Rejected"
    if recorded.settled:
        messages.success(request, f"{what} {step_name} of run {run.pk}: the step runs next.")
    else:
        messages.success(
            request, f"{what} {step_name} of run {run.pk}: {recorded.approvals} of {recorded.quorum} approvals so far."
        )
    return redirect(inbox_url)


def _form(approval: Approval, data: Any) -> forms.BaseForm | None:
    if approval.form is None:
        return None
    form: forms.BaseForm = approval.form(data=data)
    return form
