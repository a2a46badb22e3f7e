"""A worker run inside another process (a test, an embedding) leaves its connection as it found it."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from pgflow.models import Event, WorkflowRun
from pgflow.runtime import connections as pgconnections
from pgflow.runtime.worker import Worker
from tests import workflows as wf
from tests.acceptance.conftest import wait_until
from tests.connections import other_connection
from tests.invariants import assert_exactly_once

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_burst_worker_runs_the_due_steps_and_stops_listening_when_it_returns(monkeypatch):
    # A persistent connection outlives run() (with CONN_MAX_AGE 0 it is closed at the end).
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", None)
    connection.close()
    run = wf.ThreeSteps.start()
    others = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    with connection.cursor() as cursor:
        cursor.execute(others)
        before = {pid for (pid,) in cursor.fetchall()}  # not the worker's: an earlier test's, closing
    assert Worker(burst=True, concurrency=2).run(install_signals=False) == 0
    run.refresh_from_db()
    assert run.status == "finished"
    assert connection.connection is not None, "the worker's claim connection was closed: nothing checked"
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_listening_channels()")
        assert cursor.fetchone() == (0,)
        # Its step threads closed their connections as they stopped: no session the worker
        # opened is left but this one. (A server process leaves pg_stat_activity a moment
        # after its client closed; sessions of earlier tests, there before, are not counted.)
        deadline = time.monotonic() + 5
        while True:
            cursor.execute(others)
            left = {pid for (pid,) in cursor.fetchall()} - before
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert left == set(), "the worker left sessions open"
    assert WorkflowRun.objects.filter(status="finished").count() == 1


def test_an_idle_worker_is_woken_by_the_start_not_by_its_poll(settings):
    # With a poll of 60 s, only the start's NOTIFY can get these runs going within the wait.
    # (An idle worker also claims once per silence bound, a quarter of LEASE: 150 s here.)
    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "POLL_INTERVAL": 60, "LEASE": 600}
    worker = Worker(concurrency=2)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    try:
        for _ in range(3):
            time.sleep(0.5)  # the worker found nothing due and sleeps on its poll
            run = wf.ThreeSteps.start()
            deadline = time.monotonic() + 20
            while run.status != "finished" and time.monotonic() < deadline:
                time.sleep(0.05)
                run.refresh_from_db()
            assert run.status == "finished", f"run {run.pk} is {run.status}: the NOTIFY did not wake the worker"
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()


def test_an_async_task_cancelled_before_its_body_frees_its_slot():
    # A timeout cancels an async attempt's task; if that lands before the body (the task is
    # then cancelled, not finished), the slot and the held attempt must still be let go.
    import asyncio

    from pgflow.runtime.loop import EventLoop

    worker = Worker(concurrency=1)
    held = wf_claim()
    worker._hold(held, (True,))
    loop = EventLoop()
    ended = threading.Event()

    async def waits_for_ever():
        await asyncio.sleep(3600)

    def done(task):
        worker._done(held, task)
        ended.set()

    try:
        loop.submit(waits_for_ever(), done)
        time.sleep(0.1)
        for task in asyncio.all_tasks(loop._loop):
            loop._loop.call_soon_threadsafe(task.cancel)
        assert ended.wait(5), "the cancelled task's callback never ran"
    finally:
        loop.stop()
    assert held.token not in worker._running and held.token not in worker._awaiting
    assert worker._holding.counts == {False: 0, True: 0}
    assert worker._free().threads == 1


def wf_claim():
    from pgflow import store

    run = wf.ThreeSteps.start()
    (held,) = store.claim(worker="t", queues=["workflows"], limit=1)
    assert held.run_id == run.pk
    return held


@contextlib.contextmanager
def sleeper_in_progress(settings: Any, name: str, sleep: float) -> Iterator[WorkflowRun]:
    """A worker in a thread of this process, polling every 0.2 s, and a run whose one body
    sleeps ``sleep`` seconds, yielded once its attempt is claimed; the worker stops after."""
    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "POLL_INTERVAL": 0.2}
    worker = Worker(concurrency=2, name=name)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    try:
        run = wf.Sleeper.start(input={"sleep": sleep})
        wait_until(
            lambda: WorkflowRun.objects.get(pk=run.pk).steps.filter(status="in_progress").exists(),
            timeout=20,
            what="the sleeper's attempt to be claimed",
        )
        yield run
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()


def logged(caplog: Any, action: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", None) == action]


# The claim loop's statements waiting on a lock: a claim, or when the next attempt is due.
# (Only their first kilobyte is in pg_stat_activity.) A committer's claim ahead is a claim
# too: the test below takes the lock while no attempt is being committed.
_CLAIM_LOOP_WAITING = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'
  AND (query LIKE 'WITH open_queues AS%' OR query LIKE '%min(first.scheduled_at)%')
"""


def test_a_claim_cancelled_on_a_live_connection_is_not_an_outage(settings, caplog):
    # A statement timeout or an operator's pg_cancel_backend fails the claim loop's query, and
    # the database is there all along: one claim_failed line, the step threads keep their
    # connections, and the timeline of a run in progress records no reconnection.
    caplog.set_level("INFO", logger="pgflow")
    with sleeper_in_progress(settings, "w-cancelled", sleep=6) as run:  # asleep until well after the lock
        checks = pgconnections.checks()
        with other_connection() as locker:
            locker.execute("LOCK TABLE pgflow_step_live IN ACCESS EXCLUSIVE MODE")
            # Cancelled while it waits on the lock, until it says so (nothing here may read the
            # locked table meanwhile, a timed-out wait_until's report included).
            deadline = time.monotonic() + 20
            with other_connection(autocommit=True) as admin:
                while not logged(caplog, "claim_failed"):
                    assert time.monotonic() < deadline, "no claim_failed line within 20s"
                    for (pid,) in admin.execute(_CLAIM_LOOP_WAITING).fetchall():
                        admin.execute("SELECT pg_cancel_backend(%s)", [pid])
                    time.sleep(0.05)
            locker.rollback()  # the lock goes: claims get through again
        wait_until(
            lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished", timeout=20, what="the sleeper to finish"
        )
        wait_until(
            lambda: logged(caplog, "claim_recovered"),
            timeout=10,
            what="the claim_recovered line",
        )
    failed = logged(caplog, "claim_failed")
    assert len(failed) == 1, [r.getMessage() for r in failed]
    assert failed[0].getMessage().startswith("claim failed, retrying every 1s: ")
    assert "canceling statement due to user request" in failed[0].getMessage()
    actions = {getattr(r, "action", None) for r in caplog.records}
    assert "database_down" not in actions and "database_up" not in actions
    assert pgconnections.checks() == checks, "the step threads were made to reconnect"
    assert not Event.objects.filter(run_id=run.pk, event="reconnected").exists()
    (recovered,) = logged(caplog, "claim_recovered")
    assert re.fullmatch(r"claims succeed again after \d+ failed over \d+\.\ds", recovered.getMessage())
    assert_exactly_once()


_COMMIT_WAITING = """
SELECT pid, query_start FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'
  AND query LIKE '%WITH runs AS (%definition_digest FROM pgflow_run%'
"""


def test_a_commit_cancelled_once_is_applied_not_paused(settings, caplog):
    # The committer's statement cancelled (as a statement_timeout or pg_cancel_backend does):
    # nothing was written and the outcome is not at fault, so it is applied on a second try
    # and the run goes on, where the refusal used to pause it with the cancel as its error.
    caplog.set_level("INFO", logger="pgflow")
    with sleeper_in_progress(settings, "w-commit-cancelled", sleep=1) as run:
        with other_connection() as locker:
            locker.execute("LOCK TABLE pgflow_step_live IN ACCESS EXCLUSIVE MODE")
            deadline = time.monotonic() + 20
            with other_connection(autocommit=True) as admin:
                while not (pids := admin.execute(_COMMIT_WAITING).fetchall()):
                    assert time.monotonic() < deadline, "the body's commit never waited on the lock"
                    time.sleep(0.02)
                ((pid, began),) = pids
                admin.execute("SELECT pg_cancel_backend(%s)", [pid])
                # The second try waits on the lock in its turn (a statement begun later), then passes.
                while not [row for row in admin.execute(_COMMIT_WAITING).fetchall() if row[1] > began]:
                    assert time.monotonic() < deadline, "the commit was not tried again"
                    time.sleep(0.02)
            locker.rollback()
        wait_until(
            lambda: WorkflowRun.objects.get(pk=run.pk).status != "running", timeout=20, what="the sleeper to end"
        )
    run.refresh_from_db()
    assert run.status == "finished", f"{run.status}: {list(run.steps.values_list('status', 'error_message'))}"
    (retried,) = logged(caplog, "commit_retry")
    assert retried.getMessage() == (
        "applying 1 outcome was stopped (canceling statement due to user request); trying once more"
    )
    assert not logged(caplog, "commit_failed")
    assert_exactly_once()


def test_a_burst_worker_whose_claim_fails_tries_again_and_drains(caplog):
    # A burst worker asked what was due once its claim failed, outside the loop's handling:
    # the second failure raised out of run(). It now tries again, as any worker does, and
    # returns 0 once the steps are drained.
    caplog.set_level("INFO", logger="pgflow")
    run = wf.ThreeSteps.start()
    worker = Worker(burst=True, concurrency=2, name="w-burst-failing")
    codes: list[int] = []
    with other_connection() as locker:
        locker.execute("LOCK TABLE pgflow_step_live IN ACCESS EXCLUSIVE MODE")
        thread = threading.Thread(target=lambda: codes.append(worker.run(install_signals=False)))
        thread.start()
        try:
            deadline = time.monotonic() + 20
            with other_connection(autocommit=True) as admin:
                while worker._failures < 2:  # a failed pass, then another: the worker went on
                    assert thread.is_alive(), "run() ended while its claims failed"
                    assert time.monotonic() < deadline, "the burst worker's claims were not retried"
                    for (pid,) in admin.execute(_CLAIM_LOOP_WAITING).fetchall():
                        admin.execute("SELECT pg_cancel_backend(%s)", [pid])
                    time.sleep(0.05)
        finally:
            locker.rollback()
            thread.join(30)
    assert codes == [0]
    run.refresh_from_db()
    assert run.status == "finished"
    assert len(logged(caplog, "claim_failed")) == 1
    assert_exactly_once()
