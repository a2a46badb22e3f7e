"""pgflow's pytest plugin: fixtures for testing workflows, loaded by pytest through the
``pytest11`` entry point of django-pgflow (installing it is enough; pytest-django provides
the database).

- ``pgflow_clock``: :class:`pgflow.testing.Clock`, ``.now`` and ``.advance(timedelta)``;
- ``pgflow_worker``: a real ``pgflow_worker`` process on the test's database, stopped at the
  end (it needs committed rows: the fixture asks for ``transactional_db``);
- ``pgflow_replace_step``: ``pgflow_replace_step(Checkout, "charge", body)`` swaps a step's body
  until the test ends.

pytest imports this module before Django is set up: each fixture imports what it uses.
A project's own fixture of the same name (in a conftest.py) takes precedence, as pytest's do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .clock import Clock
    from .workers import WorkerProcess


@pytest.fixture
def pgflow_clock(db: None) -> Clock:
    """pgflow's clock for this test; ``advance()`` moves it and runs what came due. Works
    with ``db`` (asked for here) and with ``transactional_db``."""
    from .clock import Clock  # lazy: the models load only once pytest-django set Django up

    return Clock()


@pytest.fixture
def pgflow_worker(transactional_db: None, tmp_path: Path) -> Iterator[WorkerProcess]:
    """A ``pgflow_worker`` process on the test's database, started (registered) before the
    test and stopped (SIGTERM) after it. ``.wait_for(run)``, ``.output()``, ``.stop()``."""
    from .workers import WorkerProcess  # lazy: the models load only once pytest-django set Django up

    worker = WorkerProcess(folder=tmp_path / "pgflow-worker")
    worker.folder.mkdir(exist_ok=True)
    try:
        yield worker.start()
    finally:
        worker.stop()


@pytest.fixture
def pgflow_replace_step() -> Iterator[Callable[[type, str, Callable[..., Any]], None]]:
    """``pgflow_replace_step(Workflow, "step", body)``: the step runs ``body`` (same arguments
    as its method) in this process until the test ends."""
    from .bodies import replace_step  # lazy: the workflow package loads only once Django is set up

    with ExitStack() as stack:

        def replace(workflow: type, step_name: str, body: Callable[..., Any]) -> None:
            stack.enter_context(replace_step(workflow, step_name, body))

        yield replace
