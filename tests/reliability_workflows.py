"""Workflows for the reliability tests (importable by worker subprocesses)."""

from __future__ import annotations

import asyncio
import os
import time

import pgflow
from pgflow import step
from pgflow.models import Step, WorkflowRun
from tests.workflows import _mark


class Load(pgflow.Workflow):
    """Three steps with a 50 ms body each."""

    @step
    def one(self):
        _mark(f"{self.run.pk}:one:{self.attempt}")
        time.sleep(0.05)

    @step
    def two(self):
        _mark(f"{self.run.pk}:two:{self.attempt}")
        time.sleep(0.05)

    @step
    def three(self):
        _mark(f"{self.run.pk}:three:{self.attempt}")
        time.sleep(0.05)


class Poison(pgflow.Workflow):
    """Kills its worker process every time it runs."""

    @step
    def crash(self):
        _mark(f"{self.run.pk}:crash:{self.attempt}")
        os._exit(9)


class Queries(pgflow.Workflow):
    """Three steps whose bodies query through the ORM on their step thread's connection (a
    model, the run's outputs): after a database outage each finds its connection dead unless
    the worker closed it."""

    @step
    def one(self):
        time.sleep(0.02)
        return {"steps": Step.objects.filter(run_id=self.run.pk).count()}

    @step
    def two(self):
        time.sleep(0.02)
        return {"one": self.outputs["one"]["steps"], "status": WorkflowRun.objects.get(pk=self.run.pk).status}

    @step
    def three(self):
        time.sleep(0.02)
        return {"two": self.outputs["two"]["status"], "steps": Step.objects.filter(run_id=self.run.pk).count()}


class AsyncQueries(pgflow.Workflow):
    """``Queries`` with ``async def`` bodies: their queries run in asgiref's one thread for
    sync code, on the connection every async body shares."""

    @step
    async def one(self):
        await asyncio.sleep(0.02)
        return {"steps": await Step.objects.filter(run_id=self.run.pk).acount()}

    @step
    async def two(self):
        await asyncio.sleep(0.02)
        run = await WorkflowRun.objects.aget(pk=self.run.pk)
        return {"one": self.outputs["one"]["steps"], "status": run.status}
