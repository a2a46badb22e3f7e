"""Which tenants' runs a request's user sees (``PGFLOW["TENANT_VISIBLE"]``), apart from the
admin package so that any dashboard module may import it at its top (the admin package
imports the site, which imports the pages)."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpRequest

from pgflow import tenants
from pgflow.models import WorkflowRun


def visible_to(request: HttpRequest) -> frozenset[str] | None:
    """The tenants whose runs the request's user sees; None for every tenant."""
    if hasattr(request, "_pgflow_tenants"):
        cached: frozenset[str] | None = request._pgflow_tenants
        return cached
    found = tenants.visible(request.user)
    request._pgflow_tenants = found  # type: ignore[attr-defined] # asked once per request
    return found


def scoped(runs: QuerySet[WorkflowRun], keys: frozenset[str] | None) -> QuerySet[WorkflowRun]:
    """``runs`` narrowed to the tenants ``keys`` (None: as they are)."""
    return runs if keys is None else runs.filter(tenant__in=sorted(keys))
