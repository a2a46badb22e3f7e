"""Workflows for the reliability tests (importable by worker subprocesses)."""

from __future__ import annotations

import os
import time

import pgflow
from pgflow import step
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
