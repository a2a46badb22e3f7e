"""The plugin's ``pgflow_worker``: a real worker process on the test's database, which sees
what the test commits (and the clock's advances), stopped when the test ends."""

from __future__ import annotations

import os

from pgflow import store
from pgflow.models import Worker
from pgflow.testing import assert_steps
from tests import workflows as wf


def test_a_real_worker_runs_the_tests_run(pgflow_worker):
    assert Worker.objects.filter(pid=pgflow_worker.pid).exists(), "it registered before the test began"
    assert pgflow_worker.pid != os.getpid()
    run = pgflow_worker.wait_for(wf.ThreeSteps.start())
    assert run.status == "finished"
    assert run.outputs["three"] == {"n": 3}
    assert_steps(run, ["one", "two", "three"])


def test_the_worker_sees_the_clocks_advance(pgflow_worker, pgflow_clock):
    run = wf.Delayed.start()  # its one step waits an hour
    pgflow_clock.advance(minutes=61, run_due=False)  # the worker, woken, runs it
    assert pgflow_worker.wait_for(run, timeout=30).status == "finished"
    assert_steps(run, ["later:completed"])
    assert run.step_set.get().worker not in ("", store.TESTING_WORKER), "the worker ran it, not the test"
    worker = pgflow_worker.stop()
    assert worker == 0, pgflow_worker.output()
    assert not Worker.objects.filter(pid=pgflow_worker.pid).exists(), "a clean stop removes its row"
