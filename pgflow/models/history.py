"""Where the filing of history stands, written only by ``pgflow.store.history``."""

from __future__ import annotations

from django.db import models


class HistoryState(models.Model):
    """One row: every ended run up to (``filed_until``, ``filed_id``), in the order of its
    ``finished_at`` and id, has been filed into its day's partitions (or left in the live ones,
    if it was locked then; retention deletes those row by row)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    filed_until = models.DateTimeField(null=True, blank=True)
    filed_id = models.BigIntegerField(default=0)

    class Meta:
        db_table = "pgflow_history_state"

    def __str__(self) -> str:
        return f"filed until {self.filed_until} (run {self.filed_id})"
