"""Group commit: the outcomes of attempts that end at about the same time are applied in
one transaction.

Step threads hand their outcome to ``submit`` and wait for it to be applied; one thread
takes whatever has queued up (never waiting for more: a lone outcome is applied at once)
and applies it with ``store.finish_many``. Under load that turns a transaction per step
into a transaction per batch, and a lock, a token check and a write per row into a few
set-based statements.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future

import psycopg
from django.db import DatabaseError, InterfaceError, connection

from .. import store

logger = logging.getLogger("pgflow")

MAX_BATCH = 64  # outcomes per transaction; bounds lock time and statement size


class Committer:
    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[store.Finished, Future[bool]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="pgflow-commit", daemon=True)
        self._thread.start()

    def submit(self, item: store.Finished) -> bool:
        """Apply ``item`` (in some batch); True when it was applied, False when ignored."""
        return self.submit_later(item).result()

    def submit_later(self, item: store.Finished) -> Future[bool]:
        """Queue ``item``; the future answers as ``submit`` does, once its batch committed."""
        future: Future[bool] = Future()
        self._queue.put((item, future))
        return future

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(10)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
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
            self._apply(batch)
            if stopping:
                break
        connection.close()

    def _apply(self, batch: list[tuple[store.Finished, Future[bool]]]) -> None:
        try:
            results = store.finish_many([item for item, _ in batch])
        except (DatabaseError, InterfaceError, psycopg.Error) as exc:
            connection.close()  # reconnect for the next batch
            for _, future in batch:
                future.set_exception(exc)
            return
        except BaseException as exc:
            logger.exception("applying %d outcomes failed", len(batch), extra={"action": "commit_failed"})
            for _, future in batch:
                future.set_exception(exc)
            return
        for (_, future), applied in zip(batch, results, strict=True):
            future.set_result(applied)
