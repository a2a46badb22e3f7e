"""Alert rules, their firings and the notices of those, written by
``pgflow.observability.alerts`` (the sweep's check, the rules synced from
``PGFLOW["ALERTS"]``, the deliveries). The admin saves the rules made in it, and mutes
and acknowledges through ``pgflow.observability.alerts``.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.db.models import Q


class AlertRule(models.Model):
    """A condition the sweep checks: declared in ``PGFLOW["ALERTS"]`` (synced here by name) or
    made in the admin. ``kind`` and its parameters are checked by ``pgflow.core.alerting``."""

    class Origin(models.TextChoices):
        SETTINGS = "settings"
        ADMIN = "admin"

    name = models.CharField(max_length=200, unique=True)
    origin = models.CharField(max_length=8, choices=Origin.choices, default=Origin.ADMIN)
    kind = models.CharField(
        max_length=32,
        help_text="phase_p95, runs_paused, steps_overdue, waits_past_deadline, queue_without_worker, failure_rate "
        "or runs_matching",
    )
    params = models.JSONField(
        default=dict,
        blank=True,
        help_text='e.g. {"phase": "queued", "workflow_class": "shop.flows.Onboarding", '
        '"step": null, "window": 3600, "threshold": 30}',
    )
    targets = models.JSONField(
        default=list,
        blank=True,
        help_text='e.g. ["mail_admins", {"webhook": "https://…", "secret": "…"}, {"callable": "myapp.alerts.page"}]',
    )
    cooldown = models.DurationField(
        default=timedelta(minutes=30), help_text="after a firing, the rule does not fire again before this"
    )
    enabled = models.BooleanField(default=True)
    muted_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "pgflow_alert_rule"

    def __str__(self) -> str:
        return self.name


class Alert(models.Model):
    """One firing of a rule; ``resolved_at`` is set when its condition stopped holding."""

    rule = models.ForeignKey(
        AlertRule, on_delete=models.CASCADE, related_name="alerts", db_index=False
    )  # pgflow_alert_rule_fired
    fired_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    value = models.FloatField(null=True, blank=True, help_text="the measured figure when it fired")
    message = models.TextField()
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "pgflow_alert"
        indexes = [models.Index(fields=["rule", "fired_at"], name="pgflow_alert_rule_fired")]
        constraints = [
            models.UniqueConstraint(
                fields=["rule"], condition=Q(resolved_at__isnull=True), name="pgflow_alert_one_open"
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule} at {self.fired_at:%Y-%m-%d %H:%M}"


class AlertDelivery(models.Model):
    """One notice (a firing or a resolution) to one target, retried with backoff until sent."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=16)  # "fired" or "resolved"
    target = models.JSONField()
    attempts = models.PositiveIntegerField(default=0)
    next_at = models.DateTimeField(null=True, blank=True, help_text="None once delivered or given up")
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()

    class Meta:
        db_table = "pgflow_alert_delivery"
        indexes = [models.Index(fields=["next_at"], name="pgflow_delivery_due", condition=Q(next_at__isnull=False))]

    def __str__(self) -> str:
        # The webhook's URL, never its secret (the admin shows this label to view-only users).
        target = self.target
        shown = (target.get("webhook") or target.get("callable")) if isinstance(target, dict) else target
        return f"{self.event} of {self.alert_id} to {shown}"
