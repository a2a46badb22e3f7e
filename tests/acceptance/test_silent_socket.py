"""A socket that goes silent: a TCP proxy between the worker and PostgreSQL stops forwarding
on every open connection without closing any (as a vanished host behind a load balancer
looks: the proxy's kernel still acks, so TCP's keepalives never fail). The worker notices
within its silence bound (``tcp_user_timeout``, below LEASE), reconnects through the proxy
(new connections are forwarded) and LISTENs again; no step is claimed twice.

Before the fix the worker's claim blocked on the silent socket for ever: no run started after
the freeze ran."""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from pgflow.models import Step, WorkflowRun
from tests.acceptance.conftest import wait_until
from tests.invariants import assert_exactly_once
from tests.workflows import ThreeSteps

pytestmark = pytest.mark.django_db(transaction=True)


class Proxy:
    """127.0.0.1:port → the server; ``freeze()`` stops forwarding on the connections open now
    (each stays open, its bytes unread); connections opened later are forwarded."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.loop = asyncio.new_event_loop()
        self.frozen: set[asyncio.Task[None]] = set()
        self.pumps: set[asyncio.Task[None]] = set()
        self.writers: list[asyncio.StreamWriter] = []
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(5)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            self.pumps.add(asyncio.ensure_future(self._pump(source, sink)))

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if asyncio.current_task() not in self.frozen:
                sink.close()

    def freeze(self) -> int:
        """Stop forwarding on every open connection, closing none; returns how many pumps."""

        def stop() -> int:
            frozen = {pump for pump in self.pumps if not pump.done()}
            self.frozen |= frozen
            for pump in frozen:
                pump.cancel()
            self.pumps -= frozen
            return len(frozen)

        done = threading.Event()
        result: list[int] = []
        self.loop.call_soon_threadsafe(lambda: (result.append(stop()), done.set()))
        done.wait(5)
        return result[0]

    def close(self) -> None:
        def shut() -> None:
            self.server.close()
            for writer in self.writers:
                writer.transport.abort()  # closes its socket in a callback of the next round
            # Stopped after those callbacks: a loop stopped in this round would leave the
            # frozen connections' sockets open, and their server sessions (a frozen sweep
            # holding its advisory locks in an open transaction) would outlive the test.
            self.loop.call_soon(self.loop.stop)

        self.loop.call_soon_threadsafe(shut)
        self.thread.join(5)


def test_a_worker_notices_a_silent_socket_reconnects_and_listens_again(start_worker) -> None:
    settings = connection.settings_dict
    proxy = Proxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))
    try:
        parts = urlsplit(os.environ["DATABASE_URL"])
        netloc = f"{parts.username or ''}{':' + parts.password if parts.password else ''}@127.0.0.1:{proxy.port}"
        url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
        # Lease 12 s: the silence bound is a quarter of it (3 s); the poll fallback is far
        # longer (60 s), so a run started after the reconnect is claimed on its NOTIFY.
        worker = start_worker("--concurrency", "2", lease=12.0, env={"DATABASE_URL": url, "PGFLOW_POLL_SECONDS": "60"})
        first = ThreeSteps.start()
        wait_until(lambda: WorkflowRun.objects.get(pk=first.pk).status == "finished", timeout=30, what="first run")
        time.sleep(0.5)  # idle: no step in flight when the sockets go silent
        assert proxy.freeze() > 0
        frozen_at = time.monotonic()
        runs = [ThreeSteps.start() for _ in range(5)]  # on our own connection; their NOTIFYs go unheard

        def finished() -> bool:
            return WorkflowRun.objects.filter(pk__in=[r.pk for r in runs], status="finished").count() == len(runs)

        wait_until(finished, timeout=40, what="the runs started while the worker's sockets were silent")
        recovered = time.monotonic() - frozen_at
        assert worker.proc.poll() is None, "the worker exited instead of reconnecting"
        # LISTENing again: a start now is claimed on its NOTIFY. An idle worker also claims
        # once per silence bound (3 s here), so a deaf one could finish a start in time by
        # luck; five in a row, each within 1.2 s of its start, would all be luck (about 1 %).
        delays = []
        for _ in range(5):
            time.sleep(0.3)
            started = time.monotonic()
            later = ThreeSteps.start().pk
            wait_until(
                lambda pk=later: WorkflowRun.objects.get(pk=pk).status == "finished", timeout=30, what="a run after it"
            )
            delays.append(time.monotonic() - started)
        notified = max(delays)
        assert notified < 1.2, f"starts after the reconnect finished {delays} s later: not woken by their NOTIFYs"
        attempts = list(Step.objects.exclude(attempt=1).values_list("run_id", "step_name", "attempt"))
        assert attempts == [], f"steps claimed more than once: {attempts}"
        assert_exactly_once()
        worker.proc.terminate()
        assert worker.proc.wait(30) == 0
        log = worker.log.read_text()
        assert re.search(r"did not answer the (claim|heartbeat)", log), log[-3000:]
        print(
            f"\n[reliability] silent socket: worker noticed and finished the 5 runs {recovered:.1f}s after the freeze "
            f"(bound {3.0:.0f}s per wait); five starts after it ran at most {notified:.2f}s later; "
            "0 steps claimed twice"
        )
    finally:
        proxy.close()


def test_a_body_query_and_the_schedules_on_a_silent_socket_are_cut_and_the_timeline_shows_it(
    start_worker, marks
) -> None:
    from datetime import UTC, datetime, timedelta
    from pathlib import Path

    from pgflow.models import Event, Schedule
    from tests.pooler_workflows import QueriesWhenTold
    from tests.schedule_workflows import Quick

    settings = connection.settings_dict
    proxy = Proxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))
    try:
        parts = urlsplit(os.environ["DATABASE_URL"])
        netloc = f"{parts.username or ''}{':' + parts.password if parts.password else ''}@127.0.0.1:{proxy.port}"
        url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
        # Lease 12 s: pgflow's own queries (the claim, the schedules) are bounded by 3 s, a
        # body's by the lease.
        worker = start_worker("--concurrency", "2", lease=12.0, env={"DATABASE_URL": url})
        run = QueriesWhenTold.start()
        wait_until(lambda: f"{run.pk}:ask:1" in marks.read_text(), timeout=30, what="the body to start")
        time.sleep(1)  # the schedules thread synced on its connection and sleeps
        assert proxy.freeze() > 0
        frozen_at = time.monotonic()
        now = datetime.now(UTC)
        Schedule.objects.create(
            workflow_class=Quick.workflow_path(),
            name="after-the-silence",
            every=timedelta(hours=1),
            overlap="allow",
            catch_up=timedelta(hours=1),
            next_tick_at=now - timedelta(seconds=5),
            created_at=now,
            updated_at=now,
        )
        Path(f"{marks}.go").touch()  # the body's query now goes out on its silent socket

        wait_until(lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished", timeout=45, what="the body's run")
        body_done = time.monotonic() - frozen_at
        wait_until(
            lambda: WorkflowRun.objects.filter(workflow_class=Quick.workflow_path(), status="finished").exists(),
            timeout=45,
            what="the schedule's tick after the silence",
        )
        attempts = list(Step.objects.filter(run=run).order_by("attempt").values_list("attempt", "status", "outcome"))
        assert [a[:2] for a in attempts] == [(1, "failed"), (2, "completed")], attempts  # lost, re-run, not failed
        assert worker.terminate() == 0
        log = worker.output()
        assert "did not answer the body's query" in log, log[-3000:]
        assert "did not answer the schedules" in log, log[-3000:]
        # The timeline shows the worker went away and came back while it held the attempt.
        back = Event.objects.filter(run=run, event="reconnected").values_list("step__attempt", "details")
        assert [(attempt, sorted(details)) for attempt, details in back] == [(1, ["away_seconds", "worker"])], back
        assert Event.objects.filter(run=run, event="lease_lost").count() == 1
        assert_exactly_once()
        print(f"\n[reliability] a body's query on a silent socket: cut and its run finished {body_done:.1f}s after")
    finally:
        proxy.close()
