"""A fan_out step's batch and its members, written by ``pgflow.store`` (opening the batch,
counting each member's outcome under the run's lock) and by ``pgflow.fanout`` (which marks
a member enqueued on django-q2, and repairs the members that were never enqueued).
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from .runs import Step, WorkflowRun


class Batch(models.Model):
    """A fan_out step's django-q2 tasks, waited for as one."""

    class Status(models.TextChoices):
        OPEN = "open"
        FINISHED = "finished"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, db_constraint=False)  # opened under the run's lock
    step = models.ForeignKey(  # no database key into the partitioned pgflow_step (Event.step)
        Step, null=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )
    description = models.CharField(max_length=400)
    properties = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    total = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "pgflow_batch"
        verbose_name_plural = "batches"
        indexes = [models.Index(fields=["status", "finished_at"], name="pgflow_batch_status")]

    def __str__(self) -> str:
        return self.description


class BatchMember(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SKIPPED = "skipped"  # never ran: its step stopped waiting (the run was cancelled, paused or skipped)

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="members")
    position = models.PositiveIntegerField()
    func = models.CharField(max_length=300)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    task_id = models.CharField(max_length=64, null=True, blank=True, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    # batch.add_run(): the child run this member stands for (no django-q2 task then). It
    # counts when the child finishes (succeeded) or is cancelled (failed).
    # Still a foreign key, unlike the other links between runs (pgflow.store.links): its writer,
    # a parent linking an existing keyed run, holds the parent's lock, where holding the child
    # would wait for a child's lock under a parent's (docs/architecture.md, "Lock order between
    # runs"). The key's own check at commit takes the same lock; that is left as it was.
    child = models.ForeignKey(WorkflowRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        db_table = "pgflow_batch_member"
        constraints = [models.UniqueConstraint(fields=["batch", "position"], name="pgflow_member_position")]
        indexes = [
            models.Index(fields=["status", "enqueued_at"], name="pgflow_member_pending", condition=Q(status="pending"))
        ]

    def __str__(self) -> str:
        return f"{self.func} ({self.status})"
