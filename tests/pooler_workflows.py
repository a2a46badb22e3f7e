"""Workflows for the pooler and silent-socket tests (importable by worker subprocesses)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pgflow
from pgflow import step
from pgflow.models import WorkflowRun
from tests.workflows import _mark


class QueriesWhenTold(pgflow.Workflow):
    """One step that queries through the ORM (its step thread's connection is open), marks,
    waits on its first attempt for the file ``<PGFLOW_TEST_MARKS>.go``, and queries again."""

    @step
    def ask(self):
        WorkflowRun.objects.filter(pk=self.run.pk).exists()
        _mark(f"{self.run.pk}:ask:{self.attempt}")
        go = Path(os.environ.get("PGFLOW_TEST_MARKS", "") + ".go")
        deadline = time.monotonic() + 60
        while self.attempt == 1 and not go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return {"runs": WorkflowRun.objects.filter(pk=self.run.pk).count()}
