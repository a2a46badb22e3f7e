"""Runs' subjects in the run list: the filter by subject type (``?subject_type=<content
type id>`` or ``app_label.model``), with a choice for each model that is the subject of some
run (the search box finds a subject's id: ``?subject_type=12&q=42`` is order 42's runs), and
the link from a run's subject to the subject's own admin page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.contenttypes.models import ContentType
from django.db import connections
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from pgflow import db, readdb
from pgflow.models import WorkflowRun

# The distinct subject types of the runs, by a loose index scan of pgflow_run_subject: one
# index probe per type, where SELECT DISTINCT would read every run's index entry.
SUBJECT_TYPES_SQL = """
WITH RECURSIVE types AS (
    (SELECT subject_type_id FROM pgflow_run WHERE subject_type_id IS NOT NULL ORDER BY subject_type_id LIMIT 1)
    UNION ALL
    SELECT (
        SELECT r.subject_type_id FROM pgflow_run r
        WHERE r.subject_type_id > types.subject_type_id ORDER BY r.subject_type_id LIMIT 1
    )
    FROM types WHERE types.subject_type_id IS NOT NULL
)
SELECT subject_type_id FROM types WHERE subject_type_id IS NOT NULL
"""


def subject_type_ids() -> list[int]:
    with connections[readdb.alias()].cursor() as cursor:
        cursor.execute(SUBJECT_TYPES_SQL)
        return [row[0] for row in cursor.fetchall()]


def admin_url(site: admin.AdminSite, content_type: ContentType, subject_id: str | None) -> str | None:
    """The subject's change page on ``site``, when its model is registered there (no query:
    the subject is not read, so a deleted one links to the admin's "doesn't exist" notice)."""
    model = content_type.model_class()
    if model is None or subject_id is None or not site.is_registered(model):
        return None
    try:
        return reverse(f"{site.name}:{content_type.app_label}_{content_type.model}_change", args=[quote(subject_id)])
    except NoReverseMatch:
        return None


def type_label(content_type: ContentType) -> str:
    return f"{content_type.app_label}.{content_type.model}"


class SubjectTypeFilter(admin.SimpleListFilter):
    title = "subject type"
    parameter_name = "subject_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        types = [ContentType.objects.db_manager(db.alias()).get_for_id(pk) for pk in subject_type_ids()]
        return sorted(((str(ct.pk), type_label(ct)) for ct in types), key=lambda choice: choice[1])

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = (self.value() or "").strip()
        if not value:
            return queryset
        if value.isdigit() and len(value) < 10:
            return queryset.filter(subject_type_id=int(value))
        app_label, dot, model = value.lower().partition(".")
        if not dot:
            return queryset.none()  # neither a content type id nor "app_label.model"
        return queryset.filter(subject_type__app_label=app_label, subject_type__model=model)
