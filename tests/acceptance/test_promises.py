"""The README's promises about workers, each against real worker processes and read back
from the database: a lease taken by the real sweep, a start not yet committed, SIGTERM,
handed-back steps, a second signal."""

from __future__ import annotations

import signal
import threading
import time
from datetime import UTC, datetime

from django.db import connection, transaction

from pgflow.models import Event, Step, WorkflowRun
from tests import workflows as wf
from tests.acceptance.conftest import WorkerProcess, wait_until
from tests.connections import other_connection
from tests.invariants import assert_exactly_once


def sweep_lock_held() -> bool:
    from pgflow.runtime import sweep

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid = %s",
            [sweep.LOCK_KEY & 0xFFFF_FFFF],
        )
        return bool(cursor.fetchone()[0])


def started(worker: WorkerProcess) -> None:
    wait_until(lambda: "starting: queues=" in worker.output(), timeout=60, what="the worker to start")


def test_a_worker_frozen_past_its_lease_loses_it_to_the_sweep_and_its_late_completion_changes_nothing(
    start_worker, marks
):
    run = wf.Sleeper.start(input={"sleep": 2})
    # It sweeps once at start and then not for a minute, so it is not frozen holding the sweep
    # lock (see test_a_worker_frozen_mid_sweep_does_not_hold_up_the_recovery_of_its_lease).
    frozen = start_worker("--concurrency", "1", lease=1.0, env={"PGFLOW_SWEEP_SECONDS": "60"})
    wait_until(lambda: f"{run.pk}:nap:1" in marks.read_text(), timeout=30, what="the body to start")
    wait_until(lambda: not sweep_lock_held(), timeout=30, what="the worker's first sweep to end")
    frozen.proc.send_signal(signal.SIGSTOP)  # a GC pause, a frozen VM: no heartbeat, the lease runs out
    try:
        rescuer = start_worker("--concurrency", "1", lease=1.0)
        wait_until(
            lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished",
            timeout=60,
            what="the other worker's sweep to take the lease and re-run the step",
        )
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    before = (
        list(run.steps.order_by("attempt").values_list("attempt", "status", "outcome", "worker")),
        list(run.events.values_list("event", flat=True)),
    )
    wait_until(
        lambda: "late completion ignored" in frozen.output(),
        timeout=30,
        what="the frozen worker to finish its body and log the late completion",
    )
    assert frozen.terminate() == 0
    assert rescuer.terminate() == 0
    steps = list(run.steps.order_by("attempt").values_list("attempt", "status", "outcome", "worker"))
    assert steps == before[0]
    assert [row[:3] for row in steps] == [(1, "failed", "lost"), (2, "completed", "completed")]
    assert (
        list(run.events.values_list("event", flat=True))
        == before[1]
        == ["started", "lease_lost", "step_completed", "finished"]
    )
    lost = Event.objects.get(run=run, event="lease_lost")
    assert lost.actor != steps[0][3], "the lease was taken by the other worker's sweep"
    assert marks.read_text().split() == [f"{run.pk}:nap:1", f"{run.pk}:nap:2"]
    assert f"run={run.pk} step=nap attempt=1" in frozen.output()
    assert_exactly_once()


def test_a_worker_frozen_mid_sweep_does_not_hold_up_the_recovery_of_its_lease(start_worker, marks):
    # The frozen worker holds the sweep's session lock (stuck in the rollup); another
    # worker's sweep must still take the frozen worker's lease and re-run its step.
    from pgflow import rollup

    run = wf.Sleeper.start(input={"sleep": 2})
    with other_connection(autocommit=True) as blocker:
        blocker.execute("SELECT pg_advisory_lock(%s)", [rollup.LOCK_KEY])  # holds its sweep inside the rollup
        frozen = start_worker("--concurrency", "1", lease=1.0)
        wait_until(
            lambda: f"{run.pk}:nap:1" in marks.read_text() and sweep_lock_held(),
            timeout=30,
            what="the body to start while the worker sweeps",
        )
        frozen.proc.send_signal(signal.SIGSTOP)
        blocker.execute("SELECT pg_advisory_unlock(%s)", [rollup.LOCK_KEY])
    try:
        start_worker("--concurrency", "1", lease=1.0)
        wait_until(
            lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished",
            timeout=20,
            what="another worker's sweep to take the frozen worker's lease",
        )
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    assert list(run.steps.order_by("attempt").values_list("attempt", "outcome")) == [(1, "lost"), (2, "completed")]
    frozen.terminate()
    assert_exactly_once()


def test_a_start_is_invisible_to_a_polling_worker_until_its_transaction_commits(start_worker, marks):
    worker = start_worker("--concurrency", "2", env={"PGFLOW_POLL_SECONDS": "0.2"})
    started(worker)
    with transaction.atomic():
        held = wf.ThreeSteps.start()
        # A run started and committed on another connection meanwhile: the worker is claiming.
        witness: list[WorkflowRun] = []
        thread = threading.Thread(target=lambda: (witness.append(wf.ThreeSteps.start()), connection.close()))
        thread.start()
        thread.join()
        wait_until(
            lambda: f"{witness[0].pk}:three:1" in marks.read_text(),
            timeout=30,
            what="the worker to run a committed run while the other transaction is open",
        )
        time.sleep(1.0)  # five more polls
        assert f"{held.pk}:" not in marks.read_text(), "a worker ran a step of an uncommitted start"
    wait_until(
        lambda: WorkflowRun.objects.get(pk=held.pk).status == "finished",
        timeout=30,
        what="the held run to run once committed",
    )
    assert worker.terminate() == 0
    assert_exactly_once()


def test_a_start_rolled_back_leaves_nothing(transactional_db):
    class Rollback(Exception):
        pass

    try:
        with transaction.atomic():
            wf.ThreeSteps.start(key="rolled-back")
            raise Rollback
    except Rollback:
        pass
    assert (WorkflowRun.objects.count(), Step.objects.count(), Event.objects.count()) == (0, 0, 0)
    assert wf.ThreeSteps.start(key="rolled-back").steps.count() == 1  # the key is free again


def test_two_concurrent_starts_with_one_key_make_one_run(transactional_db):
    barrier = threading.Barrier(2)
    results: list[object] = []

    def start() -> None:
        try:
            barrier.wait()
            with transaction.atomic():
                run = wf.ThreeSteps.start(key="order-7")
                time.sleep(0.3)  # hold the insert open so the other start meets it
            results.append(run.pk)
        except Exception as exc:  # noqa: BLE001 - the test reports whatever escaped
            results.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=start) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run = WorkflowRun.objects.get(key="order-7")
    assert results == [run.pk, run.pk], "both callers get the one run (API.md: the existing run is returned)"
    assert list(Step.objects.filter(run=run).values_list("step_name", "attempt")) == [("one", 1)]
    assert list(run.events.values_list("event", flat=True)) == ["started"]


def test_sigterm_stops_claiming(start_worker, marks):
    runs = [wf.Sleeper.start(input={"sleep": 1.5}) for _ in range(4)]
    worker = start_worker("--concurrency", "1")
    wait_until(lambda: ":nap:1" in marks.read_text(), timeout=30, what="the first body to start")
    started(worker)
    signalled = datetime.now(UTC)
    worker.proc.send_signal(signal.SIGTERM)
    more = [wf.Sleeper.start(input={"sleep": 1.5}) for _ in range(2)]  # due now, NOTIFY sent
    assert worker.proc.wait(60) == 0
    claimed_after = Step.objects.filter(started_at__gt=signalled).count()
    assert claimed_after == 0, f"{claimed_after} attempts claimed after SIGTERM"
    assert WorkflowRun.objects.filter(status="finished").count() == 1  # the one running when signalled
    waiting = Step.objects.filter(run__in=[*runs, *more], status="scheduled", started_at__isnull=True).count()
    assert waiting == 5
    assert_exactly_once()


def test_a_handed_back_step_is_started_by_another_worker_at_once(start_worker, marks):
    run = wf.Sleeper.start(input={"sleep": 30})
    quick_exit = {"PGFLOW_SHUTDOWN_GRACE_SECONDS": "0.5"}
    leaving = start_worker("--concurrency", "1", lease=30, env=quick_exit)
    wait_until(lambda: f"{run.pk}:nap:1" in marks.read_text(), timeout=30, what="the body to start")
    # The other worker polls every 30 s and the lease is 30 s: only the hand-back's NOTIFY
    # can explain a start within a second.
    staying = start_worker("--concurrency", "1", lease=30, env={**quick_exit, "PGFLOW_POLL_SECONDS": "30"})
    started(staying)
    time.sleep(1.0)  # its first claim (nothing due) is done; it now waits on LISTEN
    assert leaving.terminate() == 0
    wait_until(lambda: f"{run.pk}:nap:2" in marks.read_text(), timeout=10, what="the other worker to start it")
    first, second = run.steps.order_by("attempt")
    assert (first.status, first.outcome) == ("cancelled", "handed_back")
    assert second.started_at is not None and first.finished_at is not None
    delay = (second.started_at - first.finished_at).total_seconds()
    assert 0 <= delay < 1.0, f"the handed-back step started {delay:.2f} s after the hand-back"
    assert second.worker != first.worker
    assert staying.terminate() == 0


def test_a_second_signal_exits_at_once(start_worker, marks):
    run = wf.Sleeper.start(input={"sleep": 30})
    worker = start_worker("--concurrency", "1")  # SHUTDOWN_GRACE 30 s: the first signal alone would wait
    wait_until(lambda: f"{run.pk}:nap:1" in marks.read_text(), timeout=30, what="the body to start")
    started(worker)
    worker.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "stop claiming" in worker.output(), timeout=10, what="the first signal to be handled")
    second = time.monotonic()
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(10) == 1
    assert time.monotonic() - second < 2.0
    step = run.steps.get()
    assert step.status == "in_progress"  # left to its lease and the sweep, as after a crash
