"""pgflow for django-tenants (a PostgreSQL schema per tenant)::

    PGFLOW = {
        "TENANT": pgflow.contrib.tenants.TENANT,
        "TENANT_CONTEXT": pgflow.contrib.tenants.TENANT_CONTEXT,
    }

A run started while a tenant's schema is current (a request routed by django-tenants'
middleware, ``schema_context("acme")`` in a shell or a task) belongs to that tenant, its key
the schema name; the worker runs each body, condition and wait method of the run in
``schema_context(<its tenant>)``, so its ORM queries read that tenant's tables. A run started
in the public schema has no tenant. Keep ``pgflow`` in ``SHARED_APPS`` (its tables live in
the public schema, which django-tenants keeps on every tenant's search path).

The two settings are dotted paths, so a settings module can name them before Django (and
django-tenants) is set up; django-tenants is imported when they are first called.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

TENANT = "pgflow.contrib.tenants.current_schema"
TENANT_CONTEXT = "pgflow.contrib.tenants.schema_context"


def current_schema() -> str | None:
    """The schema name of the current tenant on django-tenants' database; None in the public schema."""
    # lazy: an optional extra (django-tenants), and this module is named from settings
    from django.db import connections
    from django_tenants.utils import get_public_schema_name, get_tenant_database_alias

    connection = connections[get_tenant_database_alias()]
    tenant = getattr(connection, "tenant", None)
    schema = getattr(tenant, "schema_name", None) or getattr(connection, "schema_name", None)
    if not schema or schema == get_public_schema_name():
        return None
    return str(schema)


def schema_context(tenant: str) -> AbstractContextManager[Any]:
    """django-tenants' ``schema_context`` for the tenant's schema (the run's tenant key)."""
    # lazy: an optional extra (django-tenants), and this module is named from settings
    from django_tenants.utils import schema_context as entered

    return entered(tenant)
