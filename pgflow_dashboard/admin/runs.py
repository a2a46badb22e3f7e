"""The runs admin: a read-only ``WorkflowRun`` list with its filters and bulk actions (each
capped at :data:`MAX_BULK_RUNS`), the run page and its endpoints, and (mounted on the site by
:mod:`pgflow_dashboard.site`) the insights page.

Read-only means no add, no delete and no field ever saved from a form: every change an
operator makes goes through the run's own controls (``run.pause(actor=…)`` …) and
``pgflow.signal``, the same API users' code calls, so the store stays the one writer of
state and each change lands in the audit trail with the user as actor. Acting needs the
``change`` permission; looking needs ``view`` (or ``change``) and staff, as every admin page.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Count, DurationField, Exists, ExpressionWrapper, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce, Now
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import redirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from pgflow import archive, readdb, search, searching
from pgflow.core import jsonvalue
from pgflow.core.states import CONTROLS, Control, RunStatus, control_error
from pgflow.exceptions import PgflowError
from pgflow.models import Step, WorkflowRun

from .. import confirm, insights, runlist, runpage, site, views
from ..templatetags.pgflow_dashboard import when
from ..timeformat import duration
from . import counting, inlines, savedviews, subjects
from .savedviews import SavedViewFilter
from .subjects import SubjectTypeFilter
from .tenants import TenantFilter, in_use, scoped, visible_to

MAX_LISTED_REFUSALS = 20  # a bulk action's warning names at most this many runs one by one
MAX_LISTED_APPLIED = 50  # and its success message at most this many run ids
# One bulk action applies at most this many runs (a transaction each), so one request stays
# short; "select all" across a big list is refused as a whole, nothing applied.
MAX_BULK_RUNS = 1000


class WorkflowClassFilter(admin.SimpleListFilter):
    title = "workflow class"
    parameter_name = "workflow_class"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        paths = insights.workflow_classes()
        names = [path.rsplit(".", 1)[-1] for path in paths]
        # The class name alone reads best; the full path only where two classes share a name.
        return [(path, name if names.count(name) == 1 else path) for path, name in zip(paths, names, strict=True)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = self.value()
        if value and jsonvalue.text_problem(value):
            return queryset.none()  # no class path holds a NUL or a lone surrogate
        return queryset.filter(workflow_class=value) if value else queryset

    def get_facet_counts(self, pk_attname: str, filtered_qs: QuerySet[Any]) -> dict[str, Count]:
        # One pass counting each class, not the default "id IN (subquery)" per class.
        return {
            f"{index}__c": Count(pk_attname, filter=Q(workflow_class=value))
            for index, (value, _label) in enumerate(self.lookup_choices)
        }


class ErrorClassFilter(admin.SimpleListFilter):
    """Runs with an attempt that failed with this error class: where the insights' top
    errors link to. Listing every error class ever seen would read the whole step table,
    so the filter offers only the value it was given."""

    title = "error class"
    parameter_name = "error_class"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, value)] if value else []

    def has_output(self) -> bool:
        return bool(self.value())

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = self.value()
        if not value:
            return queryset
        if jsonvalue.text_problem(value):
            return queryset.none()  # no stored error class holds a NUL or a lone surrogate
        failed = Step.objects.filter(run=OuterRef("pk"), status="failed", error_class=value)
        return queryset.filter(Exists(failed))


class ParentFilter(admin.SimpleListFilter):
    """The children of one run (``?parent=<id>``): where a run page's children link to."""

    title = "parent run"
    parameter_name = "parent"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, f"#{value}")] if value else []

    def has_output(self) -> bool:
        return bool(self.value())

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = (self.value() or "").removeprefix("#")
        if not value:
            return queryset
        return queryset.filter(parent_id=int(value)) if value.isdigit() and len(value) < 19 else queryset.none()


class StatusFilter(admin.SimpleListFilter):
    """The run status, each choice with how many runs have it now (one query, each count
    stopping at counting.COUNT_CAP: a GROUP BY would read the whole run table each page)."""

    title = "status"
    parameter_name = "status__exact"  # the stock field filter's parameter: old links keep working

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        if "_facets" in request.GET:  # the admin's own facet counts are on: they count the filtered list
            return [(status.value, status.value.capitalize()) for status in RunStatus]
        counts = counting.status_counts(readdb.alias(), [status.value for status in RunStatus])
        return [
            (status.value, f"{status.value.capitalize()} ({counting.shown(counts.get(status.value, 0))})")
            for status in RunStatus
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = self.value()
        return queryset.filter(status=value) if value else queryset


class RunChangeList(ChangeList):
    """The stock change list, with each listed run's badge and reason (runlist.attach): a
    few queries for the page, whatever its length."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        runlist.attach(list(self.result_list), now=timezone.now())
        # More matches than counting.COUNT_CAP: the pagination says "more than" (its template
        # admin/pgflow/workflowrun/pagination.html).
        self.pgflow_count_capped = self.result_count > counting.COUNT_CAP
        self.pgflow_count_cap = f"{counting.COUNT_CAP:,}"


def _failed_step(run: WorkflowRun) -> tuple[str | None, str]:
    """The step a bulk re-run starts from: the step of the run's latest failed attempt, or
    (None, why not)."""
    if run.status not in ("finished", "cancelled", "paused"):
        return None, f"it is {run.status} (pause or cancel it first)"
    failed = run.step_set.filter(status="failed").order_by("-created_at", "-id").values_list("step_name", flat=True)
    name = failed.first()
    if name is None:
        return None, "no attempt of it failed"
    try:
        run.rerun_plan(name)
    except PgflowError as exc:
        return None, str(exc)
    return name, ""


@admin.register(WorkflowRun)
class WorkflowRunAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "workflow",
        "subject_label",
        "status_label",
        "reason_label",  # names the current step, and for how long (current_step_label stays for subclasses)
        "parent_label",
        "started",
        "duration_label",
    )
    list_display_links = ("id",)
    list_filter = (
        SavedViewFilter,
        StatusFilter,
        WorkflowClassFilter,
        SubjectTypeFilter,
        "created_at",
        ErrorClassFilter,
        ParentFilter,
    )
    search_fields = ("id", "key", "subject_id")  # searched by get_search_results below
    search_help_text = (
        "A run id, an idempotency key (or part of one), a subject id, or qualifiers: status:paused "
        "class:Checkout input.customer.id:42 output.charge.paid:>100 error:Timeout step:charge key:order-7 "
        "attr.plan:gold since:2d parent:<run id> failed:<from>..<until> (docs/reference.md, Searching runs)."
    )
    list_select_related = ("subject_type",)
    list_per_page = 50
    ordering = ("-created_at", "-id")
    # A filtered list would count the whole table a second time for "N total".
    show_full_result_count = False
    actions = ("pause_runs", "resume_runs", "cancel_runs", "rerun_failed_runs")
    change_list_template = "admin/pgflow_dashboard/change_list.html"

    class Media:
        css = {"all": ("pgflow_dashboard/style.css",)}
        js = ("pgflow_dashboard/times.js",)  # moments in the viewer's own zone

    # --- read-only -------------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: WorkflowRun | None = None) -> bool:
        return False

    # --- tenants (PGFLOW["TENANT"]): a column and a filter, when the project has them ------------

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = super().get_list_display(request)
        if not in_use() or "tenant_label" in shown:
            return shown
        at = list(shown).index("workflow") + 1 if "workflow" in shown else len(shown)
        return (*shown[:at], "tenant_label", *shown[at:])

    def get_list_filter(self, request: HttpRequest) -> Any:
        shown = super().get_list_filter(request)
        return (*shown, TenantFilter) if in_use() and TenantFilter not in shown else shown

    @admin.display(description="tenant", ordering="tenant")
    def tenant_label(self, run: WorkflowRun) -> str:
        return run.tenant or "—"

    # --- the list ----------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowRun]:
        # What the list shows, computed by the database in the same query (no N+1), with
        # the database's now(): one instant for every row of the page.
        entered = (
            Step.objects.filter(run=OuterRef("pk"), step_name=OuterRef("current_step"))
            .order_by("created_at")
            .values("created_at")[:1]
        )
        end = Coalesce(F("finished_at"), Now())
        # PGFLOW["TENANT_VISIBLE"]: a restricted user's list, run pages and endpoints hold only
        # their tenants' runs (another's is not found).
        return (
            scoped(super().get_queryset(request), visible_to(request))
            .annotate(
                current_since=Subquery(entered),
                run_duration=ExpressionWrapper(end - F("created_at"), output_field=DurationField()),
            )
            .annotate(current_for=ExpressionWrapper(end - F("current_since"), output_field=DurationField()))
            .using(readdb.alias())  # the replica only inside changelist_view's readdb.reading()
        )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    def get_paginator(self, request: HttpRequest, queryset: Any, per_page: int, *args: Any, **kwargs: Any) -> Any:
        return counting.CappedPaginator(queryset, per_page, *args, **kwargs)  # counts stop at COUNT_CAP

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra_context = {"title": "Workflow runs", **(extra_context or {})}  # not "Select workflow run to change"
        searched = request.GET.get("q", "").strip()
        if searched and request.user.has_perm("pgflow.add_savedview"):  # "Save this search as a view"
            extra_context.setdefault("pgflow_save_view_url", savedviews.save_url(self.admin_site.name, searched))
        if archive.configured() is not None and visible_to(request) is None:  # runs retention purged
            extra_context.setdefault("pgflow_archive_url", reverse(f"{self.admin_site.name}:pgflow_archived_runs"))
        if request.method != "GET":  # a bulk action posts here: it reads and acts on the primary
            return super().changelist_view(request, extra_context)
        with readdb.reading() as route:
            if route.note:
                messages.add_message(request, messages.WARNING if route.fell_back else messages.INFO, route.note)
            return super().changelist_view(request, extra_context)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRun], search_term: str
    ) -> tuple[QuerySet[WorkflowRun], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if jsonvalue.text_problem(term):
            return queryset.none(), False  # no key or subject id holds a NUL or a lone surrogate
        if ":" in term:  # the search language (pgflow.search): "status:paused input.customer.id:42"
            try:
                query = search.parse(term)
                for note in query.notes:  # a comparison's default since: window
                    self.message_user(request, note, messages.INFO)
                return searching.runs_matching(query, queryset), False
            except search.SearchError as exc:
                problem = str(exc)
            # A key with colons in it ("schedule:3:…") names no qualifier: the plain search may find it.
            if not search.has_qualifier(term):
                plain = self._plain_search(queryset, term)
                if plain.exists():
                    return plain, False
            self.message_user(request, f"Search not understood: {problem}", messages.ERROR)
            return queryset.none(), False
        return self._plain_search(queryset, term), False

    def _plain_search(self, queryset: QuerySet[WorkflowRun], term: str) -> QuerySet[WorkflowRun]:
        """A run id, an idempotency key (or part of one), or a subject id."""
        match = Q(key__icontains=term) | Q(subject_id=term)
        number = term.removeprefix("#")
        if number.isdigit() and len(number) < 19:  # a bigint
            match |= Q(pk=int(number))
        return queryset.filter(match)

    @admin.display(description="workflow", ordering="workflow_class")
    def workflow(self, run: WorkflowRun) -> str:
        return format_html('<span title="{}">{}</span>', run.workflow_class, run.workflow_name)

    @admin.display(description="subject")
    def subject_label(self, run: WorkflowRun) -> str:
        content_type = run.subject_type  # select_related: no query
        if content_type is None:
            return "—"
        label = f"{content_type.app_label}.{content_type.model} #{run.subject_id}"
        url = subjects.admin_url(self.admin_site, content_type, run.subject_id)
        return format_html('<a href="{}">{}</a>', url, label) if url else label

    @admin.display(description="status", ordering="status")
    def status_label(self, run: WorkflowRun) -> str:
        # What the run is doing (runlist.attach): "due in 2d 23h", "waiting for signal 'x'" …
        kind, words = getattr(run, "doing", (run.status, run.status))
        return format_html(
            '<span class="pgflow-status pgflow-status-{} pgflow-doing-{}">{}</span>', run.status, kind, words
        )

    @admin.display(description="reason")
    def reason_label(self, run: WorkflowRun) -> str:
        reason = getattr(run, "why", "")
        return format_html('<span class="pgflow-reason-cell">{}</span>', reason) if reason else "—"

    @admin.display(description="parent", ordering="parent_id")
    def parent_label(self, run: WorkflowRun) -> str:
        if run.parent_id is None:
            return "—"
        url = reverse(f"{self.admin_site.name}:pgflow_workflowrun_change", args=[run.parent_id])
        return format_html('<a href="{}">#{}</a>', url, run.parent_id)

    @admin.display(description="current step (for)")
    def current_step_label(self, run: WorkflowRun) -> str:
        if not run.current_step:
            return "—"
        spent = getattr(run, "current_for", None)
        if spent is None:
            return run.current_step
        return format_html('{} <span class="pgflow-muted">for {}</span>', run.current_step, duration(spent))

    @admin.display(description="started", ordering="created_at")
    def started(self, run: WorkflowRun) -> Any:
        return when(run.created_at)  # the dashboard's one format, UTC on hover

    @admin.display(description="duration", ordering="run_duration")
    def duration_label(self, run: WorkflowRun) -> str:
        return duration(getattr(run, "run_duration", None))

    # --- bulk actions ----------------------------------------------------------------------

    @admin.action(description="Pause selected runs…", permissions=["change"])
    def pause_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> HttpResponse | None:
        return self._control_each(request, queryset, CONTROLS["pause"], "pause_runs")

    @admin.action(description="Resume selected runs…", permissions=["change"])
    def resume_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> HttpResponse | None:
        return self._control_each(request, queryset, CONTROLS["resume"], "resume_runs")

    @admin.action(description="Cancel selected runs…", permissions=["change"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> HttpResponse | None:
        return self._control_each(request, queryset, CONTROLS["cancel"], "cancel_runs")

    @admin.action(description="Re-run from the failed step…", permissions=["change"])
    def rerun_failed_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> HttpResponse | None:
        """A dry run first: a page counting what would be re-run (and what not, and why), with
        an optional reason; the re-runs start only when that page is confirmed (``confirm=yes``),
        the reason recorded in each re-run's audit trail with the user as actor."""
        selected = queryset.count()
        if selected > MAX_BULK_RUNS:
            self.message_user(
                request,
                f"Nothing re-run: {selected:,} runs are selected and one action takes at most {MAX_BULK_RUNS:,}.",
                messages.ERROR,
            )
            return None
        plan = [(run, *_failed_step(run)) for run in queryset.order_by("pk")]
        form = confirm.posted(request.POST)
        if form.needs_page:
            return confirm.page(
                request,
                self.admin_site,
                "admin/pgflow_dashboard/rerun_bulk.html",
                form,
                title="Re-run from the failed step: dry run",
                opts=self.opts,
                would=[(run, step) for run, step, why in plan if step],
                would_not=[(run, why) for run, step, why in plan if not step],
                selected=[run.pk for run, _step, _why in plan],
                action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
            )
        actor = form.actor(request.user)
        started, refused = [], []
        for run, step, why in plan:
            if not step:
                refused.append(f"run {run.pk}: {why}")
                continue
            try:
                new = run.rerun_from(step, actor=actor)
            except (PgflowError, WorkflowRun.DoesNotExist) as exc:
                refused.append(f"run {run.pk}: {exc}")
            else:
                started.append(f"#{run.pk} as #{new.pk}")
        if started:
            self.message_user(request, f"Re-ran {_runs(len(started))}: {', '.join(started)}.", messages.SUCCESS)
        if refused:
            self.message_user(request, f"Not re-run: {'; '.join(refused[:MAX_LISTED_REFUSALS])}.", messages.WARNING)
        return None

    def _control_each(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRun], control: Control, action: str
    ) -> HttpResponse | None:
        """First a confirmation page (how many runs it applies to, which not and why, an
        optional reason); once confirmed (``confirm=yes``), apply one control to each
        selected run, each in its own transaction, and say per run what applied and what
        did not (and why). The reason goes into the audit trail with the user as actor."""
        verb = control.done
        selected = queryset.count()
        if selected > MAX_BULK_RUNS:
            self.message_user(
                request,
                f"Nothing {verb}: {selected:,} runs are selected and one action takes at most "
                f"{MAX_BULK_RUNS:,}; narrow the list with the filters or the search first.",
                messages.ERROR,
            )
            return None
        form = confirm.posted(request.POST)
        if form.needs_page:
            runs = list(queryset.order_by("pk"))
            would = [run for run in runs if control_error(control.name, run.status) is None]
            would_not = [(run, control_error(control.name, run.status)) for run in runs if run not in would]
            return confirm.page(
                request,
                self.admin_site,
                "admin/pgflow_dashboard/confirm_bulk.html",
                form,
                title=f"{control.name.capitalize()} {_runs(len(runs))}?",
                opts=self.opts,
                verb=control.name.capitalize(),
                control=control,
                action=action,
                would=would[:MAX_LISTED_APPLIED],
                would_count=len(would),
                would_not=would_not[:MAX_LISTED_REFUSALS],
                would_not_count=len(would_not),
                selected=[run.pk for run in runs],
                action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
                # Resume re-sends every member of a failed fan-out: say so before it does.
                fan_out_note=runpage.resume_fan_outs_note(would) if control.name == "resume" else None,
            )
        actor = form.actor(request.user)
        applied: list[int] = []
        refused: list[str] = []
        for run in queryset.order_by("pk"):
            try:
                getattr(run, control.name)(actor=actor)
            except (PgflowError, WorkflowRun.DoesNotExist) as exc:
                reason = str(exc) or type(exc).__name__
                refused.append(reason if reason.startswith(f"run {run.pk}") else f"run {run.pk}: {reason}")
            else:
                applied.append(run.pk)
        if applied:
            ids = ", ".join(f"#{pk}" for pk in applied[:MAX_LISTED_APPLIED])
            if len(applied) > MAX_LISTED_APPLIED:
                ids += f" and {len(applied) - MAX_LISTED_APPLIED} more"
            self.message_user(request, f"{verb.capitalize()} {_runs(len(applied))}: {ids}.", messages.SUCCESS)
        if refused:
            listed = "; ".join(refused[:MAX_LISTED_REFUSALS])
            more = len(refused) - MAX_LISTED_REFUSALS
            tail = f"; and {more} more" if more > 0 else ""
            self.message_user(request, f"Not {verb}: {_runs(len(refused))}: {listed}{tail}.", messages.WARNING)
        return None

    # --- the run page and its endpoints --------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        own = [
            path(
                "<path:object_id>/timeline.json",
                self.admin_site.admin_view(self.timeline_view),
                name=f"{prefix}_timeline",
            ),
            path("<path:object_id>/control/", self.admin_site.admin_view(self.control_view), name=f"{prefix}_control"),
            path("<path:object_id>/rerun/", self.admin_site.admin_view(self.rerun_view), name=f"{prefix}_rerun"),
            # One control's confirmation page, linked from RunsInline on a subject's page.
            path("<path:object_id>/act/", self.admin_site.admin_view(self.act_view), name=f"{prefix}_act"),
        ]
        # Before the stock ones: their "<path:object_id>/" redirect would match these too.
        return own + super().get_urls()

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The run page, read-only: changes are POSTed to control/, never to this form."""
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "HEAD"])
        run = self.get_object(request, unquote(object_id))
        if run is None and visible_to(request) is not None:
            # A user restricted to some tenants: another tenant's run is not found, as one that does not exist.
            raise Http404(f"no workflow run with id {object_id!r}")
        if run is None:
            # What every admin change page does for a missing object.
            self.message_user(
                request, f"workflow run with ID “{object_id}” doesn’t exist. Perhaps it was deleted?", messages.WARNING
            )
            return redirect(reverse("admin:index", current_app=self.admin_site.name))
        if not self.has_view_or_change_permission(request, run):
            raise PermissionDenied
        return views.run_page(self, request, run)

    def timeline_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "HEAD"])
        run = self._run_or_404(request, object_id)
        if not self.has_view_or_change_permission(request, run):
            raise PermissionDenied
        return views.timeline_json(run)

    def control_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        run = self._run_or_404(request, object_id)
        if not self.has_change_permission(request, run):
            raise PermissionDenied
        return views.control(self, request, run)

    def rerun_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
        run = self._run_or_404(request, object_id)
        if not self.has_change_permission(request, run):
            raise PermissionDenied
        return views.rerun(self, request, run)

    def act_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return inlines.act_view(self, request, object_id)

    def _run_or_404(self, request: HttpRequest, object_id: str) -> WorkflowRun:
        run = self.get_object(request, unquote(object_id))
        if run is None:
            raise Http404(f"no workflow run with id {object_id!r}")
        return run

    # --- insights (mounted at /admin/pgflow/insights/ by pgflow_dashboard.site) ----------------

    def insights_view(self, request: HttpRequest) -> HttpResponse:
        # A user restricted to some tenants sees those tenants' insights (views.insights_page).
        if not self.has_view_permission(request):
            raise PermissionDenied
        return views.insights_page(self, request)

    def insights_json_view(self, request: HttpRequest) -> JsonResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return views.insights_json(request)


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


site.mount(admin.site)
