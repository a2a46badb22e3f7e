"""Workflow classes of the fan-out tests (importable by worker and qcluster subprocesses)."""

from __future__ import annotations

import pgflow
from pgflow import OnException, fan_out, step
from tests import fanout_tasks


def add_tasks(workflow: pgflow.Workflow, batch) -> None:
    """Adds input["tasks"]: a list of [dotted path, [args...]]."""
    for func, args in workflow.input.get("tasks", []):
        batch.add(func, *args)


class Fan(pgflow.Workflow):
    """A fan_out (on_batch_failure="pause", the default) and the step after it."""

    @fan_out
    def fan(self, batch):
        add_tasks(self, batch)

    @step
    def after(self):
        return {"fan": self.outputs["fan"]}


class FanCancel(pgflow.Workflow):
    @fan_out(on_batch_failure="cancel")
    def fan(self, batch):
        add_tasks(self, batch)

    @step
    def after(self):
        return {"fan": self.outputs.get("fan")}


class FanSkip(pgflow.Workflow):
    @fan_out(on_batch_failure="skip")
    def fan(self, batch):
        add_tasks(self, batch)

    @step
    def after(self):
        return {"fan": self.outputs.get("fan")}


class FanCallables(pgflow.Workflow):
    """Adds functions as callables, not paths."""

    @fan_out
    def fan(self, batch):
        batch.add(fanout_tasks.double, 1)
        batch.add(fanout_tasks.Tasks.tripled, 2)
        batch.add(fanout_tasks.Tasks.halved, n=3)

    @step
    def after(self):
        return "after"


class FanBody(pgflow.Workflow):
    """A body that ends the step before any batch exists: input["verb"] names a flow-control
    verb to call, input["raise"] an error to raise on the attempts listed in input["raise_on"],
    input["pause_during"] pauses the run while the first attempt's body runs."""

    @fan_out(on_exception=OnException(ConnectionError, action="reattempt", wait=0, max_reattempts=2))
    def fan(self, batch):
        batch.add("tests.fanout_tasks.double", 1)
        if self.input.get("pause_during") and self.attempt == 1:
            self.run.pause(actor="operator")  # an operator pauses the run while the body runs
        verb = self.input.get("verb")
        if verb:
            getattr(self, verb)()
        if self.attempt in self.input.get("raise_on", []):
            error = {"connection": ConnectionError, "value": ValueError}[self.input["raise"]]
            raise error(f"body failed on attempt {self.attempt}")
        add_tasks(self, batch)

    @step
    def after(self):
        return "after"
