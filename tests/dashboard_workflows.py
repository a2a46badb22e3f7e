"""Workflow classes the dashboard tests run: hostile strings in every free-text place a
run has (input, output, error message, cause), a signal wait, a changed definition."""

from __future__ import annotations

from datetime import timedelta

import pgflow
from pgflow import step

SCRIPT = "<script>alert('pgflow')</script>"


class Hostile(pgflow.Workflow):
    """Outputs and raises strings that would run as script if a page printed them raw."""

    @step
    def emit(self):
        return {"html": SCRIPT, "echo": self.input.get("text")}

    @step
    def explode(self):
        try:
            raise KeyError(SCRIPT)
        except KeyError as exc:
            raise ValueError(f"bad value {SCRIPT}") from exc


class AwaitsApproval(pgflow.Workflow):
    @step
    def ask(self):
        return "asked"

    @step(wait_for="approval", wait_timeout=timedelta(hours=1), on_timeout="pause")
    def decide(self, signal):
        return {"approved": signal.payload}


class Later(pgflow.Workflow):
    """A run that stays running: its one step is due in an hour."""

    @step(wait=timedelta(hours=1))
    def later(self):
        return "later"

    @step
    def after(self):
        return "after"
