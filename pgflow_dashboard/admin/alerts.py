"""Alert rules (editable; those declared in ``PGFLOW["ALERTS"]`` are read-only here) and the
alerts they raised, with acknowledge and mute actions that go through
``pgflow.observability.alerts``.

Looking needs the view permission; every write needs a change permission: muting a rule
``change_alertrule``, acknowledging an alert ``change_alert``. A webhook's signing secret is
write-only, as Django treats a password: once saved it is never shown again (the targets read
``"secret": "(unchanged)"``); leaving that word keeps the saved secret, writing another
replaces it.
"""

from __future__ import annotations

import json
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

KEEP = "(unchanged)"  # what a saved webhook secret reads as; left as is, the saved secret is kept


def masked(targets: Any) -> Any:
    """``targets`` with each webhook's secret shown as :data:`KEEP`. Pure."""
    if not isinstance(targets, list | tuple):
        return targets
    return [
        {**target, "secret": KEEP} if isinstance(target, dict) and "secret" in target else target for target in targets
    ]


def unmasked(targets: Any, saved: Any) -> tuple[Any, list[str]]:
    """``targets`` as submitted, with each :data:`KEEP` secret replaced by the saved secret of
    the webhook at the same URL, and the problems (a KEEP with no saved secret to keep). Pure.

    By URL, not by place: a secret is never kept for an address it was not given for."""
    secrets = {
        target.get("webhook"): target["secret"]
        for target in saved or ()
        if isinstance(target, dict) and isinstance(target.get("secret"), str)
    }
    if not isinstance(targets, list | tuple):
        return targets, []
    result, problems = [], []
    for target in targets:
        if isinstance(target, dict) and target.get("secret") == KEEP:
            url = target.get("webhook")
            if url in secrets:
                target = {**target, "secret": secrets[url]}
            else:
                problems.append(f"the webhook {url!r} has no saved secret to keep: write its secret, not {KEEP!r}")
        result.append(target)
    return result, problems


class AlertRuleForm(forms.ModelForm):
    class Meta:
        model = AlertRule
        fields = ("name", "kind", "params", "targets", "cooldown", "enabled", "muted_until")
        help_texts = {
            "targets": (
                f'A saved webhook secret reads "{KEEP}": leave it to keep the secret, or write a new one to replace it.'
            )
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None and "targets" in self.initial:
            self.initial["targets"] = masked(self.initial["targets"])  # a saved secret is never sent to the page

    def clean_targets(self) -> Any:
        saved = AlertRule.objects.filter(pk=self.instance.pk).values_list("targets", flat=True).first()
        targets, problems = unmasked(self.cleaned_data.get("targets"), saved)
        if problems:
            raise forms.ValidationError(problems)
        return targets

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
    class Media:  # the dashboard's styles: tables that fit a phone, long values that wrap
        css = {"all": ("pgflow_dashboard/style.css",)}
        js = ("pgflow_dashboard/times.js",)  # moments in the viewer's own zone

    form = AlertRuleForm
    list_display = ("name", "kind", "origin", "enabled", "muted_until", "cooldown")
    list_filter = ("kind", "origin", "enabled")
    actions = ("mute_hour", "mute_day", "unmute")

    def get_fields(self, request: HttpRequest, obj: AlertRule | None = None) -> Any:
        fields = ["name", "kind", "params", "targets", "cooldown", "enabled", "muted_until", "origin"]
        declared = obj is not None and obj.origin == AlertRule.Origin.SETTINGS
        if obj is not None and (declared or not self.has_change_permission(request, obj)):
            # Shown, not edited: the masked copy, since a read-only field shows the row's own value.
            fields[fields.index("targets")] = "target_list"
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: AlertRule | None = None) -> tuple[str, ...]:
        if obj is not None and obj.origin == AlertRule.Origin.SETTINGS:
            return ("name", "kind", "params", "target_list", "cooldown", "origin")  # PGFLOW["ALERTS"] owns them
        return ("origin", "target_list")

    @admin.display(description="targets")
    def target_list(self, rule: AlertRule) -> str:
        return json.dumps(masked(rule.targets))

    def save_model(self, request: HttpRequest, obj: AlertRule, form: Any, change: bool) -> None:
        if not change:
            obj.created_at = timezone.now()
        super().save_model(request, obj, form, change)

    @admin.action(description="Mute for an hour", permissions=["change"])
    def mute_hour(self, request: HttpRequest, queryset: QuerySet[AlertRule]) -> None:
        count = alerts.mute(list(queryset.values_list("pk", flat=True)), until=timezone.now() + timedelta(hours=1))
        self.message_user(request, f"{count} rule(s) muted for an hour", messages.SUCCESS)

    @admin.action(description="Mute for a day", permissions=["change"])
    def mute_day(self, request: HttpRequest, queryset: QuerySet[AlertRule]) -> None:
        count = alerts.mute(list(queryset.values_list("pk", flat=True)), until=timezone.now() + timedelta(days=1))
        self.message_user(request, f"{count} rule(s) muted for a day", messages.SUCCESS)

    @admin.action(description="Unmute", permissions=["change"])
    def unmute(self, request: HttpRequest, queryset: QuerySet[AlertRule]) -> None:
        count = alerts.mute(list(queryset.values_list("pk", flat=True)), until=None)
        self.message_user(request, f"{count} rule(s) unmuted", messages.SUCCESS)


class DeliveryInline(admin.TabularInline):
    model = AlertDelivery
    verbose_name_plural = "deliveries"  # the model's default reads "alert deliverys"
    fields = ("event", "target_shown", "attempts", "delivered_at", "next_at", "last_error")
    readonly_fields = fields
    extra = 0
    can_delete = False

    @admin.display(description="target")
    def target_shown(self, delivery: AlertDelivery) -> str:
        (shown,) = masked([delivery.target])
        return json.dumps(shown) if isinstance(shown, dict) else str(shown)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    """Each firing and its resolution; written by the sweep only."""

    class Media:  # the dashboard's styles: tables that fit a phone, long values that wrap
        css = {"all": ("pgflow_dashboard/style.css",)}
        js = ("pgflow_dashboard/times.js",)  # moments in the viewer's own zone

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

    def has_acknowledge_permission(self, request: HttpRequest) -> bool:
        # The model's change permission: the rows themselves stay read-only (the sweep writes them).
        return request.user.has_perm("pgflow.change_alert")

    def has_mute_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("pgflow.change_alertrule")

    @admin.action(description="Acknowledge", permissions=["acknowledge"])
    def acknowledge(self, request: HttpRequest, queryset: QuerySet[Alert]) -> None:
        count = alerts.acknowledge(
            list(queryset.values_list("pk", flat=True)), actor=f"user:{request.user.get_username()}", at=timezone.now()
        )
        self.message_user(request, f"{count} alert(s) acknowledged", messages.SUCCESS)

    @admin.action(description="Mute their rules for a day", permissions=["mute"])
    def mute_rule(self, request: HttpRequest, queryset: QuerySet[Alert]) -> None:
        count = alerts.mute(
            sorted(set(queryset.values_list("rule_id", flat=True))), until=timezone.now() + timedelta(days=1)
        )
        self.message_user(request, f"{count} rule(s) muted for a day", messages.SUCCESS)
