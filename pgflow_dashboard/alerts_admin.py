"""Alert rules (editable; those declared in ``PGFLOW["ALERTS"]`` are read-only here) and the
alerts they raised, with acknowledge and mute actions that go through
``pgflow.observability.alerts``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from pgflow.core import alerting
from pgflow.models import Alert, AlertDelivery, AlertRule
from pgflow.observability import alerts


class AlertRuleForm(forms.ModelForm):
    class Meta:
        model = AlertRule
        fields = ("name", "kind", "params", "targets", "cooldown", "enabled", "muted_until")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        params = data.get("params") or {}
        if not isinstance(params, dict):
            raise forms.ValidationError({"params": "must be a JSON object of the kind's parameters"})
        raw = {**params, "name": data.get("name"), "kind": data.get("kind"), "targets": data.get("targets") or []}
        problems = alerting.rule_problems(raw)
        if problems:
            raise forms.ValidationError(problems)
        data["params"] = alerting.parse(raw).params  # durations as seconds, defaults filled in
        return data


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    form = AlertRuleForm
    list_display = ("name", "kind", "origin", "enabled", "muted_until", "cooldown")
    list_filter = ("kind", "origin", "enabled")
    actions = ("mute_hour", "mute_day", "unmute")

    def get_readonly_fields(self, request: HttpRequest, obj: AlertRule | None = None) -> tuple[str, ...]:
        if obj is not None and obj.origin == AlertRule.Origin.SETTINGS:
            return ("name", "kind", "params", "targets", "cooldown", "origin")  # PGFLOW["ALERTS"] owns them
        return ("origin",)

    def save_model(self, request: HttpRequest, obj: AlertRule, form: Any, change: bool) -> None:
        if not change:
            obj.created_at = timezone.now()
        super().save_model(request, obj, form, change)

    @admin.action(description="Mute for an hour")
    def mute_hour(self, request: HttpRequest, queryset: QuerySet[AlertRule]) -> None:
        count = alerts.mute(list(queryset.values_list("pk", flat=True)), until=timezone.now() + timedelta(hours=1))
        self.message_user(request, f"{count} rule(s) muted for an hour", messages.SUCCESS)

    @admin.action(description="Mute for a day")
    def mute_day(self, request: HttpRequest, queryset: QuerySet[AlertRule]) -> None:
        count = alerts.mute(list(queryset.values_list("pk", flat=True)), until=timezone.now() + timedelta(days=1))
        self.message_user(request, f"{count} rule(s) muted for a day", messages.SUCCESS)

    @admin.action(description="Unmute")
    def unmute(self, request: HttpRequest, queryset: QuerySet[AlertRule]) -> None:
        count = alerts.mute(list(queryset.values_list("pk", flat=True)), until=None)
        self.message_user(request, f"{count} rule(s) unmuted", messages.SUCCESS)


class DeliveryInline(admin.TabularInline):
    model = AlertDelivery
    fields = ("event", "target", "attempts", "delivered_at", "next_at", "last_error")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    """Each firing and its resolution; written by the sweep only."""

    list_display = ("rule", "fired_at", "resolved_at", "value", "message", "acknowledged_by")
    list_filter = ("rule", ("resolved_at", admin.EmptyFieldListFilter))
    ordering = ("-fired_at",)
    readonly_fields = ("rule", "fired_at", "resolved_at", "value", "message", "acknowledged_at", "acknowledged_by")
    inlines = (DeliveryInline,)
    actions = ("acknowledge", "mute_rule")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Acknowledge", permissions=["view"])
    def acknowledge(self, request: HttpRequest, queryset: QuerySet[Alert]) -> None:
        count = alerts.acknowledge(
            list(queryset.values_list("pk", flat=True)), actor=f"user:{request.user.get_username()}", at=timezone.now()
        )
        self.message_user(request, f"{count} alert(s) acknowledged", messages.SUCCESS)

    @admin.action(description="Mute their rules for a day", permissions=["view"])
    def mute_rule(self, request: HttpRequest, queryset: QuerySet[Alert]) -> None:
        count = alerts.mute(
            sorted(set(queryset.values_list("rule_id", flat=True))), until=timezone.now() + timedelta(days=1)
        )
        self.message_user(request, f"{count} rule(s) muted for a day", messages.SUCCESS)
