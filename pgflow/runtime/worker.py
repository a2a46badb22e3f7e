"""The worker: claim due attempts, run them in step threads (``async def`` bodies on an
event loop beside it), heartbeat, sweep, shut down.

Life cycle: start the heartbeat, sweep and schedule threads → claim and run until stopped
→ drain within the grace period → hand back what is still running. The main thread claims
(one statement for all free slots) on a connection that also LISTENs, and sleeps until a
NOTIFY on it, a finished attempt or the next due time wakes it, with a polling fallback, so
an idle worker costs the database one cheap query per poll interval.

One concept over ~450 lines: the worker's life cycle around its claim loop; the held
attempts and their slots by kind are in ``held``, the step threads in ``slots``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import socket
import threading
import time
import uuid
from datetime import datetime
from types import FrameType
from typing import Any

import psycopg
from asgiref.sync import sync_to_async
from django.db import DatabaseError, close_old_connections, connections
from django.db import InterfaceError as DjangoInterfaceError

from .. import observability, schedules, store
from ..conf import pgflow_settings
from ..db import connection
from ..store import Claim
from ..store.claims import Kinds, with_subjects
from ..store.leases import reconnected
from . import connections as pgconnections
from . import offering, presence, sweep
from .answer import Answer
from .committer import TWO_COMMITTERS_FROM, Committer
from .held import ASYNC, Held
from .loop import EventLoop
from .offering import Offering, handed_in
from .runner import Result, Runner
from .slots import Slots
from .wake import Wake

logger = logging.getLogger("pgflow")

RECONNECT_DELAY = 1.0  # seconds between attempts while the database is away
THROTTLED_POLL = 0.2  # seconds: how soon an idle worker looks again at due attempts a limit held
TIMEOUT_TICK = 0.5  # seconds between checks for steps past their timeout
THREADS_GRACE = 10.0  # seconds run() waits at the end for its background threads


def schema_missing(exc: BaseException) -> bool:
    """The error says a table or column of ours is missing: the database was not migrated."""
    cause = exc if isinstance(exc, psycopg.Error) else exc.__cause__
    return isinstance(cause, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn)


def default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    def __init__(
        self,
        *,
        queues: list[str] | None = None,
        concurrency: int = 4,
        async_concurrency: int = 100,
        burst: bool = False,
        name: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be a positive whole number, got {concurrency!r}")
        if async_concurrency < 1:
            raise ValueError(f"async_concurrency must be a positive whole number, got {async_concurrency!r}")
        self.queues = queues or [pgflow_settings.QUEUE]
        self.concurrency = concurrency
        self.async_concurrency = async_concurrency
        self.burst = burst
        self.name = name or default_name()
        self.committer: Committer | None = None
        self.runner = Runner()
        self._wake = Wake()
        # The claim connection once it LISTENs: a NOTIFY ends the claim loop's sleep on its
        # own socket, with no listener thread to wake in between.
        self._listening_on: psycopg.Connection[Any] | None = None
        # The NOTIFYs for our queues since the last claim began: each the attempt a start
        # announced, or None (store.read_note).
        self._notes: list[int | None] = []
        # The last claim took fewer than it asked for: nothing else was due, so the next due
        # time (one index probe) decides the wait rather than another claim at once, which
        # would compete with the bodies just handed over for the two sides' CPU.
        self._drained = False
        self._next_due: object = store.NOT_KNOWN  # as the last claim or wait saw it (no query for the wait)
        # The slot this worker offers the starts while it is idle (runtime.offering).
        self._offering = Offering(
            worker=self.name,
            queues=self.queues,
            enabled=pgflow_settings.NOTIFY and pgflow_settings.HAND_OFF and not burst,
        )
        self._stopping = threading.Event()
        # Set once the drain is over: the heartbeat keeps the leases of the bodies the drain
        # lets finish (a body longer than the lease would otherwise be run again elsewhere).
        self._drained_all = threading.Event()
        # Held attempts and their slots by kind (runtime.held); the names below are its
        # objects, shared, not copies.
        self._holding = Held(concurrency=concurrency, async_concurrency=async_concurrency)
        self._running = self._holding.running
        self._bodies = self._holding.bodies
        self._awaiting = self._holding.awaiting
        self._running_lock = self._holding.lock
        self.loop: EventLoop | None = None
        self._signals = 0
        self._db_down_since: float | None = None
        # When the claim loop's queries began failing on a connection that is still there
        # (a statement timeout, a cancel, a lock timeout), and how many times since.
        self._failing_since: float | None = None
        self._failures = 0
        self._async_checks = 0  # pgconnections.checks() when the async bodies' connection was checked
        self._silence_limit = float("inf")  # the watchdog's, once run() set it up
        self.completed = 0
        self.exit_code = 0

    # --- life cycle -----------------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> int:
        """Run until stopped (or, with ``burst``, until nothing is due). Returns an exit code."""
        if install_signals:
            self._install_signals()
        logger.info(
            "worker %s starting: queues=%s concurrency=%d async_concurrency=%d%s",
            self.name,
            ",".join(self.queues),
            self.concurrency,
            self.async_concurrency,
            " burst" if self.burst else "",
            extra={"action": "worker_start"},
        )
        self._watchdog = self._socket_defaults()
        self._silence_limit = self._watchdog.limit
        self._register()
        self.committer = Committer(
            threads=2 if self.concurrency >= TWO_COMMITTERS_FROM else 1, guard=self._watchdog.guard
        )
        self.runner = Runner(finish=self.committer.submit, finish_later=self.committer.submit_later)
        pool: Slots[Claim, Result] = Slots(
            self.concurrency, self._execute, self._finished, stopped=connections.close_all
        )
        self.loop = EventLoop()
        threads = [
            threading.Thread(target=self._heartbeat, name="pgflow-heartbeat", daemon=True),
            threading.Thread(target=self._sweep, name="pgflow-sweep", daemon=True),
            threading.Thread(target=self._schedules, name="pgflow-schedules", daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            self._loop(pool)
        finally:
            self._stopping.set()
            self._withdraw_offer(pool)
            handed = self._drain(pool)
            self._drained_all.set()
            self.loop.stop()
            self.committer.stop()
            self._watchdog.stop()
            self._wake.close()
            self._unlisten()
            # The heartbeat, the sweep and the schedules end their pass and close their
            # connections: run() returns with no thread of its own still at the database (a
            # sweep stuck longer than this is left to the process's exit).
            deadline = time.monotonic() + THREADS_GRACE
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            self._stopped(handed)
            close_old_connections()
        return self.exit_code

    def _socket_defaults(self) -> pgconnections.Watchdog:
        """TCP keepalives, ``tcp_user_timeout`` and ``connect_timeout`` on every connection
        this process opens, below the lease, unless OPTIONS (or the URL) set them; and the
        watchdog that bounds the worker's own queries by the same time."""
        lease = pgflow_settings.seconds("LEASE")
        options = connection.settings_dict.setdefault("OPTIONS", {})
        if "postgresql" in connection.settings_dict.get("ENGINE", ""):
            pgconnections.apply_socket_defaults(options, lease)
            if not pgflow_settings.NOTIFY:
                pgconnections.without_session_state(options)
            connection.close()  # a connection opened before (the command's checks) lacks them
        return pgconnections.Watchdog(pgconnections.silence_limit(options, lease))

    def _register(self) -> None:
        # The Worker row is for operators; a database away at start only delays it (the
        # heartbeat writes it back), and a failed delete at stop leaves a row the sweep forgets.
        try:
            presence.register(name=self.name, queues=self.queues, concurrency=self.concurrency, at=store.now())
        except (DatabaseError, DjangoInterfaceError, psycopg.Error) as exc:
            logger.warning(
                "could not record worker %s: %s",
                self.name,
                " ".join(str(exc).split()),
                extra={"action": "worker_register_failed"},
            )
            connection.close()

    def _unregister(self) -> None:
        try:
            presence.unregister(name=self.name)
        except (DatabaseError, DjangoInterfaceError, psycopg.Error) as exc:
            logger.warning(
                "could not remove worker %s: %s",
                self.name,
                " ".join(str(exc).split()),
                extra={"action": "worker_unregister_failed"},
            )

    def _stopped(self, handed: int) -> None:
        self._unregister()
        logger.info(
            "worker %s stopped: %d steps run, %d handed back",
            self.name,
            self.completed,
            handed,
            extra={"action": "worker_stop"},
        )

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def _install_signals(self) -> None:
        def handle(signum: int, frame: FrameType | None) -> None:
            self._signals += 1
            if self._signals > 1:
                logger.warning("second signal: exiting now", extra={"action": "worker_kill"})
                os._exit(1)
            logger.info(
                "signal %s: stop claiming, let running steps finish",
                signal.Signals(signum).name,
                extra={"action": "worker_stopping"},
            )
            self.stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    # --- the claim loop -------------------------------------------------------------------

    def _loop(self, pool: Slots[Claim, Result]) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                with self._watchdog.guard("claim"):
                    # The attempts starts handed over first: each is on a start's latency, and
                    # nothing below is needed to run them (their notification came on this session).
                    handed = self._submit_handed(pool)
                    pgconnections.leave_if_stale()  # read-only or opened before a silence: reconnect
                    self._listen()
                    claimed = self._claim_and_submit(pool, handed)
                    wait = self._idle_wait(claimed)
                    # Asked in the pass: its failure is handled and retried as a claim's is.
                    burst_over = self.burst and claimed == 0 and not self._running and not self._due_soon()
                    if wait > 0 and self._drained and not self._running and self._listening_on is not None:
                        # Idle: nothing due and no attempt held. An offer made while bodies
                        # run would compete with them for the CPU, on the start latency.
                        self._offering.make(free=self._holding.free(), wait=wait, now=store.now())
                self._got_through()
                if burst_over:
                    return
            except (DatabaseError, DjangoInterfaceError, psycopg.Error) as exc:
                if schema_missing(exc):
                    # No retry fixes this: say what does, and exit non-zero.
                    logger.error(
                        "pgflow's tables are missing or out of date (%s): run `python manage.py migrate`, "
                        "then start the worker again",
                        " ".join(str(exc).split()),
                        extra={"action": "schema_missing"},
                    )
                    self.exit_code = 1
                    return
                if pgconnections.away(exc):
                    self._database_away(exc)
                else:
                    self._claim_failed(exc)
                wait = RECONNECT_DELAY
            if wait > 0:
                self._sleep(wait)

    def _listen(self) -> None:
        """LISTEN on the claim connection (again after a reconnect); the notifications that
        came since the last claim are dropped: the claim about to run covers them."""
        connection.ensure_connection()
        if not pgflow_settings.NOTIFY:
            return  # it polls: a transaction pooler's LISTEN would be on a server connection shared by others
        raw = connection.connection
        listening = self._listening_on
        if listening is not None and raw is listening:
            self._read_notes(listening)
            return
        self._listening_on = None
        self._offering.session_ended()
        # The notifications psycopg meets while it reads a query's results come to _noted
        # (not to its backlog, which only its notifies() generator would empty).
        raw.add_notify_handler(self._noted)
        raw.execute(f"LISTEN {store.CHANNEL}")
        self._listening_on = raw
        self._notes.clear()

    def _noted(self, note: psycopg.Notify) -> None:
        self._note(note.payload)

    def _note(self, payload: str) -> None:
        queue, attempt, rest = store.read_note(payload)
        if queue not in self.queues:
            return
        handed = handed_in(rest, attempt)
        if handed is None:
            self._notes.append(attempt)
        else:  # ours, or another worker's (claimed already): nothing for a claim to take
            self._offering.note(handed)

    def _read_notes(self, raw: psycopg.Connection[Any]) -> None:
        """Take the notifications waiting on the claim connection's socket, without waiting.
        libpq's own calls: psycopg's notifies(timeout=0) took longer to find the one
        notification the select had just announced, all of it on the start latency."""
        pgconn = raw.pgconn
        with raw.lock:
            pgconn.consume_input()
            while (note := pgconn.notifies()) is not None:
                self._note(note.extra.decode(raw.info.encoding))

    def _unlisten(self) -> None:
        """The claim connection stops listening: a worker run inside another process (a test,
        an embedding) leaves its connection as it found it, gathering no notifications."""
        listening, self._listening_on = self._listening_on, None
        if listening is not None:
            try:
                listening.remove_notify_handler(self._noted)
                listening.execute("UNLISTEN *")
                self._offering.stop_offering(listening)
            except (psycopg.Error, ValueError):  # a broken connection listens to nothing either
                pass

    def _sleep(self, seconds: float) -> None:
        """Until another thread wakes us, a NOTIFY for one of our queues arrives on the claim
        connection (one that came during the last claim included), or ``seconds`` pass."""
        deadline = time.monotonic() + seconds
        while True:
            listening = self._listening_on
            if listening is not None:
                try:
                    self._read_notes(listening)
                except psycopg.Error:  # the connection broke: the next claim finds out and reconnects
                    self._listening_on = listening = None
                if self._notes or self._offering.handed:
                    return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            woken = self._wake.wait(remaining, also=None if listening is None else listening.fileno())
            if not woken or self._wake.is_set():
                return

    def _free(self) -> Kinds:
        """Free slots by kind, less the one an offer to the starts reserves."""
        return self._offering.reserve(self._holding.free())

    def _free_total(self) -> int:
        free = self._free()
        return free.threads + free.awaiting

    def _hold(self, held: Claim, slots: tuple[bool, ...]) -> None:
        self._holding.hold(held, slots)

    def _release(self, token: Any) -> None:
        """The attempt ``token`` is no longer held (caller holds ``_running_lock``): its slots are free."""
        self._holding.release(token)

    def _submit_handed(self, pool: Slots[Claim, Result]) -> int:
        """Start the bodies of the attempts starts handed to this worker, into the slot the offer reserved."""
        handed = self._take_handed()
        if handed:
            pgconnections.found_writable()
            self._submit(pool, handed, self._holding.free())
            # The GIL to the step thread now, rather than after the rest of this pass: the
            # body is what the start waits for (a no-op sleep releases it; the loop thread
            # takes it back when that thread waits).
            time.sleep(0)
        return len(handed)

    def _claim_and_submit(self, pool: Slots[Claim, Result], handed: int = 0) -> int:
        """Claim for the free slots and start the bodies; ``handed``: the attempts handed over
        already this pass. The number of attempts started."""
        handed += self._submit_handed(pool)  # those whose notification came since (during _listen)
        # The claim covers every notification so far: those that come during it wake the next.
        notes, self._notes = self._notes, []
        known_due, self._next_due = self._next_due, store.NOT_KNOWN
        if handed and not notes and self._drained and _none_due(known_due):
            self._next_due = known_due  # only hand-offs woke us: nothing else is due to claim
            return handed
        unreserved = self._holding.free()
        free = self._offering.reserve(unreserved)
        if (free.threads <= 0 < unreserved.threads) or (free.awaiting <= 0 < unreserved.awaiting):
            # The offer reserves the only free slot of a kind, and work of that kind may be due
            # (a re-attempt is no start: none hands it over): take the offer back first. If a
            # start took it, its attempt comes in a notification, into that slot, which stays
            # reserved; the other kind's free slots claim meanwhile.
            self._offering.withdraw()
            free = self._offering.reserve(unreserved)
        total = free.threads + free.awaiting
        if total <= 0:
            return handed
        claims: store.Claimed | None = None
        either = free.threads > 0 and (free.awaiting > 0 or not self._holding.async_steps)
        if self._drained and either and len(notes) == 1 and notes[0] is not None and _none_due(known_due):
            # Idle (a slot of either kind free), and one start announced the only attempt due: claim it by its id.
            claims = store.claim_notified(notes[0], worker=self.name, queues=self.queues, readers=self._holding.readers)
        if not claims:  # taken by another worker meanwhile, or not the idle case: the claim
            began = time.monotonic()
            claims = store.claim(worker=self.name, queues=self.queues, limit=total, kinds=free)
            if free.threads:
                self._holding.claim_took(time.monotonic() - began)
        # Before any body starts: a step thread on another node (one that stopped taking
        # writes) then reconnects rather than read it (connections.unusable).
        pgconnections.found_writable()
        self._drained = not free.filled_by(claims)
        self._next_due = claims.next_due
        if not self._drained and self._offering.until is not None:
            self._offering.withdraw()  # a backlog: the next claim may use every slot
        self._submit(pool, claims, free)
        return handed + len(claims)

    def _take_handed(self) -> list[Claim]:
        """The attempts starts handed to this worker since the last pass (runtime.offering)."""
        if not (self._offering.handed or self._offering.settling):
            return []
        with self._running_lock:
            held = list(self._running.values())
        return self._offering.take(held=held, readers=self._holding.readers)

    def _submit(self, pool: Slots[Claim, Result], claims: list[Claim], free: Kinds) -> None:
        """Hold ``claims`` and start their bodies: a step thread's, or a task on the loop."""
        assert self.loop is not None
        kinds = [(held, self._holding.slots_for(held, free, self.runner.is_async)) for held in self._subjects(claims)]
        outputs = self._outputs_for([held for held, slots in kinds if slots == ASYNC and held.outputs is None])
        for held, slots in kinds:
            self._hold(held, slots)
            if slots == ASYNC:
                task = self._execute_async(held, outputs.get(held.run_id))
                self.loop.submit(task, functools.partial(self._done, held))
            else:
                pool.submit(held)

    def _subjects(self, claims: list[Claim]) -> list[Claim]:
        """``claims``, those of a step with ``needs_subject`` carrying their subject (one query
        per subject model, here, rather than one in each body). None read: each reads its own."""
        try:
            return with_subjects(claims)
        except (DatabaseError, DjangoInterfaceError, psycopg.Error):
            logger.warning("reading the subjects of claimed steps failed; each reads its own", exc_info=True)
            return claims

    def _outputs_for(self, awaiting: list[Claim]) -> dict[int, dict[str, Any]]:
        """The outputs of the runs of the async bodies just claimed, in one query: each body
        would otherwise read its own before it starts, in asgiref's one thread for sync code,
        one after another (a big claim's last body waited for all the others' reads). None
        read: each reads its own."""
        if not awaiting:
            return {}
        try:
            return store.outputs_of_runs(sorted({held.run_id for held in awaiting}))
        except (DatabaseError, DjangoInterfaceError, psycopg.Error):
            logger.warning("reading the outputs of claimed async steps failed; each reads its own", exc_info=True)
            return {}

    def _execute(self, held: Claim) -> Result:
        # Each step thread keeps its own connection across steps; one that failed is closed
        # so the thread's next step reconnects (after a database restart, say).
        try:
            return observability.attempt(held, worker=self.name, execute=self.runner.execute)
        except (DatabaseError, DjangoInterfaceError, psycopg.Error):
            connection.close()
            raise

    async def _execute_async(self, held: Claim, outputs: dict[str, Any] | None) -> Result:
        if self._async_checks != pgconnections.checks():
            # The writable node changed, or the database went away: the connection async
            # bodies share (asgiref's thread) may be on the old node or a session that ended,
            # which a body would read; checked there, then reconnected.
            self._async_checks = pgconnections.checks()
            await sync_to_async(pgconnections.close_if_unusable)()
        execute = functools.partial(self.runner.execute_async, outputs=outputs)
        return await observability.attempt_async(held, worker=self.name, execute=execute)

    def _done(self, held: Claim, task: asyncio.Task[Result]) -> None:
        if task.cancelled():  # its timeout cancelled it before its body: the timeout was reported
            self._finished(held, None, None)
            return
        exc = task.exception()
        self._finished(held, None if exc is not None else task.result(), exc)

    def _finished(self, held: Claim, result: Result | None, exc: BaseException | None) -> None:
        """The body is over: its slot is free (the next claim may fill it); the attempt stays
        held, heartbeated, until its commit answered (runtime.held)."""
        with self._running_lock:
            if result is None or result.pending is None:
                self._release(held.token)
            else:
                self._holding.body_over(held.token)
        if exc is not None:
            logger.error("step runner failed: %s", exc, exc_info=exc, extra={"action": "runner_error"})
        elif result is not None and result.pending is not None:
            result.pending.add_done_callback(lambda commit: self._committed(result, commit))
        else:
            self.completed += 1
        self._wake.set()

    def _committed(self, result: Result, commit: Answer[bool]) -> None:
        with self._running_lock:
            self._release(result.claim.token)
        exc = commit.exception()
        if exc is not None:
            # The attempt keeps its lease until it expires, then the sweep runs it again.
            logger.error(
                "applying the outcome of step %s failed: %s",
                result.claim.step_id,
                exc,
                extra={"action": "commit_failed"},
            )
        else:
            result.settled(bool(commit.result()))
            self.completed += 1
        self._wake.set()

    def _idle_wait(self, claimed: int) -> float:
        """Seconds to sleep before the next claim: none while slots are free and work was
        found; up to the next due time or the poll interval otherwise."""
        free = self._free_total()
        if claimed and free > 0 and not self._drained:
            return 0.0  # the claim was cut at its limit: more may be due at once
        if free <= 0:  # a finished step wakes us sooner
            return min(pgflow_settings.seconds("POLL_INTERVAL"), self._silence_limit)
        # A claim at least every silence limit: an idle claim connection's socket that went
        # silent (its NOTIFYs with it) is found out by the watchdog within a bounded time.
        poll = min(pgflow_settings.seconds("POLL_INTERVAL"), self._silence_limit)
        if self._next_due is store.NOT_KNOWN:
            self._next_due = store.next_due(self.queues)
        nxt = self._next_due
        if nxt is None:
            return poll
        assert isinstance(nxt, datetime)
        wait = (nxt - store.now()).total_seconds()
        if wait <= 0 and not claimed:
            # Due but not claimable: held by a limit (pgflow.Limit, Rate, Singleton), whose
            # place frees without a NOTIFY. Look again soon instead of spinning.
            return min(poll, THROTTLED_POLL)
        return max(0.0, min(poll, wait))

    def _due_soon(self) -> bool:
        nxt = store.next_due(self.queues)
        return nxt is not None and nxt <= store.now()

    def _database_away(self, exc: BaseException) -> None:
        self._offering.session_ended()
        if self._db_down_since is None:
            self._db_down_since = time.monotonic()
            logger.error(
                "database unavailable, retrying every %.0fs: %s",
                RECONNECT_DELAY,
                " ".join(str(exc).split()),
                extra={"action": "database_down"},
            )
        # Every step thread's connection too, before its next body: each was opened before the
        # outage, and a body querying on a session the restart killed would lose its attempt
        # (its re-attempt could land on another such thread, until the step paused).
        pgconnections.condemn_open()
        for conn in connections.all(initialized_only=True):
            conn.close_if_unusable_or_obsolete()
            try:
                conn.close()
            except Exception:  # noqa: BLE001,S110 - a dead connection may fail to close; it is gone either way
                pass

    def _claim_failed(self, exc: BaseException) -> None:
        """A query of the claim loop failed, and the database is there (``pgconnections.away``
        is false): its own error, such as a statement timeout or a cancel. Not an outage: the
        step threads keep their connections and the runs' timelines record no reconnection.
        The claim loop alone starts again on a fresh connection, as after any failure."""
        self._offering.session_ended()
        pgconnections.close()
        self._failures += 1
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            logger.error(
                "claim failed, retrying every %.0fs: %s",
                RECONNECT_DELAY,
                " ".join(str(exc).split()),
                exc_info=exc,
                extra={"action": "claim_failed"},
            )

    def _got_through(self) -> None:
        """A pass of the claim loop went through: end what its failures began."""
        if self._failing_since is not None:
            logger.info(
                "claims succeed again after %d failed over %.1fs",
                self._failures,
                time.monotonic() - self._failing_since,
                extra={"action": "claim_recovered"},
            )
            self._failing_since, self._failures = None, 0
        if self._db_down_since is not None:
            away = time.monotonic() - self._db_down_since
            logger.info("database back after %.1fs", away, extra={"action": "database_up"})
            self._db_down_since = None
            with self._running_lock:
                tokens = [held.token for held in self._running.values()]
            try:  # the timelines of the attempts it kept show the gap (store.leases.reconnected)
                reconnected(tokens, worker=self.name, away_seconds=away)
            except (DatabaseError, DjangoInterfaceError, psycopg.Error):
                logger.warning("could not record the reconnection on the runs", exc_info=True)

    # --- background threads ---------------------------------------------------------------

    def _heartbeat(self) -> None:
        """Extends the leases of running attempts and fails those past their timeout, until
        the drain is over.

        Ticks at least once a second so a step's ``timeout`` is noticed promptly, while
        the leases are written once per heartbeat interval.
        """
        interval = pgflow_settings.heartbeat_seconds
        tick = min(interval, TIMEOUT_TICK)
        next_beat = time.monotonic() + interval
        while not self._drained_all.wait(tick):
            try:
                for token in self.runner.overdue(store.now()):
                    # Its own thread: a slow reporter or handler must not hold up the leases.
                    threading.Thread(target=self._time_out, args=(token,), name="pgflow-timeout", daemon=True).start()
                if time.monotonic() < next_beat:
                    continue
                next_beat = time.monotonic() + interval
                with self._running_lock:
                    tokens = [held.token for held in self._running.values()]
                with self._watchdog.guard("heartbeat"):
                    pgconnections.leave_if_stale()  # read-only or opened before a silence: reconnect
                    store.heartbeat(tokens)
                    with self._running_lock:
                        in_progress = len(self._bodies) + len(self._awaiting)
                    presence.beat(
                        name=self.name,
                        queues=self.queues,
                        concurrency=self.concurrency,
                        steps_run=self.completed,
                        in_progress=in_progress,
                        at=store.now(),
                    )
            except (DatabaseError, DjangoInterfaceError, psycopg.Error) as exc:
                # Away (pgconnections.away: lost, shutting down, read-only) or not, a fresh
                # connection is the cure: the next beat reconnects.
                logger.warning("heartbeat failed: %s", " ".join(str(exc).split()), extra={"action": "heartbeat_failed"})
                pgconnections.close()
        connection.close()

    def _sweep(self) -> None:
        """Sweeps now and every SWEEP_INTERVAL, in its own thread: a long sweep (rolling a
        busy hour up takes seconds) never holds up the claim loop. Its connection is closed
        after each sweep, so it holds one only while sweeping."""
        interval = pgflow_settings.seconds("SWEEP_INTERVAL")
        while not self._stopping.is_set():
            try:
                with self._watchdog.guard("sweep", limit=max(self._watchdog.limit, pgflow_settings.seconds("LEASE"))):
                    pgconnections.leave_if_stale()
                    counts = sweep.run(worker=self.name)
                if any(counts.values()):
                    logger.info(
                        "sweep: %s",
                        ", ".join(f"{k}={v}" for k, v in counts.items() if v),
                        extra={"action": "sweep", **counts},
                    )
            except (DatabaseError, DjangoInterfaceError, psycopg.Error) as exc:
                logger.warning("sweep failed: %s", " ".join(str(exc).split()), extra={"action": "sweep_failed"})
            except Exception:
                logger.exception("sweep failed", extra={"action": "sweep_failed"})  # the next one may not
            finally:
                connection.close()
            self._stopping.wait(interval)

    def _schedules(self) -> None:
        """Syncs the declared schedules, then starts due ticks, sleeping until the next one."""
        if not self.burst:  # a burst worker drains steps; it starts no new runs
            with self._watchdog.each_query("schedules"):  # a silent socket ends its wait, it reconnects
                schedules.tick_loop(self._stopping)
        connection.close()

    def _time_out(self, token: Any) -> None:
        try:
            self.runner.time_out(token)
        except Exception:
            logger.exception("applying a step timeout failed", extra={"action": "timeout_failed"})
        finally:
            connection.close()

    # --- shutdown -------------------------------------------------------------------------

    def _withdraw_offer(self, pool: Slots[Claim, Result]) -> None:
        """Stopping: take back the slot offered to the starts. One a start took already has
        its attempt on the way: it runs, and the drain lets it finish."""
        if not (self._offering.reserving or self._offering.handed or self._offering.settling):
            return
        try:
            with self._watchdog.guard("claim"):
                withdrawn = self._offering.withdraw()
                # As long as a taken offer's notification is expected (offering.EXPECT).
                deadline = time.monotonic() + offering.EXPECT
                listening = self._listening_on
                while not withdrawn and listening is not None and not self._offering.handed:
                    if time.monotonic() > deadline:
                        break
                    self._read_notes(listening)
                    time.sleep(0.005)
                handed = self._take_handed()
                if handed:
                    self._submit(pool, handed, self._holding.free())
        except (DatabaseError, DjangoInterfaceError, psycopg.Error) as exc:
            logger.warning(
                "could not withdraw the slot offered to the starts (an attempt handed to it is run "
                "again after its lease): %s",
                " ".join(str(exc).split()),
                extra={"action": "offer_withdraw_failed"},
            )

    def _drain(self, pool: Slots[Claim, Result]) -> int:
        """Let running bodies finish within the grace period, then hand the rest back."""
        deadline = time.monotonic() + pgflow_settings.seconds("SHUTDOWN_GRACE")
        while self._running and time.monotonic() < deadline:
            self._wake.clear()
            self._wake.wait(min(0.1, max(0.0, deadline - time.monotonic())))
        with self._running_lock:
            left = list(self._running.values())
        handed = 0
        if left:
            try:
                handed = store.hand_back(left)
            except (DatabaseError, psycopg.Error) as exc:
                logger.error("could not hand back %d attempts (their leases will expire): %s", len(left), exc)
        pool.shutdown(wait=not left)
        if left:
            # Bodies still running in threads cannot be stopped; their attempts are handed
            # back, so the process exits without waiting for them.
            self._stopped(handed)
            logging.shutdown()
            os._exit(0)
        return handed


def _none_due(next_due: object) -> bool:
    """Whether a next due time seen by a claim or a wait says nothing is due now."""
    return next_due is None or (isinstance(next_due, datetime) and next_due > store.now())
