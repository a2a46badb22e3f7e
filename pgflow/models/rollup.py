"""The hourly rollup, written only by ``pgflow.rollup``; the insights read it.

Each figure is counted in the hour it became final (see ``pgflow.rollup``), so a rolled hour
never changes. ``hours`` is 1 for an hour's row and 24 for a day's, summed from its hours.
"""

from __future__ import annotations

from django.db import models


class RollupState(models.Model):
    """Where the rollup stands: one row; every hour before ``rolled_until`` is rolled."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    rolled_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "pgflow_rollup_state"

    def __str__(self) -> str:
        return f"rolled until {self.rolled_until}"


class RunRollup(models.Model):
    """The runs of one workflow class in one hour or day: started (by ``created_at``),
    finished and cancelled (by ``finished_at``), and the durations of those finished."""

    start = models.DateTimeField()
    hours = models.PositiveSmallIntegerField()
    workflow_class = models.CharField(max_length=255)
    started = models.PositiveIntegerField(default=0)
    finished = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    # pgflow.core.histogram of finished_at - created_at, {"<bucket>": count}
    durations = models.JSONField(default=dict)

    class Meta:
        db_table = "pgflow_rollup_run"
        constraints = [
            models.UniqueConstraint(fields=["hours", "start", "workflow_class"], name="pgflow_rollup_run_unique")
        ]

    def __str__(self) -> str:
        return f"{self.workflow_class} {self.start:%Y-%m-%d %H:%M} +{self.hours}h"


class StepRollup(models.Model):
    """The attempts of one step of one workflow class that ended in one hour or day: how
    many, how many failed, and histograms of their waited, throttled, queued and ran phases."""

    start = models.DateTimeField()
    hours = models.PositiveSmallIntegerField()
    workflow_class = models.CharField(max_length=255)
    step_name = models.CharField(max_length=200)
    attempts = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    waited = models.JSONField(default=dict)
    throttled = models.JSONField(default=dict, db_default={})  # attempts a limit let through
    queued = models.JSONField(default=dict)
    ran = models.JSONField(default=dict)

    class Meta:
        db_table = "pgflow_rollup_step"
        constraints = [
            models.UniqueConstraint(
                fields=["hours", "start", "workflow_class", "step_name"], name="pgflow_rollup_step_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.workflow_class}.{self.step_name} {self.start:%Y-%m-%d %H:%M} +{self.hours}h"


class FailureRollup(models.Model):
    """Failed attempts that ended in one hour, by the action taken and the error class ("" for none)."""

    start = models.DateTimeField()
    outcome = models.CharField(max_length=32)
    error_class = models.CharField(max_length=255)
    attempts = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "pgflow_rollup_failure"
        constraints = [
            models.UniqueConstraint(fields=["start", "outcome", "error_class"], name="pgflow_rollup_failure_unique")
        ]

    def __str__(self) -> str:
        return f"{self.outcome} {self.error_class} {self.start:%Y-%m-%d %H:%M}"
