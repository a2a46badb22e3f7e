"""The adversarial review's attacks replayed against real worker processes (issue 16)."""

from __future__ import annotations

import time

import psycopg
from django.db import connection

from pgflow.models import Step, WorkflowRun
from tests import adversarial_workflows as aw
from tests import workflows as wf
from tests.acceptance.conftest import wait_until
from tests.invariants import assert_exactly_once


def test_a_run_held_by_another_transaction_does_not_stall_the_worker(start_worker):
    """A webhook keeps signal() inside an open atomic(): the other runs go on regardless."""
    held = wf.ThreeSteps.start()
    others = [wf.ThreeSteps.start() for _ in range(60)]
    settings = connection.settings_dict
    with psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        password=settings["PASSWORD"],
        host=settings["HOST"],
        port=settings["PORT"],
    ) as webhook:
        webhook.execute("SELECT 1 FROM pgflow_run WHERE id = %s FOR UPDATE", [held.pk])
        worker = start_worker("--concurrency", "4")
        # Today: the held run's outcome blocks the group commit, and with it every other run.
        wait_until(
            lambda: WorkflowRun.objects.filter(pk__in=[r.pk for r in others], status="finished").count() == len(others),
            timeout=40,
            what="the other runs to finish while one run is held",
        )
        assert WorkflowRun.objects.get(pk=held.pk).status == "running"
        webhook.rollback()
    wait_until(
        lambda: WorkflowRun.objects.get(pk=held.pk).status == "finished",
        timeout=20,
        what="the held run to finish once let go",
    )
    assert worker.terminate() == 0
    assert not Step.objects.filter(outcome="lost").exists()
    assert_exactly_once()


def test_a_body_raising_a_base_exception_fails_its_attempt_and_the_worker_goes_on(start_worker):
    runs = {
        kind: aw.RaisesBase.start(input={"raise": kind})
        for kind in ("SystemExit", "KeyboardInterrupt", "GeneratorExit")
    }
    worker = start_worker("--concurrency", "2", lease=30)  # a long lease: a lost attempt would show as a hang
    wait_until(
        lambda: WorkflowRun.objects.filter(pk__in=[r.pk for r in runs.values()], status="paused").count() == len(runs),
        timeout=20,
        what="each run to pause with its body's error",
    )
    for kind, run in runs.items():
        attempt = Step.objects.get(run=run)
        assert (attempt.status, attempt.outcome, attempt.error_class) == ("failed", "paused", kind)
    after = wf.ThreeSteps.start()
    wait_until(
        lambda: WorkflowRun.objects.get(pk=after.pk).status == "finished",
        timeout=20,
        what="the worker to run the next run",
    )
    assert worker.proc.poll() is None
    assert worker.terminate() == 0
    assert_exactly_once()


def test_a_poison_output_fails_only_its_own_run_with_its_own_error(start_worker):
    healthy = [aw.FileName.start(input={"sleep": 0.01}) for _ in range(80)]
    poison = [aw.FileName.start(input={"poison": True}) for _ in range(3)]
    start = time.monotonic()
    worker = start_worker("--concurrency", "8", lease=30)
    wait_until(
        lambda: (
            WorkflowRun.objects.filter(status="finished").count() == len(healthy)
            and WorkflowRun.objects.filter(status="paused").count() == len(poison)
        ),
        timeout=40,
        what="healthy runs to finish and poison runs to pause",
    )
    assert time.monotonic() - start < 30
    assert not Step.objects.filter(outcome="lost").exists()  # no healthy attempt lost to a failed batch
    for run in poison:
        attempt = Step.objects.get(run=run)
        assert attempt.error_class == "ValueError" and "lone surrogate" in attempt.error_message
    assert worker.terminate() == 0
    assert_exactly_once()
