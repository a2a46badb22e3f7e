"""Schedules: the form an admin-made schedule is checked with, and the schedules admin with
its pause, resume and start-now actions, all through :mod:`pgflow.schedules`."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.validators import ProhibitNullCharactersValidator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from pgflow import schedules as pgflow_schedules
from pgflow import tenants
from pgflow.conf import pgflow_settings
from pgflow.core import ticks
from pgflow.exceptions import DefinitionError, PgflowError
from pgflow.models import Schedule

from .. import tenancy
from ..forms import JSONObjectInput
from .tenants import tenant_keys


class TenantInput(forms.TextInput):
    """A tenant key typed, with the tenants already known offered as suggestions."""

    def __init__(self, known: list[str]) -> None:
        super().__init__(attrs={"size": 40, "spellcheck": "false", "autocomplete": "off"})
        self.known = known

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None) -> SafeString:
        listed = f"{name}-known-tenants"
        field = super().render(name, value, {**(attrs or {}), "list": listed}, renderer)
        options = format_html_join("", '<option value="{}">', ((key,) for key in self.known))
        return format_html('{}<datalist id="{}">{}</datalist>', field, listed, options)


def known_tenants() -> list[str]:
    """The tenants of runs and of schedules, sorted: the suggestions of the tenant field."""
    of_schedules = Schedule.objects.filter(tenant__isnull=False).values_list("tenant", flat=True).distinct()
    return sorted({*tenant_keys(), *(str(key) for key in of_schedules)})


class ScheduleForm(forms.ModelForm):
    """An admin-made schedule: the class chosen from the registered ones; the rest checked by
    ``pgflow.core.ticks.problems``, the check a declared ``pgflow.Schedule`` makes, each
    error on the field it concerns. The tenant its runs belong to: any tenant key
    (``pgflow.tenants.checked``), or for a user PGFLOW["TENANT_VISIBLE"] restricts, one of
    theirs (``visible_tenants``, set by the admin for the request's user)."""

    visible_tenants: frozenset[str] | None = None  # None: every tenant
    workflow_class = forms.ChoiceField(choices=())
    tenant = forms.CharField(
        required=False,
        help_text="the tenant its runs belong to (run.tenant), their code run in its context; empty: none",
    )
    input = JSONObjectInput(
        required=False,
        initial=dict,
        help_text='a JSON object, e.g. {"plan": "pro"}',
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60, "spellcheck": "false"}),
    )

    class Meta:
        model = Schedule
        fields = [
            "workflow_class",
            "name",
            "cron",
            "every",
            "timezone",
            "input",
            "overlap",
            "catch_up",
            "tenant",
            "paused",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "workflow_class" in self.fields:  # read-only on a code-declared schedule
            paths = [workflow.workflow_path() for workflow in pgflow_schedules.workflow_classes()]
            self.fields["workflow_class"].choices = [(path, path) for path in paths]  # type: ignore[attr-defined]
        if "tenant" in self.fields:
            self.fields["tenant"] = self._tenant_field(self.fields["tenant"])

    def _tenant_field(self, typed: forms.Field) -> forms.Field:
        keys = self.visible_tenants
        if keys is None:
            typed.widget = TenantInput(known_tenants())
            # clean_tenant's check names a NUL with the rest of what a tenant key may not be
            typed.validators = [v for v in typed.validators if not isinstance(v, ProhibitNullCharactersValidator)]
            return typed
        # A restricted user sees the runs of their tenants only: a run of no tenant, or of
        # another, would be out of their sight. Editing keeps what the schedule had.
        current = self.instance.tenant if self.instance.pk else None
        choices = [(key, key) for key in sorted({*keys, *([current] if current else [])})]
        keeps_none = self.instance.pk is not None and current is None
        mine = (", ".join(sorted(keys)) or "none").replace("%", "%%")  # the message is %-formatted
        return forms.ChoiceField(
            choices=[("", "—"), *choices] if keeps_none else choices,
            required=not keeps_none,
            help_text=typed.help_text,
            error_messages={
                "invalid_choice": f"your user does not see the runs of tenant %(value)r (the tenants you see: {mine})"
            },
        )

    def clean_tenant(self) -> str | None:
        value = (self.cleaned_data.get("tenant") or "").strip()
        if not value:
            return None
        try:
            return tenants.checked(value, "tenant")
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

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

    class Media:  # the dashboard's styles: tables that fit a phone, long values that wrap
        css = {"all": ("pgflow_dashboard/style.css",)}
        js = ("pgflow_dashboard/times.js",)  # moments in the viewer's own zone

    form = ScheduleForm
    change_form_template = "admin/pgflow_dashboard/schedule_change_form.html"
    list_display = ["name", "workflow", "rule", "next_tick_at", "last_tick_at", "last_run_status", "state", "origin"]
    list_filter = ["origin", "enabled", "paused", "overlap"]
    search_fields = ["name", "workflow_class"]
    actions = ["pause_schedules", "resume_schedules", "start_now"]
    list_select_related = ["last_run"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        # PGFLOW["TENANT_VISIBLE"], as the run list: a restricted user's list, pages and
        # actions hold only their tenants' schedules (another's, or one of no tenant, is not found).
        return tenancy.scoped(super().get_queryset(request), tenancy.visible_to(request))

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = list(super().get_list_display(request))
        if tenancy.in_use():  # as the run list: a tenant column only in a project with tenants
            shown.insert(shown.index("workflow") + 1, "tenant_label")
        return shown

    def get_exclude(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        excluded = list(super().get_exclude(request, obj) or ())
        return excluded if _tenant_shown(obj) else [*excluded, "tenant"]

    def get_form(self, request: HttpRequest, obj: Schedule | None = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        # The user's tenants, for the tenant field's choices (a form has no request of its own).
        return type(form.__name__, (form,), {"visible_tenants": tenancy.visible_to(request)})

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> list[str]:
        shown = ["origin", "state", "next_tick_at", "last_tick_at", "last_run_link"]
        if obj is not None and obj.origin == Schedule.Origin.CODE:
            declared = [name for name in ScheduleForm.Meta.fields[:-1] if name != "tenant" or _tenant_shown(obj)]
            return [*declared, *shown]
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

    @admin.display(description="tenant", ordering="tenant")
    def tenant_label(self, row: Schedule) -> str:
        return row.tenant or "—"

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


def _tenant_shown(obj: Schedule | None) -> bool:
    """Whether the schedule's page has a tenant field: in a project with tenants, or when it has one."""
    return tenancy.in_use() or (obj is not None and obj.tenant is not None)
