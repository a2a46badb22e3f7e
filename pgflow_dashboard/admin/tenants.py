"""Runs' tenants in the dashboard: the run list's tenant filter (``?tenant=<key>``) and column,
and ``PGFLOW["TENANT_VISIBLE"]``'s restriction of which tenants' runs a staff user sees (the
run list, a run's page and endpoints, a subject's runs inline; pgflow_dashboard.mcp the same
for the token's user).

A restricted user sees the runs of their tenants only: another's run is a 404, as a run that
does not exist, and the insights count their tenants' runs only (another's is a 403).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import connections
from django.db.models import QuerySet
from django.http import HttpRequest

from pgflow import readdb
from pgflow.models import WorkflowRun

from ..tenancy import in_use, scoped, visible_to

__all__ = ["TenantFilter", "in_use", "scoped", "visible_to"]

MAX_LISTED_TENANTS = 200  # the filter's choices at most (the search box's tenant: finds any)

# The distinct tenants of the runs, by a loose index scan of pgflow_run_tenant: one index
# probe per tenant, where SELECT DISTINCT would read every run's index entry.
TENANTS_SQL = """
WITH RECURSIVE keys AS (
    (SELECT tenant FROM pgflow_run WHERE tenant IS NOT NULL ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT r.tenant FROM pgflow_run r WHERE r.tenant > keys.tenant ORDER BY r.tenant LIMIT 1)
    FROM keys WHERE keys.tenant IS NOT NULL
)
SELECT tenant FROM keys WHERE tenant IS NOT NULL LIMIT %s
"""


def tenant_keys() -> list[str]:
    with connections[readdb.alias()].cursor() as cursor:
        cursor.execute(TENANTS_SQL, [MAX_LISTED_TENANTS])
        return [row[0] for row in cursor.fetchall()]


class TenantFilter(admin.SimpleListFilter):
    """The runs of one tenant; the choices are the tenants the user sees."""

    title = "tenant"
    parameter_name = "tenant"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        keys = visible_to(request)
        listed = sorted(keys) if keys is not None else tenant_keys()
        return [(key, key) for key in listed]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = self.value()
        return queryset.filter(tenant=value) if value else queryset
