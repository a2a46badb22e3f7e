"""Saved views: a run list search (pgflow.search's language) kept under a name. The run list
offers each as a filter link (:class:`SavedViewFilter`) and a link to save the search it
shows; an alert rule of kind ``runs_matching`` counts a view's runs by its name.

A view is a name and a query, nothing more: the search is read again each time it is used,
so a view follows the runs as they change.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from pgflow import search, searching
from pgflow.models import SavedView, WorkflowRun

PARAMETER = "view"  # the run list's query parameter: ?view=<name>


class SavedViewForm(forms.ModelForm):
    class Meta:
        model = SavedView
        fields = ("name", "query")
        widgets = {"query": forms.TextInput(attrs={"size": 80})}

    def clean_query(self) -> str:
        query = (self.cleaned_data.get("query") or "").strip()
        if not query:
            raise forms.ValidationError(f"a saved view needs a search; {search.ACCEPTED}")
        try:
            search.parse(query)
        except search.SearchError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return query


@admin.register(SavedView)
class SavedViewAdmin(admin.ModelAdmin):
    """Named run list searches: made from the run list's "Save this search" link (the form
    comes filled in) or here; each opens the run list filtered by it."""

    class Media:
        css = {"all": ("pgflow_dashboard/style.css",)}
        js = ("pgflow_dashboard/times.js",)

    form = SavedViewForm
    list_display = ("name", "query", "open_link", "created_by", "created_at")
    search_fields = ("name", "query")
    readonly_fields = ("created_by", "created_at")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("name", "query") if obj is None else ("name", "query", "created_by", "created_at")

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user if request.user.is_authenticated else None
            obj.created_at = timezone.now()
        super().save_model(request, obj, form, change)

    @admin.display(description="runs")
    def open_link(self, view: SavedView) -> str:
        return format_html('<a href="{}">open the run list</a>', run_list_url(self.admin_site.name, view))


def run_list_url(site_name: str, view: SavedView) -> str:
    return f"{reverse(f'{site_name}:pgflow_workflowrun_changelist')}?{urlencode({PARAMETER: view.name})}"


def save_url(site_name: str, query: str) -> str:
    """The add form of a saved view, filled in with ``query``."""
    return f"{reverse(f'{site_name}:pgflow_savedview_add')}?{urlencode({'query': query})}"


class SavedViewFilter(admin.SimpleListFilter):
    """The run list narrowed to a saved view's search, one link per view. A view whose search
    can no longer be read shows nothing and says why."""

    title = "saved view"
    parameter_name = PARAMETER

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in SavedView.objects.order_by("name").values_list("name", flat=True)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        name = self.value()
        if not name:
            return queryset
        query = SavedView.objects.filter(name=name).values_list("query", flat=True).first()
        if query is None:
            messages.error(request, f"No saved view is named {name!r}.")
            return queryset.none()
        try:
            return searching.runs_matching(search.parse(query), queryset)
        except search.SearchError as exc:
            messages.error(request, f"Saved view {name!r} cannot be read: {exc}")
            return queryset.none()

    def get_facet_counts(self, pk_attname: str, filtered_qs: QuerySet[Any]) -> dict[str, Any]:
        return {}  # each view is a search of its own: no count per link
