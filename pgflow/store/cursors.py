"""Cursors for the hot statements (the claim, the group commit, the plain start), on the
same connection and transaction as Django's but without its client-side binding.

Django's psycopg cursors quote every parameter into the SQL text in Python (a batch's arrays
element by element) and parse every timestamptz with a Python loader (a claimed row has
nine). These cursors send the parameters apart (server-side binding, which also lets a
statement be prepared once and run on its plan) and read timestamptz with psycopg's own,
much faster, C loader, which gives the same aware datetimes when Django runs with
``USE_TZ`` (its loader only swaps the tzinfo of the same instant).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from django.db.backends.utils import CursorWrapper

_TIMESTAMPTZ = psycopg.adapters.types["timestamptz"].oid
_C_LOADER = psycopg.adapters.get_loader(_TIMESTAMPTZ, psycopg.pq.Format.TEXT)


# psycopg prepares a statement after this many runs, or when asked (``prepare=True``): Django
# turns preparing off, and only the hot statements ask.
PREPARE_ONLY_WHEN_ASKED = 2**31


# Each thread's hot cursor, with the connection it belongs to: made once per connection
# (a cursor made per statement, with its loader, would be paid on every claim).
_local = threading.local()


@contextmanager
def hot_cursor() -> Iterator[psycopg.Cursor[Any]]:
    """This thread's psycopg cursor on Django's connection (connected if need be); its errors
    are Django's, as those of Django's own cursors. Not to be nested: it is one cursor."""
    connection.ensure_connection()
    cursor = _kept("hot", _hot)
    with connection.wrap_database_errors:
        yield cursor


def _hot(raw: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
    if raw.prepare_threshold is None:
        raw.prepare_threshold = PREPARE_ONLY_WHEN_ASKED
    cursor = psycopg.Cursor(raw)
    if settings.USE_TZ and _C_LOADER is not None:
        cursor.adapters.register_loader(_TIMESTAMPTZ, _C_LOADER)
    return cursor


def _kept(slot: str, make: Callable[[psycopg.Connection[Any]], psycopg.Cursor[Any]]) -> psycopg.Cursor[Any]:
    """This thread's cursor in ``slot`` on Django's connection, made again for a new connection."""
    raw = connection.connection
    assert raw is not None
    kept = getattr(_local, slot, None)
    if kept is None or kept[0] is not raw:
        kept = (raw, make(raw))
        setattr(_local, slot, kept)
    return kept[1]


class _Preparing(psycopg.Cursor[Any]):
    """A server-binding cursor whose statements are prepared on their first run if its
    connection prepares statements at all (a ``prepare_threshold`` set): Django's cursor
    wrapper calls ``execute(sql, params)``, with no way to ask. Django turns preparing off by
    default, for transaction-mode poolers, where a statement prepared on one server
    connection is missing on the next; sent unprepared, the parameters still go apart."""

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None
    ) -> Any:
        if prepare is None:
            prepare = self.connection.prepare_threshold is not None
        return super().execute(query, params, prepare=prepare, binary=binary)


def preparing_cursor() -> CursorWrapper:
    """Django's cursor wrapper, with its execute wrappers, its query log under ``DEBUG``, its
    broken-transaction check and its errors, over this thread's preparing cursor on Django's
    connection: for a hot statement run in the caller's process (the plain start), where
    those must see it as any query."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    return connection._prepare_cursor(_kept("preparing", _Preparing))  # type: ignore[attr-defined]  # what Django wraps its own with
