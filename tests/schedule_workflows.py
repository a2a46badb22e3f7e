"""Workflows with schedules, for the schedule tests. Their rules are chosen so a worker
left running by another test never finds them due by itself (yearly ticks)."""

from __future__ import annotations

import pgflow

RARE = "0 0 1 1 *"  # once a year: due only when a test moves the clock or the next tick


class Report(pgflow.Workflow):
    schedules = [
        pgflow.Schedule(name="nightly", cron=RARE, timezone="Europe/Amsterdam", input={"kind": "nightly"}),
        pgflow.Schedule(name="hourly", cron=RARE, input={"kind": "hourly"}, overlap="allow"),
    ]

    @pgflow.step
    def build(self):
        return self.input


class Quick(pgflow.Workflow):
    """No declared schedules: the tests create rows for it as the admin would."""

    @pgflow.step
    def go(self):
        return "done"


class OnePerAccount(pgflow.Workflow):
    """A singleton per account that refuses a second start: a tick whose account has an
    open run cannot start. No test worker serves its queue, so its runs stay open."""

    queue = "schedules-unserved"
    singleton = pgflow.Singleton(key="account", on_conflict="skip")

    def account(self):
        return self.input["account"]

    @pgflow.step
    def go(self):
        return self.input["account"]
