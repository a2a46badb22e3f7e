"""``pgflow_worker --processes N``: one worker command, N worker processes.

A worker process runs its Python on one core at a time (the GIL); a busy one is bound by that
before PostgreSQL is (benchmarks/RESULTS.md). With ``--processes N`` the command's process
claims nothing: it starts N children, each a whole worker (its own claim loop, step threads,
group commit, heartbeat and sweep) as if started alone, passes each stop signal on to them,
starts again a child that died, and exits once they have all stopped.

The children are spawned (a fresh interpreter each, no fork of a process holding threads and
database connections) and sit in their own process group, so a terminal's Ctrl-C reaches the
parent alone and each child receives each stop signal once: from the parent. Under systemd
that asks for ``KillMode=mixed`` (SIGTERM to the parent only), as for any supervisor.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType

import django
from django.core.management import call_command

logger = logging.getLogger("pgflow")

RESTART_DELAY = 1.0  # seconds before a child that died is started again
# A child that keeps dying soon after it started (a crash in a C extension, the OOM killer)
# waits twice as long each time, up to this, rather than being started every second for ever.
MAX_RESTART_DELAY = 60.0
LIVED = 60.0  # seconds a child must have run for its next death to count as the first again
# A child that exits with 1 this soon after it started met a configuration error (the
# database lacks a migration, a setting is wrong): starting it again cannot help.
GIVE_UP_WITHIN = 10.0
PARENT_CHECK = 1.0  # seconds between a child's looks at whether its parent is still there


def serve(argv: list[str], parent: int) -> None:
    """A child: run ``pgflow_worker`` with ``argv`` in this process; stop (draining, as on a
    SIGTERM) when the parent is gone, so a killed parent leaves no worker behind."""
    # Until the worker installs its own handlers, a stop finds nothing claimed: exit as asked.
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
    os.setpgrp()
    django.setup()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="pgflow-parent-watch", daemon=True).start()
    try:
        call_command("pgflow_worker", *argv)
    except SystemExit as exc:  # the command's exit code is the process's
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception:
        logger.exception("worker process failed")
        code = 1
    else:
        return
    # os._exit skips atexit: the handlers that send in the background (a queue listener, an
    # error tracker's) get the line that says why the process ended first.
    logging.shutdown()
    os._exit(code)


def restart_delay(deaths: int) -> float:
    """Seconds before a child that died is started again, after ``deaths`` deaths in a row,
    each soon after its start: RESTART_DELAY, doubled for each one after the first."""
    return min(MAX_RESTART_DELAY, RESTART_DELAY * 2 ** min(deaths - 1, 16))


class Supervisor:
    """Starts ``count`` children, child ``i`` running ``pgflow_worker`` with ``argv_for(i)``."""

    def __init__(self, count: int, argv_for: Callable[[int], list[str]], *, burst: bool) -> None:
        self.count = count
        self.argv_for = argv_for
        self.burst = burst
        self._context = multiprocessing.get_context("spawn")
        self._children: dict[int, BaseProcess] = {}
        self._started_at: dict[int, float] = {}
        self._restart_at: dict[int, float] = {}
        self._quick_deaths: dict[int, int] = {}  # deaths in a row, each within LIVED of its start
        self._told: set[int] = set()  # the pids a stop was passed on to
        self._stopping = False
        self.exit_code = 0

    def run(self) -> int:
        self._install_signals()
        logger.info("starting %d worker processes", self.count, extra={"action": "processes_start"})
        for index in range(self.count):
            self._start(index)
        while self._children or self._restart_at:
            self._start_due()
            sentinels = [child.sentinel for child in self._children.values()]
            wait(sentinels, timeout=self._next_wait())
            for index, child in list(self._children.items()):
                if child.exitcode is not None:
                    self._ended(index, child)
        logger.info("worker processes stopped", extra={"action": "processes_stop"})
        return self.exit_code

    def _start(self, index: int) -> None:
        if self._stopping:  # a signal came while the others were starting: this one never would stop
            return
        child = self._context.Process(
            target=serve, args=(self.argv_for(index), os.getpid()), name=f"pgflow-worker-{index}", daemon=False
        )
        child.start()
        self._children[index] = child
        self._started_at[index] = time.monotonic()
        if self._stopping and child.pid not in self._told:  # the signal came while it started
            self._tell(child)

    def _ended(self, index: int, child: BaseProcess) -> None:
        del self._children[index]
        code = child.exitcode
        if self._stopping and code == -signal.SIGTERM:
            code = 0  # stopped by our SIGTERM before it could take it as a stop: as asked
        if self._stopping or (self.burst and code == 0):
            if code and not self.exit_code:
                self.exit_code = code if code > 0 else 1
            return
        if code == 1 and time.monotonic() - self._started_at[index] < GIVE_UP_WITHIN:
            logger.error(
                "worker process %d (pid %s) exited with 1 within %.0fs of starting; stopping the others",
                index,
                child.pid,
                GIVE_UP_WITHIN,
                extra={"action": "processes_give_up"},
            )
            self.exit_code = 1
            self.stop()
            return
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with {code}"
        lived = time.monotonic() - self._started_at[index]
        self._quick_deaths[index] = self._quick_deaths.get(index, 0) + 1 if lived < LIVED else 1
        delay = restart_delay(self._quick_deaths[index])
        logger.warning(
            "worker process %d (pid %s) %s; starting it again in %.0fs",
            index,
            child.pid,
            how,
            delay,
            extra={"action": "processes_restart"},
        )
        self._restart_at[index] = time.monotonic() + delay

    def _start_due(self) -> None:
        now = time.monotonic()
        for index, at in list(self._restart_at.items()):
            if self._stopping:
                del self._restart_at[index]
            elif at <= now:
                del self._restart_at[index]
                self._start(index)

    def _next_wait(self) -> float:
        if not self._restart_at:
            return 1.0
        return max(0.0, min(self._restart_at.values()) - time.monotonic())

    def stop(self) -> None:
        """Pass a stop on to every child: the first lets their running steps finish, a second
        makes them exit at once, as for a single worker process."""
        self._stopping = True
        for child in self._children.values():
            self._tell(child)

    def _tell(self, child: BaseProcess) -> None:
        if child.pid is not None and child.exitcode is None:
            self._told.add(child.pid)
            try:
                os.kill(child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _install_signals(self) -> None:
        def handle(signum: int, frame: FrameType | None) -> None:
            logger.info(
                "signal %s: passing it on to %d worker processes",
                signal.Signals(signum).name,
                len(self._children),
                extra={"action": "processes_stopping"},
            )
            self.stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
