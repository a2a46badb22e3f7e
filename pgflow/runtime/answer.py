"""A value one thread gives another once: the group commit's answer for one outcome.

The few calls of ``concurrent.futures.Future`` the worker uses (set, a done-callback, a
blocking ``result``), without what it builds for each future: a condition variable over a
reentrant lock, made per attempt and notified on every answer, a twentieth of a busy
worker's Python time. A waiter gets an event only when it has to wait.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

logger = logging.getLogger("pgflow")


class Answer(Generic[T]):
    __slots__ = ("_callbacks", "_done", "_error", "_lock", "_value", "_waiter")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Answer[T]], object]] = []
        self._waiter: threading.Event | None = None

    def set_result(self, value: T) -> None:
        self._settle(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._settle(None, error)

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> T:
        """The value, once given (raises the error given instead, or TimeoutError)."""
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # given by set_result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._error

    def add_done_callback(self, callback: Callable[[Answer[T]], object]) -> None:
        """Call ``callback(self)`` once answered: in the answering thread, or now if it was."""
        with self._lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        self._call(callback)

    def _settle(self, value: T | None, error: BaseException | None) -> None:
        with self._lock:
            if self._done:
                raise RuntimeError("an answer is given once")
            self._value, self._error, self._done = value, error, True
            callbacks, self._callbacks = self._callbacks, []
            waiter = self._waiter
        if waiter is not None:
            waiter.set()
        for callback in callbacks:
            self._call(callback)

    def _call(self, callback: Callable[[Answer[T]], object]) -> None:
        try:
            callback(self)
        except Exception:  # as concurrent.futures does: one callback failing stops no other
            logger.exception("a callback of an answer failed", extra={"action": "answer_callback_failed"})

    def _wait(self, timeout: float | None) -> None:
        if self._done:
            return
        with self._lock:
            if self._done:
                return
            if self._waiter is None:
                self._waiter = threading.Event()
            waiter = self._waiter
        if not waiter.wait(timeout):
            raise TimeoutError(f"no answer within {timeout} s")
