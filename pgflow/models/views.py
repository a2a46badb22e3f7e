"""Saved views: a search of the run list (pgflow.search's language) kept under a name,
written only by the admin (pgflow_dashboard). The run list links each one, and an alert rule
of kind ``runs_matching`` can count a view's runs by its name.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class SavedView(models.Model):
    name = models.CharField(max_length=100, unique=True, help_text="shown on the run list, e.g. 'gold paused'")
    query = models.CharField(max_length=500, help_text="a run list search, e.g. attr.plan:gold status:paused")
    # No database constraint: pgflow's tables may live in a database of their own (PGFLOW["DATABASE"]),
    # without the user table; the view outlives its author.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
        related_name="+",
        editable=False,
    )
    created_at = models.DateTimeField(editable=False)

    class Meta:
        db_table = "pgflow_saved_view"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
