"""Workflows with schedules, for the schedule tests. Their rules are chosen so a worker
left running by another test never finds them due by itself (yearly ticks)."""

from __future__ import annotations

import threading

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


# SlowToStart's start waits for RELEASE (its singleton key is computed inside start(), while
# the tick holds its schedule's row lock): a tick caught in the middle of firing.
STARTING, RELEASE = threading.Event(), threading.Event()


class SlowToStart(pgflow.Workflow):
    queue = "schedules-unserved"
    singleton = pgflow.Singleton(key="held")

    def held(self):
        STARTING.set()
        RELEASE.wait(30)
        return None  # no key: the start goes on

    @pgflow.step
    def go(self):
        return "done"
