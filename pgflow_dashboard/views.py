"""The dashboard's views. The ``WorkflowRunAdmin`` methods that route here have already
checked login, staff (``admin_site.admin_view``), CSRF and the model permission.

Each page starts its context with ``admin_site.each_context(request)``, answers with a
``TemplateResponse`` naming the most specific template first, and puts chart data in the
page with ``json_script``. ``now`` is read once per request.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from pgflow.conf import pgflow_settings
from pgflow.core.states import OPEN_RUN, RunStatus
from pgflow.exceptions import PgflowError
from pgflow.models import WorkflowRun
from pgflow.signals import signal

from . import insights, runfacts, runpage, tenancy
from .forms import RerunForm, SignalForm
from .site import INSIGHTS_JSON_URL_NAME, INSIGHTS_URL_NAME
from .timeline import SERIES
from .why import why
from .window import WorkflowWindow

if TYPE_CHECKING:
    from .admin.runs import WorkflowRunAdmin

POLL_MS = 5_000  # how often an open run's page refreshes its timeline
# The latency chart's lines, in the run timeline's colours (distinct in both themes:
# tests/unit/test_timeline_colours.py); ran in the colour of a completed body.
LATENCY_SERIES = [
    {"key": phase, "label": label, "colour": SERIES[series][0]}
    for phase, series, label in (
        ("waited", "waited", "waited"),
        ("throttled", "throttled", "throttled by a limit"),
        ("queued", "queued", "queued"),
        ("ran", "ran_ok", "ran (the body)"),
    )
]
ACTIONS = (*runpage.BUTTONS, "signal")


# --- the run page ---------------------------------------------------------------------------


def _url(model_admin: WorkflowRunAdmin, name: str, run: WorkflowRun) -> str:
    opts = model_admin.opts
    return reverse(f"{model_admin.admin_site.name}:{opts.app_label}_{opts.model_name}_{name}", args=[run.pk])


def run_page(
    model_admin: WorkflowRunAdmin,
    request: HttpRequest,
    run: WorkflowRun,
    *,
    signal_form: SignalForm | None = None,
    status: int = 200,
) -> TemplateResponse:
    site = model_admin.admin_site
    opts = model_admin.opts
    now = timezone.now()
    data = runpage.context(run, site, now=now)
    data["why"] = why(runfacts.facts(run, now=now), now=timezone.localtime(now))
    request.current_app = site.name
    context = {
        **site.each_context(request),
        "title": str(run),
        "subtitle": None,
        "opts": opts,
        "original": run,
        "change": True,
        "add": False,
        "is_popup": False,
        "has_view_permission": True,
        "has_change_permission": model_admin.has_change_permission(request, run),
        "media": model_admin.media,
        "signal_form": signal_form or SignalForm(waited_for=data["waited_for"]),
        "control_url": _url(model_admin, "control", run),
        "chart_config": {
            "url": _url(model_admin, "timeline", run),
            "poll_ms": POLL_MS if data["is_open"] else None,
            "time_zone": timezone.get_current_timezone_name(),
            "series": {name: {"colour": colour, "label": label} for name, (colour, label) in SERIES.items()},
        },
        **data,
    }
    templates = [
        f"admin/{opts.app_label}/{opts.model_name}/run.html",
        f"admin/{opts.app_label}/run.html",
        "admin/pgflow_dashboard/run.html",
    ]
    return TemplateResponse(request, templates, context, status=status)


def timeline_json(run: WorkflowRun) -> JsonResponse:
    return JsonResponse(runpage.chart(run, now=timezone.now()))


def control(model_admin: WorkflowRunAdmin, request: HttpRequest, run: WorkflowRun) -> HttpResponse:
    """One operator control on one run, POSTed from the run page; the user is the actor."""
    action = request.POST.get("action", "")
    if action not in ACTIONS:
        return HttpResponseBadRequest(
            f"unknown action {action!r} (one of {', '.join(ACTIONS)})", content_type="text/plain; charset=utf-8"
        )
    if action == "signal":
        form = SignalForm(request.POST, waited_for=runpage.waited_for(run) if run.status in OPEN_RUN else None)
        if form.is_valid():
            name, payload = form.cleaned_data["name"], form.cleaned_data["payload"]
            try:
                signal(run, name, payload, actor=request.user)
            except (PgflowError, ValueError, TypeError, WorkflowRun.DoesNotExist) as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Signal {name!r} sent to run {run.pk}.")
                return redirect(_url(model_admin, "change", run))
        return run_page(model_admin, request, run, signal_form=form, status=400)
    control = runpage.BUTTONS[action]
    try:
        runpage.applied(control, run, actor=request.user, posted=request.POST)
    except (PgflowError, WorkflowRun.DoesNotExist) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Run {run.pk} {control.done}.")
    return redirect(_url(model_admin, "change", run))


def rerun(model_admin: WorkflowRunAdmin, request: HttpRequest, run: WorkflowRun) -> HttpResponse:
    """The "Re-run from here" confirmation page (GET) and the re-run itself (POST): the outputs
    it copies, the input (editable JSON), whether the class's steps changed since the run began."""
    step_name = request.GET.get("step") or request.POST.get("step") or ""
    try:
        plan = run.rerun_plan(step_name)
    except PgflowError as exc:
        messages.error(request, str(exc))
        return redirect(_url(model_admin, "change", run))
    if request.method == "POST":
        form = RerunForm(request.POST)
        if form.is_valid():
            try:
                new = run.rerun_from(step_name, input=form.cleaned_data["input"], actor=request.user)
            except (PgflowError, ValueError, TypeError) as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Run {run.pk} re-run from step {step_name} as run {new.pk}.")
                return redirect(_url(model_admin, "change", new))
    else:
        form = RerunForm(initial={"input": json.dumps(run.input, indent=2, ensure_ascii=False)})
    site = model_admin.admin_site
    request.current_app = site.name
    context = {
        **site.each_context(request),
        "title": f"Re-run {run} from step {step_name}",
        "opts": model_admin.opts,
        "run": run,
        "step_name": step_name,
        "plan": plan,
        "form": form,
        "run_url": _url(model_admin, "change", run),
        "will_cancel": run.status == RunStatus.PAUSED,
    }
    return TemplateResponse(
        request, "admin/pgflow_dashboard/rerun.html", context, status=400 if form.is_bound and form.errors else 200
    )


# --- insights -------------------------------------------------------------------------------


def _window(request: HttpRequest) -> WorkflowWindow:
    return WorkflowWindow.parse(request.GET.get("window"), retention=pgflow_settings.RETENTION, now=timezone.now())


def _insights_tenants(request: HttpRequest) -> tuple[str, ...] | None:
    """The tenants the insights count (``?tenant=`` or the user's own, see tenancy.narrowed):
    raises NotVisible (403) or ValueError (400) naming what was wrong."""
    return tenancy.narrowed(tenancy.visible_to(request), request.GET.get("tenant"))


def insights_page(model_admin: WorkflowRunAdmin, request: HttpRequest) -> TemplateResponse:
    site = model_admin.admin_site
    opts = model_admin.opts
    request.current_app = site.name
    insights_url = reverse(f"{site.name}:{INSIGHTS_URL_NAME}")
    chosen = request.GET.get("tenant") or ""
    kept = {"tenant": chosen} if chosen else {}  # the window links keep the tenant filter
    context: dict[str, Any] = {
        **site.each_context(request),
        "title": "Workflow insights",
        "subtitle": None,
        "opts": opts,
        "has_view_permission": True,
        "media": model_admin.media,
        "choices": [
            {"name": name, "url": f"{insights_url}?{urlencode({'window': name, **kept})}"}
            for name in WorkflowWindow.CHOICES
        ],
        "overdue_after": insights.OVERDUE_AFTER.total_seconds(),
        "stuck_limit": insights.STUCK_LIMIT,
        "can_act": model_admin.has_change_permission(request),
        "tenant": chosen,
    }
    templates = [f"admin/{opts.app_label}/insights.html", "admin/pgflow_dashboard/insights.html"]
    try:
        window = _window(request)
        tenants = _insights_tenants(request)
    except tenancy.NotVisible as exc:
        context.update(error=str(exc), window=None)
        return TemplateResponse(request, templates, context, status=403)
    except ValueError as exc:  # WorkflowWindow.Invalid, or a tenant that is no tenant key
        context.update(error=str(exc), window=None)
        return TemplateResponse(request, templates, context, status=400)
    figures = insights.compute(window, tenants=tenants)
    keys = tenancy.visible_to(request)
    if tenancy.in_use():  # a project without tenants: no select, and no query for it
        listed = sorted(keys) if keys is not None else insights.tenants_seen(window)
        context["tenant_choices"] = sorted({*listed, chosen} - {""})
    context["restricted"] = keys is not None
    if read := figures.get("read_database"):  # PGFLOW["READ_DATABASE"]: how old the figures may be
        messages.add_message(request, messages.WARNING if read["fell_back"] else messages.INFO, read["note"])
    changelist = reverse(f"{site.name}:{opts.app_label}_{opts.model_name}_changelist")
    window_filter = {
        "created_at__gte": window.since().isoformat(),
        "created_at__lt": window.now.isoformat(),
        **kept,  # the run list's tenant filter
    }
    for row in figures["workflows"]:
        row["runs_url"] = f"{changelist}?{urlencode({'workflow_class': row['workflow_class'], **window_filter})}"
    for row in figures["errors"]:
        if row["error_class"]:
            row["runs_url"] = f"{changelist}?{urlencode({'error_class': row['error_class'], **kept})}"
    context.update(
        window=window,
        figures=figures,
        json_url=f"{reverse(f'{site.name}:{INSIGHTS_JSON_URL_NAME}')}?{urlencode({'window': window.name, **kept})}",
        chart_data={
            "runs": figures["runs_per_bucket"],
            "failures": figures["step_failures_per_bucket"],
            "latency": figures["phase_p95_per_bucket"],
            "latency_series": LATENCY_SERIES,
            "bucket_seconds": window.bucket_seconds,
            "time_zone": timezone.get_current_timezone_name(),
            "runs_url": changelist,  # a runs bar leads to the runs started in its bucket
        },
        retention=pgflow_settings.RETENTION,
    )
    return TemplateResponse(request, templates, context)


def insights_json(request: HttpRequest) -> JsonResponse:
    try:
        window = _window(request)
    except WorkflowWindow.Invalid as exc:
        return JsonResponse({"error": str(exc), "choices": list(WorkflowWindow.CHOICES)}, status=400)
    try:
        tenants = _insights_tenants(request)
    except tenancy.NotVisible as exc:
        return JsonResponse({"error": str(exc)}, status=403)
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse(insights.compute(window, tenants=tenants))
