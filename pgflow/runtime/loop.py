"""The worker's event loop: one thread running asyncio, where ``async def`` step bodies await.

Sync bodies keep their threads (``--concurrency``); async bodies are tasks here, as many at
once as ``--async-concurrency`` allows, and hold no database connection while they await.
Their queries (Django's async ORM, ``sync_to_async``) run in asgiref's one shared thread,
so all of them together use a single connection.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class EventLoop:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="pgflow-async", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def submit(self, coroutine: Coroutine[Any, Any, T], done: Callable[[asyncio.Task[T]], object]) -> None:
        """Run ``coroutine`` as a task on the loop; ``done(task)`` is called on the loop's
        thread once it ended. (``run_coroutine_threadsafe`` also made a
        ``concurrent.futures.Future`` per task, with its condition variable: memory held by
        each awaiting body.)"""
        self._loop.call_soon_threadsafe(self._start, coroutine, done)

    def _start(self, coroutine: Coroutine[Any, Any, T], done: Callable[[asyncio.Task[T]], object]) -> None:
        self._loop.create_task(coroutine).add_done_callback(done)

    def stop(self) -> None:
        """Stop the loop; tasks still awaiting are abandoned (their attempts were handed back)."""
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def cancel(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` from any thread (a timeout is applied from the heartbeat's)."""
    task.get_loop().call_soon_threadsafe(task.cancel)
