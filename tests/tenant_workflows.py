"""Workflows of the tenant tests: each records which tenant's context its code ran in.

``CURRENT`` is the "current tenant" of this process, as a project's middleware or
django-tenants' connection would hold it: ``current_tenant`` (PGFLOW["TENANT"]) reads it,
``entered`` (PGFLOW["TENANT_CONTEXT"]) sets it for the code of a run, and records each entry.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pgflow
from pgflow import fan_out, step

CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("tenant", default=None)
ENTERED: list[str] = []  # the tenants entered, in order


def current_tenant() -> str | None:
    return CURRENT.get()


@contextmanager
def entered(tenant: str) -> Iterator[None]:
    ENTERED.append(tenant)
    token = CURRENT.set(tenant)
    try:
        yield
    finally:
        CURRENT.reset(token)


@contextmanager
def as_tenant(tenant: str | None) -> Iterator[None]:
    """The caller's "request" for ``tenant``."""
    token = CURRENT.set(tenant)
    try:
        yield
    finally:
        CURRENT.reset(token)


class Seen(pgflow.Workflow):
    """Its body, skip_if, cancel_if and wait each note the tenant current when called."""

    @pgflow.cancel_if
    def noted_cancel(self) -> bool:
        NOTES.append(f"cancel_if:{CURRENT.get()}")
        return False

    def noted_skip(self) -> bool:
        NOTES.append(f"skip_if:{CURRENT.get()}")
        return False

    def noted_wait(self) -> timedelta:
        NOTES.append(f"wait:{CURRENT.get()}")
        return timedelta(0)

    @step
    def first(self) -> dict[str, str | None]:
        return {"tenant": CURRENT.get()}

    @step(skip_if="noted_skip", wait="noted_wait")
    def second(self) -> dict[str, str | None]:
        return {"tenant": CURRENT.get()}


NOTES: list[str] = []  # "<what>:<tenant current then>" from Seen's conditions and wait


class SeenAsync(pgflow.Workflow):
    @step
    async def only(self) -> dict[str, str | None]:
        return {"tenant": CURRENT.get()}


class Spreads(pgflow.Workflow):
    """A fan_out whose child runs belong to the parent's tenant."""

    @fan_out
    def spread(self, batch) -> dict[str, str | None]:
        batch.add_run(Seen)
        batch.add_run(Seen)
        return {"tenant": CURRENT.get()}


class PerTenant(pgflow.Workflow):
    """A limit and a rate by the run's tenant, with no tenant method of its own."""

    @step(concurrency=pgflow.Limit(max=2, key="tenant"), rate=pgflow.Rate(limit=5, per=60, key="tenant"))
    def only(self) -> None:
        return None


class OwnTenantMethod(pgflow.Workflow):
    """A class with a ``tenant`` method keeps it as the limit's key."""

    def tenant(self) -> str:
        return "from-the-method"

    @step(concurrency=pgflow.Limit(max=2, key="tenant"))
    def only(self) -> None:
        return None


def visible_tenants(user) -> set[str] | None:
    """PGFLOW["TENANT_VISIBLE"] of the dashboard tests: "acme-…" users see acme's runs,
    "globex-…" users globex's, everyone else every tenant's."""
    prefix = user.get_username().partition("-")[0]
    return {prefix} if prefix in ("acme", "globex") else None


class Nightly(pgflow.Workflow):
    """Schedules per tenant: acme's runs and globex's, and one of no tenant."""

    schedules = [
        pgflow.Schedule(name="acme nightly", cron="0 0 1 1 *", tenant="acme"),
        pgflow.Schedule(name="globex nightly", cron="0 0 1 1 *", tenant="globex", overlap="allow"),
        pgflow.Schedule(name="shared nightly", cron="0 0 1 1 *"),
    ]

    @step
    def only(self) -> dict[str, str | None]:
        return {"tenant": CURRENT.get()}
