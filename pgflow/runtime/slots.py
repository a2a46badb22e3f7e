"""The worker's step threads: one per ``--concurrency`` slot, fed claimed attempts through
one queue, each reporting its result straight to the worker.

A ``ThreadPoolExecutor`` made a ``Future`` (with its own lock and condition) and a work item
for every attempt, and a done-callback to read them back: a tenth of the worker's Python
time when steps are short. The worker never hands over more attempts than it has free
slots, so nothing here queues for long.

The threads take attempts from a :class:`Feed`, not a ``queue.SimpleQueue``. From Python 3.13
a ``SimpleQueue`` hands each item straight to a thread parked in ``get()``: with dozens of
step threads parked, every attempt woke one and passed the GIL to it, even when a thread
that had just finished its body would have taken the attempt without sleeping.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

logger = logging.getLogger("pgflow")


class Feed(Generic[Item]):
    """Items for a set of threads, first in first out. A thread that asks while items wait
    takes one at once; a thread that finds none parks. Only one parked thread is being woken
    at a time, and it wakes the next when items are left after its own: a burst of items
    starts the parked threads one after another, and the threads still running take what
    they can first."""

    def __init__(self) -> None:
        self._items: collections.deque[Item] = collections.deque()
        self._parked: list[threading.Lock] = []  # each held: its thread waits to acquire it
        self._mutex = threading.Lock()
        self._waking = False  # a parked thread was woken and has not asked again yet
        self._local = threading.local()  # each thread's parking lock, made on its first park

    def put(self, item: Item) -> None:
        with self._mutex:
            self._items.append(item)
            woken = self._wake_one()
        if woken is not None:
            woken.release()

    def get(self) -> Item:
        """The next item, parking the calling thread until one comes."""
        woke = False
        parking: threading.Lock | None = None
        while True:
            with self._mutex:
                if woke:
                    self._waking = False
                if self._items:
                    item = self._items.popleft()
                    woken = self._wake_one() if self._items else None
                    break
                if parking is None:
                    parking = self._parking()
                self._parked.append(parking)
            parking.acquire()  # released by the put or get that woke this thread
            woke = True
        if woken is not None:
            woken.release()
        return item

    def _parking(self) -> threading.Lock:
        """The calling thread's own lock, held: the thread parks by acquiring it again. The
        feed makes it, so no thread can park on a lock it does not hold, which would put it
        in the parked list twice."""
        try:
            return self._local.lock
        except AttributeError:
            lock = self._local.lock = threading.Lock()
            lock.acquire()
            return lock

    def _wake_one(self) -> threading.Lock | None:
        """The parked thread's lock to release (under the mutex), None when one is being
        woken already or none is parked. The most recently parked goes first: its memory is
        likely still in the cache."""
        if self._waking or not self._parked:
            return None
        self._waking = True
        return self._parked.pop()


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
        self._feed: Feed[Item | None] = Feed()
        self._run = run
        self._done = done
        self._stopped = stopped
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}_{index}", daemon=True) for index in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, item: Item) -> None:
        self._feed.put(item)

    def shutdown(self, *, wait: bool) -> None:
        """Stop each thread after what it runs now; wait for them unless told not to (a body
        still running cannot be stopped)."""
        for _ in self._threads:
            self._feed.put(None)
        if wait:
            for thread in self._threads:
                thread.join()

    def _serve(self) -> None:
        while (item := self._feed.get()) is not None:
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
