"""Workflows with limits, for the flow-control tests (importable by worker subprocesses)."""

from __future__ import annotations

import time
from datetime import timedelta

import pgflow
from pgflow import step


class PerTenant(pgflow.Workflow):
    """At most two attempts of a tenant in progress at once; no tenant: unlimited."""

    queue = "limits"
    concurrency = pgflow.Limit(max=2, key="tenant")

    def tenant(self):
        return self.input.get("tenant")

    @step
    def work(self):
        time.sleep(self.input.get("sleep", 0.2))


class Wide(pgflow.Workflow):
    """A wide limit per tenant, for round-robin: the limit is not what holds a tenant back."""

    queue = "fair"

    def tenant(self):
        return self.input["tenant"]

    @step(concurrency=pgflow.Limit(max=1000, key="tenant"))
    def work(self):
        time.sleep(0.05)


class Throttled(pgflow.Workflow):
    """Three starts a second per tenant."""

    queue = "limits"

    @step(rate=pgflow.Rate(limit=3, per=timedelta(seconds=1), key=lambda workflow: workflow.input["tenant"]))
    def call_api(self):
        time.sleep(0.01)


class OnePerAccount(pgflow.Workflow):
    """One open run per account; a second start waits its turn."""

    queue = "limits"
    singleton = pgflow.Singleton(key="account")

    def account(self):
        return self.input["account"]

    @step
    def first(self):
        time.sleep(0.1)

    @step
    def second(self):
        time.sleep(0.1)


class OnlyOne(pgflow.Workflow):
    """One open run per account; a second start is refused."""

    queue = "limits"
    singleton = pgflow.Singleton(key="account", on_conflict="skip")

    def account(self):
        return self.input["account"]

    @step
    def only(self):
        time.sleep(0.1)


class ReadsItsRun(pgflow.Workflow):
    """A plain step (quick-prepared: no lock before its body) that returns every field of
    ``self.run`` as it reads it, for comparison with the row."""

    queue = "runfields"

    @step
    def report(self):
        from pgflow.models import WorkflowRun  # the model, for its field list (a worker imports it late)

        return {f.attname: _plain(getattr(self.run, f.attname)) for f in WorkflowRun._meta.concrete_fields}


def _plain(value):
    """A field's value as JSON can hold it: timestamps as ISO text."""
    return value.isoformat() if hasattr(value, "isoformat") else value


class OddKeys(pgflow.Workflow):
    """A limit whose key method raises, or returns text PostgreSQL cannot store, for its
    second step: the key is computed when the first step's outcome is applied."""

    queue = "limits"

    def tenant(self):
        if self.input["tenant"] == "raise":
            raise LookupError("no tenant for this run")
        return "acme\x00evil" if self.input["tenant"] == "nul" else self.input["tenant"]

    @step
    def first(self):
        return "done"

    @step(concurrency=pgflow.Limit(max=2, key="tenant"))
    def second(self):
        return "done"


class OddSingleton(pgflow.Workflow):
    """A singleton whose key method raises, or returns text PostgreSQL cannot store."""

    queue = "limits"
    singleton = pgflow.Singleton(key="account")

    def account(self):
        if self.input["account"] == "raise":
            raise LookupError("no account for this run")
        return "acme\x00evil" if self.input["account"] == "nul" else self.input["account"]

    @step
    def only(self):
        return "done"


class PerTenantOfThree(PerTenant):
    """PerTenant with its max changed to 3 (the same keys, so the same gates)."""

    concurrency = pgflow.Limit(max=3, key="tenant")
