"""Workflows the adversarial tests run (importable by worker subprocesses)."""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

import pgflow
from pgflow import OnException, step

# A body that waits for the test to let it go (in-process runner tests only).
release = threading.Event()
entered = threading.Event()


class ReturnsAtItsTimeout(pgflow.Workflow):
    """The body returns only when the test says so, after its timeout fired."""

    @step(timeout=timedelta(seconds=0.2), on_exception=OnException(action="reattempt", max_reattempts=3))
    def slow(self):
        entered.set()
        release.wait(30)
        return {"done": True}

    @step
    def after(self):
        return "after"


class FileName(pgflow.Workflow):
    """Returns what os.fsdecode makes of a non-UTF-8 file name when input["poison"] is set."""

    @step
    def list_dir(self):
        if self.input.get("poison"):
            return {"name": os.fsdecode(b"report-\xff.csv")}
        time.sleep(self.input.get("sleep", 0))
        return {"name": "report.csv"}

    @step
    def done(self):
        return "done"


class RaisesBase(pgflow.Workflow):
    """The body raises the BaseException named in input["raise"]."""

    @step
    def exits(self):
        kind = self.input["raise"]
        if kind == "SystemExit":
            raise SystemExit(3)
        if kind == "KeyboardInterrupt":
            raise KeyboardInterrupt("interrupted in the body")
        raise GeneratorExit("a bare BaseException subclass")


class Quick(pgflow.Workflow):
    @step
    def one(self):
        return 1

    @step
    def two(self):
        return 2
