"""The worker's step threads: one per ``--concurrency`` slot, fed claimed attempts through
one queue, each reporting its result straight to the worker.

A ``ThreadPoolExecutor`` made a ``Future`` (with its own lock and condition) and a work item
for every attempt, and a done-callback to read them back: a tenth of the worker's Python
time when steps are short. The worker never hands over more attempts than it has free
slots, so nothing here queues for long.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

logger = logging.getLogger("pgflow")


class Slots(Generic[Item, Result]):
    def __init__(
        self,
        size: int,
        run: Callable[[Item], Result],
        done: Callable[[Item, Result | None, BaseException | None], None],
        *,
        name: str = "pgflow-step",
        stopped: Callable[[], None] = lambda: None,
    ) -> None:
        """``stopped`` runs in each thread as it stops (the worker closes the thread's connection)."""
        self._queue: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self._run = run
        self._done = done
        self._stopped = stopped
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}_{index}", daemon=True) for index in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, item: Item) -> None:
        self._queue.put(item)

    def shutdown(self, *, wait: bool) -> None:
        """Stop each thread after what it runs now; wait for them unless told not to (a body
        still running cannot be stopped)."""
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()

    def _serve(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                result = self._run(item)
            except BaseException as exc:  # noqa: BLE001 - reported to the worker, which logs it
                self._report(item, None, exc)
            else:
                self._report(item, result, None)
        self._stopped()

    def _report(self, item: Item, result: Result | None, exc: BaseException | None) -> None:
        # A report that fails must not end the thread: the worker would be a slot short for
        # good, with nothing in its log to say so.
        try:
            self._done(item, result, exc)
        except Exception:
            logger.exception("reporting a finished step failed", extra={"action": "slot_report_failed"})
