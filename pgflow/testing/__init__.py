"""Helpers for testing your workflows.

    run = Onboarding.start(subject=user, input={"plan": "pro"})
    run = run_workflow(run, signals={"payment_received": {"amount": 10}})
    assert run.status == "finished"
    assert_steps(run, ["send_welcome", "send_reminder", "charge"])

The same engine code a worker runs (prepare, body, policies, transitions) runs here, so a
test sees what production would. One module per helper:

- ``inline``: ``run_workflow``, ``run_inline``, ``fire_schedule``: a run's steps in this process;
- ``clock``: ``Clock``, pgflow's time moved forward in the database (``pgflow_clock``);
- ``history``: ``assert_steps``, a run's attempts against the steps a test expects;
- ``bodies``: ``replace_step``, a step's body swapped for one test;
- ``workers``: ``WorkerProcess``, a real ``pgflow_worker`` on the test's database;
- ``pytest_plugin``: the fixtures, loaded by pytest through pgflow's ``pytest11`` entry point.

Importing this package touches no model: pytest imports the plugin (and so this package)
before Django is set up, so each name is imported from its module when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bodies import replace_step
    from .clock import Clock
    from .history import assert_steps, step_history
    from .inline import MAX_ATTEMPTS, fire_schedule, run_inline, run_workflow
    from .workers import WorkerProcess

# Where each public name lives.
_HOMES = {
    "MAX_ATTEMPTS": "inline",
    "fire_schedule": "inline",
    "run_inline": "inline",
    "run_workflow": "inline",
    "Clock": "clock",
    "assert_steps": "history",
    "step_history": "history",
    "replace_step": "bodies",
    "WorkerProcess": "workers",
}

__all__ = [
    "MAX_ATTEMPTS",
    "Clock",
    "WorkerProcess",
    "assert_steps",
    "fire_schedule",
    "replace_step",
    "run_inline",
    "run_workflow",
    "step_history",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pgflow.testing' has no attribute {name!r}")
    # lazy: the modules read the models, which load only once Django is set up (see above)
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
