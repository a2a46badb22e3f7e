"""Workflow classes with declared schedules for the pytest plugin's tests, registered only
while a test uses them (:func:`declared`). pgflow syncs the schedules of every registered
class after migrate, and pytest-django's flush after a transactional test runs post_migrate
again: a committed row of a tick due within the hour would fire in other modules' tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pgflow
from pgflow import registry, step


class Hourly(pgflow.Workflow):
    schedules = [pgflow.Schedule(name="hourly", every=timedelta(hours=1), catch_up=timedelta(hours=3), overlap="allow")]

    @step
    def report(self):
        return "reported"


class Nightly(pgflow.Workflow):
    schedules = [pgflow.Schedule(name="nightly", cron="0 3 * * *", catch_up=timedelta(days=1))]

    @step
    def report(self):
        return "reported"


@contextmanager
def declared(workflow: type[pgflow.Workflow]) -> Iterator[type[pgflow.Workflow]]:
    """``workflow`` registered (its schedules synced by the clock) for the block only."""
    registry.register(workflow)
    try:
        yield workflow
    finally:
        registry._workflows.pop(workflow.workflow_path(), None)


for _unregistered in (Hourly, Nightly):  # registered by their class statements: only declared() does
    registry._workflows.pop(_unregistered.workflow_path(), None)
