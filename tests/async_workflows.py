"""Workflows with ``async def`` bodies, conditions and waits (run by the worker's event loop
in acceptance tests, and by pgflow.testing in integration tests)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.db import connection

import pgflow
from pgflow import cancel_if, fan_out, step
from pgflow.models import WorkflowRun
from tests.workflows import _mark


class AsyncThreeSteps(pgflow.Workflow):
    """Async bodies that await, query through Django's async ORM and sync_to_async, and read outputs."""

    @step
    async def one(self):
        await asyncio.sleep(self.input.get("sleep", 0))
        await sync_to_async(_mark)(f"{self.run.pk}:one:{self.attempt}")
        status = (await WorkflowRun.objects.aget(pk=self.run.pk)).status
        return {"n": 1, "status": status}

    @step
    def two(self):  # a sync body between async ones, in the same worker
        _mark(f"{self.run.pk}:two:{self.attempt}")
        return {"n": self.outputs["one"]["n"] + 1}

    @step
    async def three(self):
        await asyncio.sleep(self.input.get("sleep", 0))
        await sync_to_async(_mark)(f"{self.run.pk}:three:{self.attempt}")
        steps = await sync_to_async(lambda: self.run.steps.count())()
        return {"n": self.outputs["two"]["n"] + 1, "steps_seen": steps}


class AsyncSleeper(pgflow.Workflow):
    @step
    async def nap(self):
        _mark(f"{self.run.pk}:nap:{self.attempt}")
        await asyncio.sleep(self.input.get("sleep", 1))
        return "rested"


class AsyncTimesOut(pgflow.Workflow):
    @step(timeout=timedelta(seconds=0.5))
    async def slow(self):
        _mark(f"{self.run.pk}:slow:started")
        await asyncio.sleep(self.input.get("sleep", 3))
        _mark(f"{self.run.pk}:slow:woke")  # never: the timeout cancels the task
        return "too late"


class AsyncVerbs(pgflow.Workflow):
    """The first step awaits, then calls the verb named in input["verb"]."""

    @step
    async def decide(self):
        await asyncio.sleep(0)
        verb = self.input.get("verb")
        if verb == "reattempt" and self.attempt < 3:
            self.reattempt()
        if verb in ("pause", "cancel", "skip", "finish"):
            getattr(self, verb)()
        if verb == "raise":
            raise ValueError("async body failed")
        return {"attempt": self.attempt}

    @step
    async def after(self):
        return "after"


class AsyncConditions(pgflow.Workflow):
    """Async skip_if, cancel_if and wait methods, each reading the database asynchronously."""

    @cancel_if
    async def called_off(self):
        run = await WorkflowRun.objects.aget(pk=self.run.pk)
        return run.input.get("call_off", False)

    @step(skip_if="skip_first")
    async def first(self):
        return "first ran"

    @step(wait="pause_for")
    async def second(self):
        return "second ran"

    async def skip_first(self):
        await asyncio.sleep(0)
        return (await WorkflowRun.objects.aget(pk=self.run.pk)).input.get("skip", False)

    async def pause_for(self):
        await asyncio.sleep(0)
        return timedelta(seconds=self.input.get("wait", 0))


def vendor_task(n: int) -> int:
    return n


class AsyncFan(pgflow.Workflow):
    @fan_out
    async def notify(self, batch):
        await asyncio.sleep(0)
        for n in range(self.input.get("members", 2)):
            batch.add(vendor_task, n)

    @step
    async def after(self):
        return "after"


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


class AsyncBackend(pgflow.Workflow):
    """Says which server process ran its queries: the connection of asgiref's one thread for
    sync code, which every async body's queries share."""

    @step
    async def query(self):
        await asyncio.sleep(self.input.get("sleep", 0.05))
        pid = await sync_to_async(_backend_pid)()
        seen = await WorkflowRun.objects.filter(pk=self.run.pk).aexists()  # Django's async ORM, same thread
        return {"pid": pid, "seen": seen, "pid_after": await sync_to_async(_backend_pid)()}
