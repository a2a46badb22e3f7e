"""evaluation.reads_outputs: which steps' claims bring the run's outputs (their body's source
names ``outputs``), and that a body whose source cannot be read counts as reading them."""

from __future__ import annotations

import pgflow
from pgflow.evaluation import reads_outputs


def _helper(workflow: pgflow.Workflow) -> object:
    return workflow.outputs


class Flow(pgflow.Workflow):
    @pgflow.step
    def plain(self):
        return 1

    @pgflow.step
    def reads(self):
        return self.outputs["plain"]

    @pgflow.step
    async def reads_async(self):
        return dict(self.outputs)

    @pgflow.step
    def through_a_helper(self):
        return _helper(self)


def test_a_body_naming_outputs_reads_them_and_another_does_not():
    steps = Flow.steps()
    assert [reads_outputs(Flow, steps.get(name)) for name in ("plain", "reads", "reads_async")] == [False, True, True]
    # Read through a helper: not seen, so that body's self.outputs costs one query, as before.
    assert reads_outputs(Flow, steps.get("through_a_helper")) is False


def test_a_body_whose_source_cannot_be_read_counts_as_reading_them():
    namespace: dict[str, object] = {}
    exec("def made(self):\n    return None\n", namespace)  # noqa: S102 - a body with no source file
    made = type("Made", (pgflow.Workflow,), {"__module__": __name__, "made": pgflow.step(namespace["made"])})
    assert reads_outputs(made, made.steps().get("made")) is True
