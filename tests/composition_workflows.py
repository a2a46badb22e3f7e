"""Workflow classes of the re-run and child-workflow tests (importable by worker subprocesses)."""

from __future__ import annotations

import pgflow
from pgflow import OnException, fan_out, step
from tests.workflows import _mark


class Ledger(pgflow.Workflow):
    """Three steps; ``charge`` fails (pausing the run) while input["fail"] is set."""

    @step
    def fetch(self):
        _mark(f"fetch:{self.run.pk}")
        return {"fetched": self.input.get("n", 0)}

    @step(on_exception=OnException(ValueError, action="pause"))
    def charge(self):
        _mark(f"charge:{self.run.pk}")
        if self.input.get("fail"):
            raise ValueError("card declined")
        return {"fetched": self.outputs["fetch"]["fetched"], "amount": self.input["amount"]}

    @step
    def receipt(self):
        _mark(f"receipt:{self.run.pk}")
        return {"charge": self.outputs["charge"]}


class Child(pgflow.Workflow):
    """Doubles input["i"]; cancels itself when input["fail"], pauses in its first attempt when
    input["pause"] (resumed, it finishes)."""

    @step
    def work(self):
        _mark(f"child:{self.input['i']}")
        if self.input.get("fail"):
            self.cancel()
        if self.input.get("pause") and self.attempt == 1:
            self.pause()
        return {"double": self.input["i"] * 2}


class Waiter(pgflow.Workflow):
    """A child that waits for the signal "go"."""

    @step(wait_for="go")
    def hold(self, signal):
        return {"got": signal}


class Abandoned(Waiter):
    on_parent_cancel = "abandon"


def _spread(workflow: pgflow.Workflow, batch, child: type[pgflow.Workflow] = Child) -> dict:
    n = workflow.input.get("n", 0)
    fail = set(workflow.input.get("fail", []))
    pause = set(workflow.input.get("pause", []))
    for i in range(n):
        batch.add_run(child, input={"i": i, "fail": i in fail, "pause": i in pause}, key=f"{workflow.run.pk}-{i}")
    _mark(f"spread:{workflow.run.pk}")
    return {"added": n}


class Parent(pgflow.Workflow):
    @fan_out
    def spread(self, batch):
        return _spread(self, batch)

    @step
    def collect(self):
        _mark(f"collect:{self.run.pk}")
        children = self.children("spread")
        return {
            "spread": self.outputs["spread"],
            "doubles": [c.outputs["work"]["double"] for c in children],
            "children": [c.pk for c in children],
        }


class ParentCancelling(pgflow.Workflow):
    @fan_out(on_batch_failure="cancel")
    def spread(self, batch):
        return _spread(self, batch)

    @step
    def collect(self):
        _mark(f"collect:{self.run.pk}")


class ParentOfWaiters(pgflow.Workflow):
    @fan_out
    def spread(self, batch):
        batch.add_run(Waiter, input={"which": "cancelled with its parent"})
        batch.add_run(Abandoned, input={"which": "runs on"})

    @step
    def collect(self):
        pass
