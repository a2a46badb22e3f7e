"""Workflows that tag their runs (run attributes): importable by the worker subprocesses of
tests/acceptance, since runs store their class's path."""

from __future__ import annotations

import pgflow
from pgflow import step


class Tagged(pgflow.Workflow):
    queue = "attrs"

    @step
    def look_up(self):
        # A dict for names that are not Python identifiers; keyword arguments for the others.
        self.set_attributes({"order.id": self.input.get("order", 7)}, customer="acme")
        self.set_attributes(amount=self.input.get("amount", 120))
        return {"looked_up": True}

    @step
    def decide(self):
        if self.input.get("fail"):
            self.set_attributes(plan="never-recorded")
            raise RuntimeError("the attempt fails: what it set is not recorded")
        self.set_attributes(plan=self.input.get("plan", "gold"), vip=True)
        return {"decided": True}


class TooMany(pgflow.Workflow):
    queue = "attrs"

    @step
    def tag(self):
        # The run starts with 30 attributes: three more pass the limit of 32 for the run.
        self.set_attributes(a="1", b="2", c="3")
        return {}


class TwoSteps(pgflow.Workflow):
    """No set_attributes(): the run's attributes stay what start() gave."""

    queue = "attrs"

    @step
    def first(self):
        return {"n": 1}

    @step
    def second(self):
        return {"n": 2}
