"""What the claim checks before it lets an attempt through: the limits' gates and the
paused queues.

``Gate`` rows are written only by ``pgflow.store`` (the claim, and the scheduling that
creates them); ``QueueState`` rows only by ``pgflow.queues`` (``pause_queue`` and
``resume_queue``). The claim's SQL reads both.
"""

from __future__ import annotations

from typing import Any

from django.db import models


class ListColumn(models.Field):
    """A PostgreSQL array column (``bigint[]``, ``timestamptz[]`` …) read and written as a
    Python list, which psycopg adapts both ways. Not ``django.contrib.postgres``'s ArrayField:
    on Django 6 that asks every project to add ``django.contrib.postgres`` to INSTALLED_APPS,
    for two columns that only the claim's SQL reads."""

    def __init__(self, *args: Any, element: str = "bigint", **kwargs: Any) -> None:
        self.element = element
        super().__init__(*args, **kwargs)

    def db_type(self, connection: Any) -> str:
        return f"{self.element}[]"

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        kwargs["element"] = self.element
        # The public path (migration 0010's), not this module's: a new migration names
        # pgflow.models.ListColumn, so moving the class inside the package never breaks one.
        return name, "pgflow.models.ListColumn", args, kwargs

    def get_prep_value(self, value: Any) -> Any:
        return None if value is None else list(value)


class Gate(models.Model):
    """One key of a limit (pgflow.core.limits names the kinds), written only by the claim:
    locked ``FOR UPDATE SKIP LOCKED`` it reads its latest version, so two claims never both
    fill its last place. ``holders``: the attempts (a singleton's runs) let through that may
    still hold a place; ``starts``: a rate's recent starts. Rows are created when an attempt
    needing them is scheduled."""

    name = models.CharField(max_length=320, primary_key=True)
    size = models.PositiveIntegerField(default=1)  # max in progress, or starts per window
    per = models.FloatField(default=0)  # a rate's window, seconds
    holders = ListColumn(element="bigint", default=list)
    starts = ListColumn(element="timestamptz", default=list)
    served_at = models.DateTimeField(null=True, blank=True)  # the last claim through it: round-robin

    class Meta:
        db_table = "pgflow_gate"

    def __str__(self) -> str:
        return self.name


class QueueState(models.Model):
    """A queue an operator paused (``pgflow.pause_queue``): its steps are not claimed. The row
    stays after a resume as the record of who did what last."""

    queue = models.CharField(max_length=100, primary_key=True)
    paused = models.BooleanField(default=False)
    changed_at = models.DateTimeField()
    changed_by = models.CharField(max_length=200, default="system")

    class Meta:
        db_table = "pgflow_queue_state"
        verbose_name = "queue"  # the admin's Queues page
        verbose_name_plural = "queues"

    def __str__(self) -> str:
        return f"{self.queue} ({'paused' if self.paused else 'running'})"
