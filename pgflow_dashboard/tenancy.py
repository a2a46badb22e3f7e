"""Which tenants' runs a request's user sees (``PGFLOW["TENANT_VISIBLE"]``), apart from the
admin package so that any dashboard module may import it at its top (the admin package
imports the site, which imports the pages)."""

from __future__ import annotations

from typing import TypeVar

from django.db.models import Model, QuerySet
from django.http import HttpRequest

from pgflow import tenants
from pgflow.conf import pgflow_settings

Tenanted = TypeVar("Tenanted", bound=Model)  # WorkflowRun, Schedule


def in_use() -> bool:
    """Whether the project has tenants (any of the tenant settings): the run list's tenant
    column and filter and the insights' tenant select show."""
    return any(getattr(pgflow_settings, name) is not None for name in ("TENANT", "TENANT_CONTEXT", "TENANT_VISIBLE"))


def visible_to(request: HttpRequest) -> frozenset[str] | None:
    """The tenants whose runs the request's user sees; None for every tenant."""
    if hasattr(request, "_pgflow_tenants"):
        cached: frozenset[str] | None = request._pgflow_tenants
        return cached
    found = tenants.visible(request.user)
    request._pgflow_tenants = found  # type: ignore[attr-defined] # asked once per request
    return found


def scoped(rows: QuerySet[Tenanted], keys: frozenset[str] | None) -> QuerySet[Tenanted]:
    """``rows`` (runs, or schedules: a model with a ``tenant`` column) narrowed to the tenants
    ``keys`` (None: as they are); a row of no tenant is out of a restricted user's sight."""
    return rows if keys is None else rows.filter(tenant__in=sorted(keys))


class NotVisible(PermissionError):
    """A tenant asked for that the user does not see; the message names those they do."""


def narrowed(keys: frozenset[str] | None, chosen: str | None) -> tuple[str, ...] | None:
    """The tenants the insights count for a user who sees ``keys`` (None: every tenant) and
    asked for ``chosen`` (``?tenant=``, the MCP tools' ``tenant``; None or "": not asked).

    ``(chosen,)`` when the user sees it (:class:`NotVisible` when not, ValueError when it is
    no tenant key), else the user's own tenants, or None: every run, from the rollup.
    """
    if chosen:
        tenants.checked(chosen, "tenant")
        if keys is not None and chosen not in keys:
            mine = ", ".join(sorted(keys)) or "none"
            raise NotVisible(f"your user does not see the runs of tenant {chosen!r} (the tenants you see: {mine})")
        return (chosen,)
    return None if keys is None else tuple(sorted(keys))
