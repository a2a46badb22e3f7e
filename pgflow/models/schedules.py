"""Schedules and the history of their ticks, written only by ``pgflow.schedules`` (the sync
of the declared schedules, the tick claim) and by the admin's schedule forms, which go
through it.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from ..core.ticks import Rule
from .runs import WorkflowRun


class Schedule(models.Model):
    """A workflow class started on a cron expression or an interval, once per tick.

    Declared in code (``origin="code"``, synced by ``pgflow.schedules.sync``) or made in the
    admin. ``next_tick_at`` is the tick a worker claims next; it moves in the transaction
    that starts the tick's run, so each tick starts once however many workers race.
    """

    class Origin(models.TextChoices):
        CODE = "code"
        ADMIN = "admin"

    workflow_class = models.CharField(max_length=255, help_text="dotted path of the Workflow subclass")
    name = models.CharField(max_length=200)
    origin = models.CharField(max_length=8, choices=Origin.choices, default=Origin.ADMIN)
    cron = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="five fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * *'",
    )
    every = models.DurationField(null=True, blank=True, help_text="an interval instead of cron, e.g. 00:15:00")
    timezone = models.CharField(max_length=64, default="UTC", help_text="IANA name, e.g. Europe/Amsterdam")
    input = models.JSONField(default=dict, blank=True)
    overlap = models.CharField(
        max_length=16,
        default="skip",
        choices=[
            ("allow", "allow: start anyway"),
            ("skip", "skip: no new run while the last is open"),
            ("buffer_one", "buffer_one: start when the open run ends"),
            ("cancel_previous", "cancel_previous: cancel the open run, then start"),
        ],
    )
    catch_up = models.DurationField(
        null=True, blank=True, help_text="missed ticks this recent start after downtime; empty: none"
    )
    # The tenant its runs belong to (a declaration's Schedule(tenant=...)); None: as any start.
    tenant = models.CharField(max_length=100, null=True, blank=True)
    enabled = models.BooleanField(default=True, help_text="off when the declaration left the code")
    paused = models.BooleanField(default=False)
    disabled_reason = models.CharField(max_length=300, blank=True, default="")
    next_tick_at = models.DateTimeField(null=True, blank=True)
    last_tick_at = models.DateTimeField(null=True, blank=True)
    # Not a database foreign key, as WorkflowRun.parent is not; it names the run the tick started.
    last_run = models.ForeignKey(
        WorkflowRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )
    # buffer_one: the tick held while the last run is open; started when it ends.
    buffered_tick_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "pgflow_schedule"
        constraints = [
            models.UniqueConstraint(fields=["workflow_class", "name"], name="pgflow_schedule_unique_name"),
        ]
        indexes = [
            # Shaped like the tick claim: the enabled, unpaused schedules by due time.
            models.Index(fields=["next_tick_at"], name="pgflow_schedule_due", condition=Q(enabled=True, paused=False)),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_class.rsplit('.', 1)[-1]}: {self.name}"

    def rule(self) -> Rule:
        """The ``pgflow.core.ticks.Rule`` of this row."""
        return Rule(cron=self.cron or None, every=self.every, timezone=self.timezone)


class ScheduleTick(models.Model):
    """What became of one tick (or of a span of missed ticks): the history the admin and
    the insights read. ``started_at - tick_at`` is the tick's lag."""

    class Outcome(models.TextChoices):
        STARTED = "started"  # the tick's run started
        MANUAL = "manual"  # "start now" in the admin or the API
        SKIPPED = "skipped"  # overlap: the previous run was open
        BUFFERED = "buffered"  # overlap buffer_one: held until the open run ends
        MISSED = "missed"  # older than catch_up when a worker came back
        CANCELLED_PREVIOUS = "cancelled_previous"  # overlap cancel_previous cancelled this run

    schedule = models.ForeignKey(
        Schedule, on_delete=models.CASCADE, related_name="ticks", db_index=False
    )  # pgflow_tick_schedule
    tick_at = models.DateTimeField()
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    # pgflow_tick_run indexes its non-NULL rows: a lookup by run is by value.
    run = models.ForeignKey(
        WorkflowRun,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
        db_constraint=False,  # as Schedule.last_run
    )
    started_at = models.DateTimeField()
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        db_table = "pgflow_schedule_tick"
        indexes = [
            models.Index(fields=["schedule", "started_at"], name="pgflow_tick_schedule"),
            models.Index(fields=["started_at"], name="pgflow_tick_started"),
            models.Index(fields=["run"], name="pgflow_tick_run", condition=Q(run__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} {self.tick_at:%Y-%m-%d %H:%M} {self.outcome}"
