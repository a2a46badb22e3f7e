"""An idle worker's offer of a slot, taken by a plain start (pgflow.store.offers), and the
worker's side of it (pgflow.runtime.offering), on real sessions: a second connection plays
the worker that offered, this test's connection the start."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, transaction
from django.test import override_settings

import pgflow
from pgflow import store
from pgflow.core.flow import Outcome
from pgflow.models import Offer, Step, WorkflowRun
from pgflow.runtime import offering as offering_module
from pgflow.runtime.offering import Offering, handed_in
from pgflow.runtime.worker import Worker
from pgflow.store import offers
from pgflow.store.claims import Kinds
from tests import async_workflows as aw
from tests import workflows as wf
from tests.acceptance.conftest import wait_until
from tests.connections import other_connection
from tests.invariants import assert_exactly_once

pytestmark = pytest.mark.django_db(transaction=True)

WORKER_LEASE = timedelta(seconds=7)  # the offering worker's LEASE, not the starting process's


@pytest.fixture
def idle() -> Iterator[psycopg.Connection]:
    """A session that LISTENs, as an idle worker's claim connection does."""
    with other_connection(autocommit=True) as conn:
        conn.execute(f"LISTEN {store.CHANNEL}")
        yield conn


def offer_on(conn: psycopg.Connection, worker: str = "w-1", queues: tuple[str, ...] = ("workflows",), **until) -> None:
    conn.execute(offers.MARK_SQL)  # as a worker's session does before its first offer
    conn.execute(
        "INSERT INTO pgflow_offer (worker, queues, backend_pid, until, lease)"
        " VALUES (%s, %s, pg_backend_pid(), %s, %s)",
        [worker, list(queues), store.now() + timedelta(**(until or {"seconds": 30})), WORKER_LEASE],
    )


def notes(conn: psycopg.Connection) -> list[tuple[str, int | None, str]]:
    return [store.read_note(n.payload) for n in conn.notifies(timeout=1.0, stop_after=1)]


def test_a_start_takes_an_offer_and_hands_its_first_attempt_claimed():
    with other_connection(autocommit=True) as idle:
        idle.execute(f"LISTEN {store.CHANNEL}")
        offer_on(idle)
        run = wf.ThreeSteps.start(input={"a": 1})
        ((queue, attempt, rest),) = notes(idle)
    step = Step.objects.get(run=run)
    assert (step.status, step.worker) == ("in_progress", "w-1")
    # Claimed as it was made: no time in the queue, a lease from the start.
    assert step.started_at == step.scheduled_at == step.created_at
    assert step.lease_expires_at == step.started_at + WORKER_LEASE
    assert not Offer.objects.exists()  # taken: one start per offer
    handed = handed_in(rest, attempt)
    assert (queue, attempt, handed.worker, handed.token) == ("workflows", step.pk, "w-1", step.claim_token)
    # The claim in the notification is the one a claim by id would have read.
    claim = handed.claim
    assert (claim.step_id, claim.run_id, claim.step_name, claim.attempt) == (step.pk, run.pk, "one", 1)
    assert claim.started_at == step.started_at and claim.outputs == {}
    assert claim.run().input == {"a": 1} and claim.run().workflow_class == "tests.workflows.ThreeSteps"
    assert claim.step_fields == {
        "created_at": step.created_at,
        "scheduled_at": step.scheduled_at,
        "waiting_since": None,
        "queue": "workflows",
        "throttled_until": None,
    }
    fetched = offers.fetch(handed, readers=frozenset())
    assert (fetched.run_fields, fetched.step_fields, fetched.token) == (
        claim.run_fields,
        claim.step_fields,
        claim.token,
    )
    # The handed attempt is an attempt like any other: its worker finishes it with its token.
    assert store.finish(claim, Outcome(kind="complete"), output={"n": 1})
    assert Step.objects.filter(run=run, step_name="two", status="scheduled").exists()


@pytest.mark.parametrize(
    "why",
    ["another queue", "paused queue", "expired", "session ended", "in a transaction", "turned off", "a key", "large"],
)
def test_a_start_passes_an_offer_over(why, idle):
    queues = ("mail",) if why == "another queue" else ("workflows",)
    offer_on(idle, queues=queues, **({"seconds": -1} if why == "expired" else {}))
    if why == "session ended":
        gone = other_connection(autocommit=True)
        pid = gone.info.backend_pid
        Offer.objects.update(backend_pid=pid)
        gone.close()
        with other_connection(autocommit=True) as check:  # its backend is gone once unlisted
            for _ in range(200):
                if not check.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
                    break
                check.execute("SELECT pg_sleep(0.01)")
    if why == "paused queue":
        pgflow.pause_queue("workflows")
    if why == "in a transaction":
        with transaction.atomic():
            run = wf.ThreeSteps.start()
    elif why == "turned off":
        with override_settings(PGFLOW={**_pgflow(), "HAND_OFF": False}):
            run = wf.ThreeSteps.start()
    elif why == "a key":
        run = wf.ThreeSteps.start(key="k")
    elif why == "large":  # its claim would not fit a notification
        run = wf.ThreeSteps.start(input={"text": "é" * 600})  # 3,600 bytes as JSON
    else:
        run = wf.ThreeSteps.start()
    step = Step.objects.get(run=run)
    assert (step.status, step.worker, step.claim_token) == ("scheduled", "", None)
    assert Offer.objects.count() == 1  # left for a start that may take it
    if why not in ("paused queue", "a key"):
        ((_, attempt, rest),) = notes(idle)
        assert (attempt, rest) == (step.pk, "")  # announced to any worker, handed to none


def _pgflow() -> dict:
    from django.conf import settings

    return dict(getattr(settings, "PGFLOW", {}))


def test_two_starts_take_one_offer_once(idle):
    offer_on(idle)
    runs = [wf.ThreeSteps.start() for _ in range(3)]
    steps = [Step.objects.get(run=run) for run in runs]
    assert [step.status for step in steps] == ["in_progress", "scheduled", "scheduled"]


def test_the_worker_offers_renews_and_withdraws_on_its_own_session():
    offering = Offering(worker="w-2", queues=["workflows"], enabled=True)
    free = Kinds(threads=2, awaiting=0)
    offering.make(free=free, wait=1.0, now=store.now())
    row = Offer.objects.get()
    assert (row.worker, row.queues, offering.reserving) == ("w-2", ["workflows"], True)
    assert offering.reserve(free).threads == 1  # the offered slot is kept for a start
    first = row.until
    offering.make(free=free, wait=60.0, now=store.now())  # a longer sleep: renewed past it
    assert Offer.objects.get().until > first + timedelta(seconds=50)
    assert offering.withdraw() is True
    assert not Offer.objects.exists() and not offering.reserving and offering.reserve(free).threads == 2


def marks_held(pid: int) -> int:
    with other_connection(autocommit=True) as check:
        row = check.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s"
            " AND objsubid = 2 AND mode = 'ExclusiveLock' AND granted",
            [offers.SESSION_MARK, pid],
        ).fetchone()
    return row[0]


def test_an_offering_session_holds_its_mark_and_a_start_probes_it():
    offering = Offering(worker="w-9", queues=["workflows"], enabled=True)
    offering.make(free=Kinds(threads=2, awaiting=0), wait=1.0, now=store.now())
    session = offers.session()
    assert marks_held(session) == 1
    assert offering.withdraw() is True
    offering.make(free=Kinds(threads=2, awaiting=0), wait=1.0, now=store.now())  # the same session: marked already
    started: list[int] = []

    def start_elsewhere() -> None:  # a start on a session of its own, as a web process's
        try:
            started.append(wf.ThreeSteps.start().pk)
        finally:
            connection.close()

    thread = threading.Thread(target=start_elsewhere)
    thread.start()
    thread.join(30)
    # Its probe found the mark held by another session: alive, and the offer taken.
    assert Step.objects.get(run_id=started[0]).worker == "w-9"
    assert marks_held(session) == 1


def test_no_offer_is_made_while_a_start_holds_the_sessions_mark():
    # A start probing an ended session's offer whose pid this session now has holds the mark
    # shared until it commits: the offer waits for the next idle wake, rather than block.
    session = offers.session()
    with other_connection() as start:
        start.execute("SELECT pg_try_advisory_xact_lock_shared(%s, %s)", [offers.SESSION_MARK, session])
        offering = Offering(worker="w-10", queues=["workflows"], enabled=True)
        offering.make(free=Kinds(threads=2, awaiting=0), wait=1.0, now=store.now())
        assert not Offer.objects.exists() and not offering.reserving
        start.rollback()
    offering.make(free=Kinds(threads=2, awaiting=0), wait=1.0, now=store.now())
    assert Offer.objects.get().backend_pid == session and offering.reserving


def test_a_taken_offer_reserves_its_slot_until_the_notification_comes(idle):
    offering = Offering(worker="w-3", queues=["workflows"], enabled=True)
    offering.make(free=Kinds(threads=1, awaiting=0), wait=1.0, now=store.now())
    run = wf.ThreeSteps.start()
    assert offering.withdraw() is False  # a start took it: its attempt is on its way
    assert offering.reserving and offering.reserve(Kinds(threads=1, awaiting=0)).threads == 0
    offering.make(free=Kinds(threads=1, awaiting=0), wait=1.0, now=store.now())
    assert not Offer.objects.exists()  # no second offer while one attempt is on its way
    ((_, attempt, rest),) = notes(idle)
    offering.note(handed_in(rest, attempt))
    (claim,) = offering.take(held=[], readers=frozenset())
    assert claim.run_id == run.pk and not offering.reserving


def test_a_renewal_finds_a_taken_offer():
    offering = Offering(worker="w-4", queues=["workflows"], enabled=True)
    offering.make(free=Kinds(threads=1, awaiting=0), wait=1.0, now=store.now())
    wf.ThreeSteps.start()
    offering.make(free=Kinds(threads=1, awaiting=0), wait=60.0, now=store.now())
    assert offering.expecting and not Offer.objects.exists()


@pytest.mark.parametrize("taken", [True, False])
def test_after_its_session_ended_a_worker_settles_its_offer(taken, idle):
    offering = Offering(worker="w-5", queues=["workflows"], enabled=True)
    offering.make(free=Kinds(threads=2, awaiting=0), wait=1.0, now=store.now())
    runs = [wf.ThreeSteps.start(), wf.ThreeSteps.start()] if taken else []  # the first takes the offer
    held = store.claim(worker="w-5", queues=["workflows"], limit=1)  # one it claimed itself
    assert [claim.run_id for claim in held] == [run.pk for run in runs[1:]]
    offering.session_ended()  # a notification on its way went with the session
    assert offering.settling and not offering.reserving
    adopted = offering.take(held=list(held), readers=frozenset())
    assert not offering.settling and not Offer.objects.exists()  # withdrawn, or taken
    if not taken:
        assert adopted == []
        return
    (claim,) = adopted  # handed to it before the session ended: run now, not after its lease
    step = Step.objects.get(run=runs[0])
    assert (claim.step_id, claim.token, claim.run().input) == (step.pk, step.claim_token, {})
    # Its notification, had it reached the new session, does not run it twice.
    (_, attempt, rest), *_ = notes(idle)
    assert offering.note(handed_in(rest, attempt)) is True
    assert offering.take(held=[], readers=frozenset()) == []
    for each in [*held, claim]:
        assert store.finish(each, Outcome(kind="complete"))
    assert_exactly_once()


def test_a_slot_whose_attempt_does_not_come_is_free_again(monkeypatch):
    monkeypatch.setattr(offering_module, "EXPECT", 0.05)
    offering = Offering(worker="w-7", queues=["workflows"], enabled=True)
    offering.make(free=Kinds(threads=1, awaiting=0), wait=1.0, now=store.now())
    Offer.objects.all().delete()  # gone as if taken, its notification never to come
    assert offering.withdraw() is False and offering.reserving
    time.sleep(0.1)
    assert not offering.reserving


def test_a_twin_with_the_same_name_takes_none_of_its_hand_offs(idle):
    offer_on(idle, worker="twin")
    twin = Offering(worker="twin", queues=["workflows"], enabled=True)
    twin.session = idle.info.backend_pid + 1  # its own session: another backend
    run = wf.ThreeSteps.start()
    ((_, attempt, rest),) = notes(idle)
    handed = handed_in(rest, attempt)
    assert handed.session == idle.info.backend_pid and handed.worker == "twin"
    assert twin.note(handed) is False and twin.take(held=[], readers=frozenset()) == []
    assert Step.objects.get(run=run).worker == "twin"  # the offering session's


def test_a_disabled_offering_offers_nothing():
    offering = Offering(worker="w-6", queues=["workflows"], enabled=False)
    offering.make(free=Kinds(threads=4, awaiting=0), wait=1.0, now=store.now())
    assert not Offer.objects.exists() and not offering.reserving


def test_a_hand_off_read_with_the_offers_own_answer_is_kept(monkeypatch):
    # A start may take the offer the moment it commits; its notification can then come in with
    # the offer statement's answer, before the statement returns.
    offering = Offering(worker="w-8", queues=["workflows"], enabled=True)
    real_offer = offers.offer

    def offer_then_taken(**kwargs):
        made = real_offer(**kwargs)
        step = Step.objects.get(run=wf.ThreeSteps.start())
        session = offers.session()
        offering.note(offers.Handed(worker="w-8", session=session, step_id=step.pk, token=step.claim_token, claim=None))
        return made

    monkeypatch.setattr(offers, "offer", offer_then_taken)
    offering.make(free=Kinds(threads=1, awaiting=0), wait=1.0, now=store.now())
    assert not offering.reserving and len(offering.handed) == 1  # its slot is the attempt's, not an offer's
    (claim,) = offering.take(held=[], readers=frozenset())
    assert claim.step_name == "one" and Step.objects.get(pk=claim.step_id).worker == "w-8"


def test_a_worker_run_in_the_callers_thread_lets_its_sessions_mark_go(settings):
    # Run in a test's or an embedding's own thread, the worker's claim session is the
    # caller's: once stopped it holds no lock of ours, as it holds no LISTEN.
    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "POLL_INTERVAL": 0.2}
    worker = Worker(concurrency=1, name="w-caller")
    seen: list[int] = []

    def stop_once_offered() -> None:
        try:
            deadline = time.monotonic() + 20
            while not seen and time.monotonic() < deadline:
                offer = Offer.objects.filter(worker="w-caller").first()
                if offer is not None:
                    seen.append(offer.backend_pid)
                time.sleep(0.05)
        finally:
            worker.stop()
            connection.close()

    stopper = threading.Thread(target=stop_once_offered)
    stopper.start()
    # Persistent connections (CONN_MAX_AGE None): the session outlives the run, with
    # whatever it still holds; Django's default 0 closes it at the run's end.
    age = connection.settings_dict["CONN_MAX_AGE"]
    connection.settings_dict["CONN_MAX_AGE"] = None
    try:
        worker.run(install_signals=False)
    finally:
        connection.settings_dict["CONN_MAX_AGE"] = age
    stopper.join(30)
    assert seen, "the idle worker made no offer"
    (session,) = seen
    assert offers.session() == session  # the caller's connection, still open
    assert marks_held(session) == 0


def test_async_slots_claim_while_a_taken_offers_attempt_is_on_its_way(settings, monkeypatch):
    # A one-thread worker with async slots offered its thread, and a start took the offer: the
    # thread stays reserved for that start's attempt until its notification comes, and the
    # async slots go on claiming meanwhile.
    monkeypatch.setattr(offering_module, "EXPECT", 60)  # the longest the reserved thread waits for it
    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "POLL_INTERVAL": 60}
    worker = Worker(concurrency=1, name="w-async")
    assert worker._holding.async_steps, "no async step known: nothing to claim for the async slots"
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    try:
        wait_until(Offer.objects.filter(worker="w-async").exists, timeout=20, what="the idle worker's offer")
        # Taken, as a start takes it, its notification not here yet (it never comes here).
        assert Offer.objects.filter(worker="w-async").delete()[0] == 1, "the idle worker made no offer"
        run = aw.AsyncSleeper.start(input={"sleep": 0})
        wait_until(
            lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished",
            timeout=20,
            what="the async run to finish (its claim waited for the taken offer)",
        )
        assert worker._offering.reserving  # the thread is still the taken offer's
    finally:
        monkeypatch.setattr(offering_module, "EXPECT", 0.1)  # a stop waits this long for the attempt that never comes
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert_exactly_once()
