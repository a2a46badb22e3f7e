"""A step's body swapped for one test (``replace_step``, the ``pgflow_replace_step`` fixture)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..workflow import Workflow

_MISSING = object()


@contextmanager
def replace_step(workflow: type[Workflow], step_name: str, body: Callable[..., Any]) -> Iterator[None]:
    """Within the block, ``workflow``'s step ``step_name`` runs ``body`` instead of its own:
    a function taking what the step's method takes (``self``, and the signal or the batch
    builder if it takes one); what it returns is the step's output, what it raises goes
    through the step's exception policies. Restored when the block ends, however it ends.

    Only bodies run in this process see it (``run_workflow``, ``pgflow_clock.advance``), not a
    worker process's. The step's options (waits, timeout, policies) stay as declared."""
    if not (isinstance(workflow, type) and issubclass(workflow, Workflow)):
        raise TypeError(f"replace_step() takes a Workflow class first, got {workflow!r}")
    definition = workflow.steps().get(step_name)
    if definition is None:
        names = ", ".join(workflow.steps().names()) or "none"
        raise ValueError(f"{workflow.__name__} has no step {step_name!r}; its steps: {names}")
    if not callable(body):
        raise TypeError(f"replace_step() takes the new body as a callable, got {body!r}")
    method = definition.method
    own = workflow.__dict__.get(method, _MISSING)  # inherited: deleted again afterwards
    setattr(workflow, method, body)
    try:
        yield
    finally:
        if own is _MISSING:
            delattr(workflow, method)
        else:
            setattr(workflow, method, own)
