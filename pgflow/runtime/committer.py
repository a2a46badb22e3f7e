"""Group commit: the outcomes of attempts that end at about the same time are applied in
one transaction.

Step threads hand their outcome to ``submit`` and wait for it to be applied; a committing
thread takes whatever has queued up (never waiting for more: a lone outcome is applied at
once) and applies it with ``store.finish_many``. Under load that turns a transaction per
step into a transaction per batch, and a lock, a token check and a write per row into a few
set-based statements.

A busy worker commits from two threads, each on its own connection: a batch spends most of
its time waiting (round trips, then the WAL flush of its commit), and one thread alone left
the next batch waiting for all of it, with the machine half idle. With few slots (under
``TWO_COMMITTERS_FROM``) batches are small and a second thread only halves them, which costs
more than the overlap gives: one commits.
Two threads' batches never share a run: each locks its runs with SKIP LOCKED and hands back,
for later, an outcome whose run the other holds.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from .. import db, store
from ..conf import pgflow_settings
from ..core import errors as error_capture
from ..core.flow import PAUSE, Outcome
from ..db import connection
from . import connections
from .answer import Answer

logger = logging.getLogger("pgflow")

MAX_BATCH = 64  # outcomes per transaction; bounds lock time and statement size
TWO_COMMITTERS_FROM = 16  # step threads (--concurrency) from which two threads commit
RETRY_LOCKED = 0.05  # seconds before trying again an outcome whose run another transaction holds


class Committer:
    def __init__(self, *, threads: int = 1, guard: Callable[[str], AbstractContextManager[None]] | None = None) -> None:
        # Bounds each batch's wait on the database (connections.Watchdog.guard): a silent
        # socket is shut down and the next batch reconnects.
        self._guard = guard or (lambda what: nullcontext())
        # SimpleQueue: C, no condition variable (the step threads put an outcome each).
        self._queue: queue.SimpleQueue[tuple[store.Finished, Answer[bool]] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._loop, name=f"pgflow-commit-{index}", daemon=True) for index in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, item: store.Finished) -> bool:
        """Apply ``item`` (in some batch); True when it was applied, False when ignored."""
        return self.submit_later(item).result()

    def submit_later(self, item: store.Finished) -> Answer[bool]:
        """Queue ``item``; the answer is ``submit``'s, given once its batch committed."""
        answer: Answer[bool] = Answer()
        self._queue.put((item, answer))
        return answer

    def stop(self) -> None:
        for _ in self._threads:
            self._queue.put(None)  # each thread takes one and stops after its last batch
        deadline = time.monotonic() + 10
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        waiting: list[tuple[store.Finished, Answer[bool]]] = []  # outcomes whose run was locked elsewhere
        while True:
            if waiting:  # outcomes wait on another transaction's lock: look again soon
                try:
                    first = self._queue.get(timeout=RETRY_LOCKED)
                except queue.Empty:
                    first = waiting.pop()
            else:
                first = self._queue.get()
            if first is None:
                for _, answer in waiting:  # the lease and the sweep take these over
                    answer.set_exception(RuntimeError("the run stayed locked by another transaction until shutdown"))
                break
            batch = [*waiting, first]
            waiting = []
            stopping = False
            while len(batch) < MAX_BATCH:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch.append(more)
            waiting = self._apply(batch)
            if stopping:
                break
        connection.close()

    def _apply(
        self, batch: list[tuple[store.Finished, Answer[bool]]], *, again: bool = True
    ) -> list[tuple[store.Finished, Answer[bool]]]:
        """Apply ``batch``; returns the items whose run another transaction held (for later)."""
        try:
            connections.leave_if_stale()  # read-only or opened before a silence: reconnect
            with self._guard("commit"):
                results = store.finish_many([item for item, _ in batch])
        except BaseException as exc:
            if connections.away(exc):
                # Lost, shutting down or read-only (25006): not the outcomes' fault, so none is
                # paused for it. Reconnect for the next batch; these attempts keep their leases.
                connections.close()
                if again:
                    # Once more on a fresh connection: refused as read-only, nothing was written;
                    # lost on the way, the token check makes a second application impossible
                    # (one that had landed answers "ignored"), and the body need not run again.
                    return self._apply(batch, again=False)
                for _, answer in batch:
                    answer.set_exception(exc)
                return []
            if again and db.stopped(exc):
                # Cancelled, a lock or a statement timeout, a deadlock lost: nothing was
                # written, and it is not the outcomes' fault. Once more before any is paused.
                logger.warning(
                    "applying %d outcome%s was stopped (%s); trying once more",
                    len(batch),
                    "" if len(batch) == 1 else "s",
                    " ".join(str(exc).split()),
                    extra={"action": "commit_retry"},
                )
                return self._apply(batch, again=False)
            if len(batch) > 1:
                # One bad item (a value PostgreSQL refused) must not fail the others: alone,
                # each healthy one applies and only the bad one fails, with its own error.
                logger.warning(
                    "applying %d outcomes failed (%s: %s); applying them one by one",
                    len(batch),
                    type(exc).__name__,
                    exc,
                    extra={"action": "commit_retry_each"},
                )
                later = []
                for one in batch:
                    later.extend(self._apply([one]))
                return later
            self._refused(batch[0], exc)
            return []
        later = []
        for (item, answer), applied in zip(batch, results, strict=True):
            if applied is None:
                later.append((item, answer))
            else:
                answer.set_result(applied)
        return later

    def _refused(self, entry: tuple[store.Finished, Answer[bool]], exc: BaseException) -> None:
        """The database refused this outcome: record the refusal as the attempt's error and pause."""
        item, answer = entry
        logger.error(
            "applying the outcome of step %s failed: %s: %s",
            item.claim.step_id,
            type(exc).__name__,
            exc,
            extra={"action": "commit_failed", "run_id": item.claim.run_id},
        )
        error = error_capture.capture(exc, **pgflow_settings.capture_options())
        failed = store.Finished(claim=item.claim, outcome=Outcome(kind=PAUSE), error=error)
        try:
            (applied,) = store.finish_many([failed])
        except BaseException as again:  # noqa: BLE001 - left to the lease and the sweep
            answer.set_exception(again)
            return
        if applied is None:
            answer.set_exception(exc)  # its run was locked meanwhile: the lease and the sweep take over
        else:
            answer.set_result(False)  # the body's own outcome was not applied
