"""The runs in the Django admin: a read-only ``WorkflowRun`` admin, its run page, controls
and bulk actions, and (through :mod:`pgflow_dashboard.site`) the insights page.

Read-only means no add, no delete and no field ever saved from a form: every change an
operator makes goes through the run's own controls (``run.pause(actor=…)`` …) and
``pgflow.signal``, the same API users' code calls, so the store stays the one writer of
state and each change lands in the audit trail with the user as actor. Acting needs the
``change`` permission; looking needs ``view`` (or ``change``) and staff, as every admin page.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, DurationField, Exists, ExpressionWrapper, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce, Now
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from pgflow import queues as pgflow_queues
from pgflow import schedules as pgflow_schedules
from pgflow.conf import pgflow_settings
from pgflow.core import jsonvalue, ticks
from pgflow.core.states import CONTROLS, Control
from pgflow.exceptions import DefinitionError, PgflowError
from pgflow.models import AccessToken, QueueState, Schedule, Step, Worker, WorkflowRun

from . import insights, queuepage, site, views
from .forms import JSONObjectInput
from .timeformat import duration

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
        "current_step_label",
        "started",
        "duration_label",
    )
    list_display_links = ("id",)
    list_filter = ("status", WorkflowClassFilter, "created_at", ErrorClassFilter, ParentFilter)
    search_fields = ("id", "key", "subject_id")  # searched by get_search_results below
    search_help_text = (
        'A run id, an idempotency key (or part of one), a subject id, or "parent:<run id>" for its children.'
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

    # --- read-only -------------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: WorkflowRun | None = None) -> bool:
        return False

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
        return (
            super()
            .get_queryset(request)
            .annotate(
                current_since=Subquery(entered),
                run_duration=ExpressionWrapper(end - F("created_at"), output_field=DurationField()),
            )
            .annotate(current_for=ExpressionWrapper(end - F("current_since"), output_field=DurationField()))
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRun], search_term: str
    ) -> tuple[QuerySet[WorkflowRun], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if jsonvalue.text_problem(term):
            return queryset.none(), False  # no key or subject id holds a NUL or a lone surrogate
        if term.startswith("parent:"):  # the children of a run: "parent:12"
            number = term.removeprefix("parent:").strip().removeprefix("#")
            ok = number.isdigit() and len(number) < 19
            return (queryset.filter(parent_id=int(number)) if ok else queryset.none()), False
        match = Q(key__icontains=term) | Q(subject_id=term)
        number = term.removeprefix("#")
        if number.isdigit() and len(number) < 19:  # a bigint
            match |= Q(pk=int(number))
        return queryset.filter(match), False

    @admin.display(description="workflow", ordering="workflow_class")
    def workflow(self, run: WorkflowRun) -> str:
        return format_html('<span title="{}">{}</span>', run.workflow_class, run.workflow_name)

    @admin.display(description="subject")
    def subject_label(self, run: WorkflowRun) -> str:
        content_type = run.subject_type  # select_related: no query
        if content_type is None:
            return "—"
        return f"{content_type.app_label}.{content_type.model} #{run.subject_id}"

    @admin.display(description="status", ordering="status")
    def status_label(self, run: WorkflowRun) -> str:
        return format_html('<span class="pgflow-status pgflow-status-{}">{}</span>', run.status, run.status)

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
        return run.created_at

    @admin.display(description="duration", ordering="run_duration")
    def duration_label(self, run: WorkflowRun) -> str:
        return duration(getattr(run, "run_duration", None))

    # --- bulk actions ----------------------------------------------------------------------

    @admin.action(description="Pause selected runs", permissions=["change"])
    def pause_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> None:
        self._control_each(request, queryset, CONTROLS["pause"])

    @admin.action(description="Resume selected runs", permissions=["change"])
    def resume_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> None:
        self._control_each(request, queryset, CONTROLS["resume"])

    @admin.action(description="Cancel selected runs", permissions=["change"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> None:
        self._control_each(request, queryset, CONTROLS["cancel"])

    @admin.action(description="Re-run from the failed step…", permissions=["change"])
    def rerun_failed_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> HttpResponse | None:
        """A dry run first: a page counting what would be re-run (and what not, and why); the
        re-runs start only when that page is confirmed (``confirm=yes``)."""
        selected = queryset.count()
        if selected > MAX_BULK_RUNS:
            self.message_user(
                request,
                f"Nothing re-run: {selected:,} runs are selected and one action takes at most {MAX_BULK_RUNS:,}.",
                messages.ERROR,
            )
            return None
        plan = [(run, *_failed_step(run)) for run in queryset.order_by("pk")]
        if request.POST.get("confirm") != "yes":
            request.current_app = self.admin_site.name
            context = {
                **self.admin_site.each_context(request),
                "title": "Re-run from the failed step: dry run",
                "opts": self.opts,
                "would": [(run, step) for run, step, why in plan if step],
                "would_not": [(run, why) for run, step, why in plan if not step],
                "selected": [run.pk for run, _step, _why in plan],
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            }
            return TemplateResponse(request, "admin/pgflow_dashboard/rerun_bulk.html", context)
        started, refused = [], []
        for run, step, why in plan:
            if not step:
                refused.append(f"run {run.pk}: {why}")
                continue
            try:
                new = run.rerun_from(step, actor=request.user)
            except (PgflowError, WorkflowRun.DoesNotExist) as exc:
                refused.append(f"run {run.pk}: {exc}")
            else:
                started.append(f"#{run.pk} as #{new.pk}")
        if started:
            self.message_user(request, f"Re-ran {_runs(len(started))}: {', '.join(started)}.", messages.SUCCESS)
        if refused:
            self.message_user(request, f"Not re-run: {'; '.join(refused[:MAX_LISTED_REFUSALS])}.", messages.WARNING)
        return None

    def _control_each(self, request: HttpRequest, queryset: QuerySet[WorkflowRun], control: Control) -> None:
        """Apply one control to each selected run, each in its own transaction, and say per
        run what applied and what did not (and why)."""
        verb = control.done
        selected = queryset.count()
        if selected > MAX_BULK_RUNS:
            self.message_user(
                request,
                f"Nothing {verb}: {selected:,} runs are selected and one action takes at most "
                f"{MAX_BULK_RUNS:,}; narrow the list with the filters or the search first.",
                messages.ERROR,
            )
            return
        applied: list[int] = []
        refused: list[str] = []
        for run in queryset.order_by("pk"):
            try:
                getattr(run, control.name)(actor=request.user)
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

    def _run_or_404(self, request: HttpRequest, object_id: str) -> WorkflowRun:
        run = self.get_object(request, unquote(object_id))
        if run is None:
            raise Http404(f"no workflow run with id {object_id!r}")
        return run

    # --- insights (mounted at /admin/pgflow/insights/ by pgflow_dashboard.site) ----------------

    def insights_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return views.insights_page(self, request)

    def insights_json_view(self, request: HttpRequest) -> JsonResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return views.insights_json(request)


# --- live workers (read-only) and MCP access tokens ---------------------------------------------


class SeenByRunViewers(admin.ModelAdmin):
    """An operator page those who may view (or change) runs may view, with its own
    permissions too."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return (
            super().has_view_permission(request, obj)
            or request.user.has_perm("pgflow.view_workflowrun")
            or request.user.has_perm("pgflow.change_workflowrun")
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)


@admin.register(Worker)
class WorkerAdmin(SeenByRunViewers):
    """The ``pgflow_worker`` processes, as each records itself (``pgflow.runtime.presence``).
    Read-only: a worker writes its own row. Operators who may view runs may view this."""

    list_display = (
        "name",
        "host",
        "pid",
        "queue_list",
        "concurrency",
        "version",
        "started_at",
        "heartbeat_at",
        "live",
        "steps_run",
        "steps_in_progress",
    )
    ordering = ("-heartbeat_at", "name")
    search_fields = ("name", "host")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="queues")
    def queue_list(self, worker: Worker) -> str:
        return ", ".join(worker.queues or [])

    @admin.display(description="live", boolean=True)
    def live(self, worker: Worker) -> bool:
        lease = timedelta(seconds=pgflow_settings.seconds("LEASE"))
        return worker.heartbeat_at >= timezone.now() - lease


@admin.register(QueueState)
class QueueAdmin(SeenByRunViewers):
    """The Queues page: each queue's due and running attempts, live workers and pause state
    (``queuepage``), with Pause and Resume through ``pgflow.pause_queue`` / ``resume_queue``.
    Those who may view runs may view it; pausing and resuming take a change permission (on
    queues or on runs). Rows are never added or deleted here: a pause writes its own."""

    ACTIONS = {"pause": pgflow_queues.pause_queue, "resume": pgflow_queues.resume_queue}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj) or request.user.has_perm("pgflow.change_workflowrun")

    def get_urls(self) -> list[URLPattern]:
        opts = self.model._meta
        name = f"{opts.app_label}_{opts.model_name}_changelist"
        return [path("", self.admin_site.admin_view(self.changelist_view), name=name)]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self._act(request)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Queues",
            "queues": queuepage.queues(timezone.now()),
            "can_change": self.has_change_permission(request),
        }
        return TemplateResponse(request, "admin/pgflow_dashboard/queues.html", context)

    def _act(self, request: HttpRequest) -> HttpResponse:
        if not self.has_change_permission(request):
            raise PermissionDenied
        action, queue = request.POST.get("action", ""), request.POST.get("queue", "").strip()
        act = self.ACTIONS.get(action)
        if act is None:
            return HttpResponse(
                f"action must be one of {', '.join(sorted(self.ACTIONS))}, got {action!r}",
                status=400,
                content_type="text/plain",
            )
        try:
            act(queue, actor=request.user)
        except ValueError as exc:
            self.message_user(request, f"Nothing changed: {exc}.", messages.ERROR)
        else:
            self.message_user(request, f"Queue {queue!r} {action}d.", messages.SUCCESS)
        return redirect(request.path)


@admin.register(AccessToken)
class AccessTokenAdmin(admin.ModelAdmin):
    """Bearer tokens for the MCP endpoint. Creating one shows its secret once (only a digest
    is kept); "revoke" stops it at once and keeps the row, with its last use, for the record."""

    list_display = ("name", "user", "prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "user__username")
    fields = ("user", "name")
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)
    autocomplete_fields = ()

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("user", "name") if obj is None else ("user", "name", *self.readonly_fields)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj is None else ("user", "name", *self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            return  # nothing of a token is edited after it is made
        from .mcp.tokens import digest, new_secret

        secret = new_secret()
        obj.digest, obj.prefix, obj.created_at = digest(secret), secret[:12], timezone.now()
        obj.save()
        request._pgflow_token_secret = secret  # type: ignore[attr-defined]  # shown once by response_add

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: str | None = None) -> HttpResponse:
        # Rendered straight into this response: the secret never goes through the message
        # storage (a cookie or the session) and cannot be shown again.
        context = {
            **self.admin_site.each_context(request),
            "title": "Token created",
            "opts": self.opts,
            "token": obj,
            "secret": getattr(request, "_pgflow_token_secret", ""),
            "list_url": reverse(f"{self.admin_site.name}:pgflow_accesstoken_changelist"),
        }
        return TemplateResponse(request, "admin/pgflow_dashboard/token_created.html", context)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[AccessToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        messages.success(request, f"{count} token{'s' if count != 1 else ''} revoked.")


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


site.mount(admin.site)


# --- schedules ---------------------------------------------------------------------------------


class ScheduleForm(forms.ModelForm):
    """An admin-made schedule: the class chosen from the registered ones; the rest checked by
    ``pgflow.core.ticks.problems``, the check a declared ``pgflow.Schedule`` makes, each
    error on the field it concerns."""

    workflow_class = forms.ChoiceField(choices=())
    input = JSONObjectInput(
        required=False,
        initial=dict,
        help_text='a JSON object, e.g. {"plan": "pro"}',
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60, "spellcheck": "false"}),
    )

    class Meta:
        model = Schedule
        fields = ["workflow_class", "name", "cron", "every", "timezone", "input", "overlap", "catch_up", "paused"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "workflow_class" in self.fields:  # read-only on a code-declared schedule
            paths = [workflow.workflow_path() for workflow in pgflow_schedules.workflow_classes()]
            self.fields["workflow_class"].choices = [(path, path) for path in paths]  # type: ignore[attr-defined]

    def clean_cron(self) -> str:
        return (self.cleaned_data.get("cron") or "").strip()

    def clean_timezone(self) -> str:
        return (self.cleaned_data.get("timezone") or "").strip()

    def clean_input(self) -> Any:
        value = self.cleaned_data.get("input")
        return {} if value is None else value

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not all(name in self.fields for name in ticks.FIELDS):
            return data  # a code-declared schedule: only paused is edited here
        values = {name: data.get(name) for name in ticks.FIELDS}
        values["cron"] = values["cron"] or None
        found = ticks.problems(**values, max_bytes=pgflow_settings.MAX_INPUT_BYTES)
        for name, message in found.items():
            if name is None:
                if "cron" in data and "every" in data:
                    self.add_error(None, "give cron or every, exactly one of them")
            elif name in data:  # a field Django could not read has its own error already
                self.add_error(name, message)
        return data


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    """Schedules: code-declared ones are shown read-only (the code is their source) but
    can be paused, resumed and started now; admin-made ones are edited here."""

    form = ScheduleForm
    change_form_template = "admin/pgflow_dashboard/schedule_change_form.html"
    list_display = ["name", "workflow", "rule", "next_tick_at", "last_tick_at", "last_run_status", "state", "origin"]
    list_filter = ["origin", "enabled", "paused", "overlap"]
    search_fields = ["name", "workflow_class"]
    actions = ["pause_schedules", "resume_schedules", "start_now"]
    list_select_related = ["last_run"]

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> list[str]:
        shown = ["origin", "state", "next_tick_at", "last_tick_at", "last_run_link"]
        if obj is not None and obj.origin == Schedule.Origin.CODE:
            return [*ScheduleForm.Meta.fields[:-1], *shown]
        return shown if obj is not None else []

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        # A declared schedule would come back at the next sync: pause it, or remove it from the code.
        return super().has_delete_permission(request, obj) and (obj is None or obj.origin != Schedule.Origin.CODE)

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        pgflow_schedules.save(obj)

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        # Under the row lock, so a tick firing now commits before its ticks are collected.
        pgflow_schedules.delete([obj.pk])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        pgflow_schedules.delete(queryset.values_list("pk", flat=True))

    @admin.display(description="workflow", ordering="workflow_class")
    def workflow(self, row: Schedule) -> str:
        return row.workflow_class.rsplit(".", 1)[-1]

    @admin.display(description="rule")
    def rule(self, row: Schedule) -> str:
        try:
            return str(row.rule().describe())
        except DefinitionError as exc:
            return f"invalid: {exc}"

    @admin.display(description="last run")
    def last_run_status(self, row: Schedule) -> str:
        if row.last_run is None:
            return "—"
        url = reverse("admin:pgflow_workflowrun_change", args=[row.last_run.pk])
        return format_html('<a href="{}">#{} {}</a>', url, row.last_run.pk, row.last_run.status)

    @admin.display(description="last run")
    def last_run_link(self, row: Schedule) -> str:
        return self.last_run_status(row)

    @admin.display(description="state")
    def state(self, row: Schedule) -> str:
        if not row.enabled:
            return f"disabled: {row.disabled_reason}" if row.disabled_reason else "disabled"
        return "paused" if row.paused else "active"

    @admin.action(description="Pause the selected schedules", permissions=["change"])
    def pause_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for row in queryset:
            pgflow_schedules.set_paused(row.pk, True)
        self.message_user(request, f"Paused {len(queryset)} schedule(s).", messages.SUCCESS)

    @admin.action(description="Resume the selected schedules", permissions=["change"])
    def resume_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for row in queryset:
            pgflow_schedules.set_paused(row.pk, False)
        self.message_user(
            request, f"Resumed {len(queryset)} schedule(s); ticks due while paused are skipped.", messages.SUCCESS
        )

    @admin.action(description="Start a run of the selected schedules now", permissions=["change"])
    def start_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        started, failed = [], []
        for row in queryset:
            try:
                started.append(pgflow_schedules.start_now(row.pk, actor=request.user).pk)
            except PgflowError as exc:
                failed.append(f"{row}: {exc}")
        if started:
            self.message_user(request, f"Started run(s) {', '.join(f'#{pk}' for pk in started)}.", messages.SUCCESS)
        for problem in failed:
            self.message_user(request, f"Not started: {problem}", messages.ERROR)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        row = self.get_object(request, unquote(object_id))
        context = dict(extra_context or {})
        if row is not None:
            try:
                context["upcoming"] = pgflow_schedules.upcoming(row, 5)
                context["upcoming_zone"] = row.timezone
            except DefinitionError as exc:
                context["upcoming_error"] = str(exc)
            context["recent_ticks"] = list(row.ticks.select_related("run").order_by("-id")[:20])
        return super().change_view(request, object_id, form_url, extra_context=context)


from . import alerts_admin  # noqa: E402, F401 - registers the alert rules and alerts
