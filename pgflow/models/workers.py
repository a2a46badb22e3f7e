"""Worker presence: one row per running ``pgflow_worker``, written only by
``pgflow.runtime.presence`` (and deleted by the sweep once its heartbeat is past the lease).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import models

from ..conf import pgflow_settings


class WorkerQuerySet(models.QuerySet["Worker"]):
    def live(self, now: Any) -> WorkerQuerySet:
        """Workers whose last heartbeat is younger than the lease: the others are gone."""
        return self.filter(heartbeat_at__gte=now - timedelta(seconds=pgflow_settings.seconds("LEASE")))


class Worker(models.Model):
    """One running ``pgflow_worker`` process, written only by ``pgflow.runtime.presence``:
    inserted when it starts, updated once per heartbeat interval, deleted on a clean stop.
    A row whose heartbeat is older than the lease belongs to a worker that is gone (killed,
    or cut off from the database); the sweep deletes it later."""

    name = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField()
    version = models.CharField(max_length=40)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    steps_run = models.PositiveBigIntegerField(default=0)
    steps_in_progress = models.PositiveIntegerField(default=0)

    objects = WorkerQuerySet.as_manager()

    class Meta:
        db_table = "pgflow_worker"
        indexes = [models.Index(fields=["heartbeat_at"], name="pgflow_worker_heartbeat")]

    def __str__(self) -> str:
        return self.name
