"""``RunsInline``: an object's workflow runs on its own admin change page.

Add it to any ``ModelAdmin.inlines``; it lists the runs whose subject is the object (newest
first, at most :attr:`RunsInline.max_runs`, with a link to all of them in the run list):
class, status, current step, started, duration, a small timeline bar, a link to the run
page, and the controls that apply to the run's status, for a user with the change
permission on runs. Read-only: it adds, changes and deletes nothing, and saving the
object's form never touches a run. It shows only to users who may view runs.

A control is a link to its confirmation page (``…/workflowrun/<id>/act/?action=pause``),
not a button: the inline sits inside the object's own ``<form>``, where no other form may
be. That page applies the control through the run's own method (``run.pause(actor=…)``),
with the user, and the reason typed, as the actor, then returns to the object's page.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.contrib.admin.utils import unquote
from django.contrib.contenttypes.admin import GenericInlineModelAdmin
from django.core.exceptions import PermissionDenied
from django.db.models import F, QuerySet, Window
from django.db.models.functions import RowNumber
from django.forms import BaseFormSet, Form, formset_factory
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.http import url_has_allowed_host_and_scheme, urlencode

from pgflow import runs_for
from pgflow.core.states import CONTROLS, control_error
from pgflow.exceptions import PgflowError
from pgflow.models import Step, WorkflowRun
from pgflow.subjects import subject_of

from .. import confirm, runbar, runlist, runpage
from ..timeformat import duration
from .tenants import scoped, visible_to

BAR_ATTEMPTS = 30  # a run's bar draws at most its latest this many attempts


class RunsFormSet(BaseFormSet):
    """What the admin asks of an inline's form set, holding no form: the inline's rows are
    read from :attr:`rows` by its template, and a posted object form finds it valid and
    saves nothing (a stale list can never block the object's save)."""

    inline: RunsInline
    request: HttpRequest

    def __init__(
        self,
        data: Any = None,
        files: Any = None,
        instance: Any = None,
        prefix: str | None = None,
        queryset: Any = None,
        save_as_new: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(prefix=prefix)  # never bound: the posted data holds nothing of it
        self.instance = instance

    @classmethod
    def get_default_prefix(cls) -> str:
        return "pgflow_runs"

    def is_valid(self) -> bool:
        return True

    def has_changed(self) -> bool:
        return False

    def get_queryset(self) -> list[Any]:
        return []  # no forms, so no form's object (helpers.InlineAdminFormSet zips the two)

    def save(self, commit: bool = True) -> list[Any]:
        self.new_objects: list[Any] = []  # read by ModelAdmin.construct_change_message
        self.changed_objects: list[Any] = []
        self.deleted_objects: list[Any] = []
        return []

    @cached_property
    def rows(self) -> dict[str, Any]:
        """``{"runs": [row…], "total", "all_url"}`` for the template (read on render only)."""
        return self.inline.rows_for(self.request, self.instance)


class RunsInline(GenericInlineModelAdmin):
    """The object's runs (its ``subject`` runs), read-only, on the object's change page."""

    model = WorkflowRun
    ct_field = "subject_type"
    ct_fk_field = "subject_id"
    template = "admin/pgflow_dashboard/runs_inline.html"
    verbose_name = "workflow run"
    verbose_name_plural = "workflow runs"
    extra = 0
    max_num = 0
    can_delete = False
    max_runs = 20  # listed on the page, newest first; the run list has them all

    class Media:
        css = {"all": ("pgflow_dashboard/style.css", "pgflow_dashboard/runs_inline.css")}
        js = ("pgflow_dashboard/times.js",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return []  # no form fields: the template draws its own table

    # A form set with no model form (see RunsFormSet), where the stubs expect an inline one.
    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> type[RunsFormSet]:  # type: ignore[override]
        base = formset_factory(Form, formset=RunsFormSet, extra=0, max_num=0)
        return type("RunsFormSet", (base,), {"inline": self, "request": request})

    # --- what the rows show --------------------------------------------------------------

    def runs_of(self, obj: Any) -> QuerySet[WorkflowRun]:
        """The runs listed (newest first); override to narrow them, say to one class."""
        return runs_for(obj)

    def rows_for(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        if obj is None or obj.pk is None:  # the add page: no runs yet
            return {"runs": [], "total": 0, "all_url": None}
        now = timezone.now()
        every = scoped(self.runs_of(obj), visible_to(request))  # PGFLOW["TENANT_VISIBLE"]
        runs = list(every[: self.max_runs])
        total = len(runs) if len(runs) < self.max_runs else every.count()
        runlist.attach(runs, now=now)  # run.doing: the status badge's words, as the run list's
        attempts = _attempts([run.pk for run in runs])
        site = self.admin_site
        can_act = _can_change_runs(request, site)
        here = request.get_full_path()
        rows = []
        for run in runs:
            end = run.finished_at or now
            kind, words = getattr(run, "doing", (run.status, run.status))
            controls = []
            if can_act:
                for control in CONTROLS.values():
                    if control_error(control.name, run.status) is None:
                        url = _act_url(site, run, control.action, next_url=here)
                        if url:
                            # One word in the table's narrow column; the full label on hover.
                            short = control.action.capitalize()
                            controls.append(
                                {"action": control.action, "label": short, "title": control.label, "url": url}
                            )
            rows.append(
                {
                    "run": run,
                    "url": _run_url(site, run),
                    "doing": kind,
                    "words": words,
                    "duration": duration(end - run.created_at),
                    "bar": runbar.pieces(run.created_at, end, attempts.get(run.pk, []), now=now),
                    "controls": controls,
                }
            )
        return {"runs": rows, "total": total, "all_url": _all_url(site, obj)}


def _attempts(run_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """The latest :data:`BAR_ATTEMPTS` attempts of each run, in one query."""
    if not run_ids:
        return {}
    fields = [name for name in runpage.TIMELINE_FIELDS if name != "batch_id"]
    latest = Window(RowNumber(), partition_by=[F("run_id")], order_by=[F("created_at").desc(), F("id").desc()])
    rows = (
        Step.objects.filter(run_id__in=run_ids)
        .annotate(latest=latest)
        .filter(latest__lte=BAR_ATTEMPTS)
        .values("run_id", *fields)
    )
    found: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        found.setdefault(row.pop("run_id"), []).append(row)
    return found


def _can_change_runs(request: HttpRequest, site: AdminSite) -> bool:
    run_admin = site._registry.get(WorkflowRun)
    if run_admin is None:
        return False  # no run pages on this site, so no confirmation page to link to
    return bool(run_admin.has_change_permission(request))


def _run_url(site: AdminSite, run: WorkflowRun) -> str | None:
    try:
        return reverse(f"{site.name}:pgflow_workflowrun_change", args=[run.pk])
    except NoReverseMatch:
        return None  # runs are not in this admin site


def _act_url(site: AdminSite, run: WorkflowRun, action: str, *, next_url: str) -> str | None:
    try:
        url = reverse(f"{site.name}:pgflow_workflowrun_act", args=[run.pk])
    except NoReverseMatch:
        return None
    return f"{url}?{urlencode({'action': action, 'next': next_url})}"


def _all_url(site: AdminSite, obj: Any) -> str | None:
    try:
        url = reverse(f"{site.name}:pgflow_workflowrun_changelist")
    except NoReverseMatch:
        return None
    subject_type, subject_id = subject_of(obj)
    return f"{url}?{urlencode({'subject_type': str(subject_type.pk), 'q': subject_id})}"


# --- the confirmation page of one control (linked from the inline) -------------------------


def act_view(model_admin: Any, request: HttpRequest, object_id: str) -> HttpResponse:
    """``GET``: "Pause run #12?", with an optional reason; ``POST``: the control, through
    the run's own method, then back to ``next`` (the object's page) or the run page."""
    if request.method not in ("GET", "HEAD", "POST"):
        return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
    run = model_admin.get_object(request, unquote(object_id))
    if run is None:
        raise Http404(f"no workflow run with id {object_id!r}")
    if not model_admin.has_change_permission(request, run):
        raise PermissionDenied
    site = model_admin.admin_site
    run_url = reverse(f"{site.name}:pgflow_workflowrun_change", args=[run.pk])
    action = request.GET.get("action") or request.POST.get("action") or ""
    control = runpage.BUTTONS.get(action)
    if control is None:
        return HttpResponse(
            f"unknown action {action!r} (one of {', '.join(runpage.BUTTONS)})",
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    next_url = request.POST.get("next") or request.GET.get("next") or ""
    if not url_has_allowed_host_and_scheme(next_url, {request.get_host()}, require_https=request.is_secure()):
        next_url = run_url
    reason_error = None
    if request.method == "POST":
        try:
            reason = confirm.reason_of(request.POST.get("reason"))
        except confirm.BadReason as exc:
            reason, reason_error = request.POST.get("reason", ""), str(exc)
        if reason_error is None:
            try:
                runpage.applied(control, run, actor=confirm.actor(request.user, reason), posted=request.POST)
            except (PgflowError, WorkflowRun.DoesNotExist) as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, f"Run {run.pk} {control.done}.")
            return redirect(next_url)
    else:
        reason = ""
    request.current_app = site.name
    context = {
        **site.each_context(request),
        "title": f"{control.label} {run}?",
        "opts": model_admin.opts,
        "run": run,
        "run_url": run_url,
        "control": control,
        "refused": control_error(control.name, run.status),
        # The step this page shows, posted with a skip (runpage.applied).
        "step": request.POST.get("step", "") if request.method == "POST" else run.current_step or "",
        "next_url": next_url,
        "reason": reason,
        "reason_error": reason_error,
        "reason_limit": confirm.REASON_LIMIT,
    }
    return TemplateResponse(
        request, "admin/pgflow_dashboard/confirm_control.html", context, status=400 if reason_error else 200
    )
