"""Worker presence: one row per running ``pgflow_worker``, written only by
``pgflow.runtime.presence`` (and deleted by the sweep once its heartbeat is past the lease);
and the offers of idle workers' slots (``Offer``), written by ``pgflow.store.offers``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import models

from ..conf import pgflow_settings
from .gates import ListColumn


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


class Offer(models.Model):
    """An idle worker's offer of one free slot, for a start to hand its first attempt to.

    Written by ``pgflow.store.offers``: the worker's claim loop makes it (as it goes to sleep
    with nothing due) and withdraws it; a plain autocommit start takes it (deletes it) and
    inserts its attempt already claimed by that worker, so the worker runs it from the
    notification, without a claim of its own. ``backend_pid`` is the worker's listening
    session: a start passes over the offer of a session that has ended (a worker killed), and
    ``until`` bounds how long any other stale offer stands. UNLOGGED (migration 0024): an offer
    is worth nothing after a crash or on a standby, and its churn writes no WAL.
    """

    worker = models.CharField(max_length=200, primary_key=True)
    queues = ListColumn(element="text")
    backend_pid = models.IntegerField()
    until = models.DateTimeField()
    lease = models.DurationField()  # the worker's LEASE: a handed attempt's lease is the worker's

    class Meta:
        db_table = "pgflow_offer"

    def __str__(self) -> str:
        return self.worker
