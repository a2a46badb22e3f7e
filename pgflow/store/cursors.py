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

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.db.backends.utils import CursorWrapper

from ..conf import pgflow_settings
from ..db import connection, wrapper

logger = logging.getLogger("pgflow")

_TIMESTAMPTZ = psycopg.adapters.types["timestamptz"].oid
_C_LOADER = psycopg.adapters.get_loader(_TIMESTAMPTZ, psycopg.pq.Format.TEXT)


# psycopg parses a statement's %s placeholders once and caches the result only for a text of
# at most this many bytes (psycopg._queries.MAX_CACHED_STATEMENT_LENGTH); a longer one is
# parsed again by regular expression on every run, which the claim as written paid on every
# claim of the worker's loop (benchmarks/RESULTS.md, issue 35 part I).
CACHED_LENGTH = 4096
_SPACE_AROUND = re.compile(r" ?([(),=]) ?")


def compact(sql: str) -> str:
    """``sql`` with its layout taken out (whitespace runs made one space, none around
    parentheses, commas and ``=``), so that a hot statement fits psycopg's cache of parsed
    queries (``CACHED_LENGTH``). Only for pgflow's own statements, whose string literals hold
    none of those characters next to a space."""
    return _SPACE_AROUND.sub(r"\1", " ".join(sql.split()))


def bigint_array(values: Iterable[int]) -> str:
    """``values`` as an array literal for a ``::bigint[]`` parameter. psycopg dumps a list in
    Python, element by element, after scanning it for the element type, and a string at once
    (benchmarks/RESULTS.md, issue 35 part M)."""
    return "{" + ",".join(map(str, values)) + "}"


def text_array(values: Iterable[str]) -> str:
    """``values`` as an array literal for a ``::text[]`` parameter (as ``bigint_array``): each
    element quoted, so that none reads as NULL or splits at a comma or a brace."""
    return "{" + ",".join('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' for value in values) + "}"


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
    on = wrapper()  # looked up once: each read through ``connection`` looks it up again
    on.ensure_connection()
    cursor = _kept("hot", _hot, on)
    with on.wrap_database_errors:
        yield cursor


class _NeverPrepared(psycopg.Cursor[Any]):
    """A hot cursor that prepares nothing, whatever its statements ask: with
    ``PGFLOW["NOTIFY"]`` False the worker keeps no session state, and a transaction-mode
    pooler (PgBouncer before 1.21) runs a statement prepared on one server connection on
    another, which does not have it (26000)."""

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None
    ) -> Any:
        return super().execute(query, params, prepare=False, binary=binary)


def _hot(raw: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
    if raw.prepare_threshold is None:
        raw.prepare_threshold = PREPARE_ONLY_WHEN_ASKED
    cursor = psycopg.Cursor(raw) if pgflow_settings.NOTIFY else _NeverPrepared(raw)
    if settings.USE_TZ and _C_LOADER is not None:
        cursor.adapters.register_loader(_TIMESTAMPTZ, _C_LOADER)
    return cursor


def _kept(
    slot: str, make: Callable[[psycopg.Connection[Any]], psycopg.Cursor[Any]], on: Any = connection
) -> psycopg.Cursor[Any]:
    """This thread's cursor in ``slot`` on Django's connection (``on``: its wrapper, looked up
    already), made again for a new connection."""
    raw = on.connection
    assert raw is not None
    kept = getattr(_local, slot, None)
    if kept is None or kept[0] is not raw:
        kept = (raw, make(raw))
        setattr(_local, slot, kept)
    return kept[1]


# A start's prepared statement that its server connection does not have (26000), or has
# under that name already (42P05): a transaction-mode pooler that keeps no prepared
# statements moved the session between two starts. Both fail before the statement runs.
POOLER_LOST_IT = frozenset({"26000", "42P05"})


class _Preparing(psycopg.Cursor[Any]):
    """A server-binding cursor whose statements are prepared on their second run (psycopg's
    protocol-level prepared statements) unless ``PGFLOW["PREPARE_START"]`` is False or a
    pooler lost one: Django's cursor wrapper calls ``execute(sql, params)``, with no way to
    ask. Django turns psycopg's preparing off by default, for transaction-mode poolers, where
    a statement prepared on one server connection is missing on the next (PgBouncer 1.21 and
    later with ``max_prepared_statements`` keep them); parsing and planning the start's three
    INSERTs on every start was the largest part of its server time. Sent unprepared, the
    parameters still go apart."""

    # Prepared from its second run on a connection: preparing costs a round trip of its own,
    # which a connection that runs one start (Django's default CONN_MAX_AGE = 0 closes it after
    # each request) would pay for nothing.
    _runs = 0

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None
    ) -> Any:
        if prepare is None:
            self._runs += 1
            prepare = self._runs > 1 and _prepares(self.connection)
        return super().execute(query, params, prepare=prepare, binary=binary)


class _Lost:
    """Set once a pooler lost a prepared start: this process prepares no more starts."""

    lost = False


def _prepares(raw: psycopg.Connection[Any]) -> bool:
    if _Lost.lost or not pgflow_settings.NOTIFY:
        return False  # a pooler lost one; or no session state is kept (see _NeverPrepared)
    threshold = raw.prepare_threshold
    if threshold is not None and threshold != PREPARE_ONLY_WHEN_ASKED:
        return True  # the project's OPTIONS prepare statements: so is the start
    if not pgflow_settings.PREPARE_START:
        return False
    if threshold is None:
        raw.prepare_threshold = PREPARE_ONLY_WHEN_ASKED  # psycopg prepares nothing else
    return True


def lost_by_pooler(exc: BaseException) -> bool:
    """``exc`` (Django's error) says a pooler lost a prepared statement; if so, no start of
    this process is prepared again, and a warning says which setting makes that the rule."""
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) not in POOLER_LOST_IT:
        return False
    if not _Lost.lost:
        _Lost.lost = True
        logger.warning(
            "the server connection did not keep the start's prepared statement (%s): a transaction-mode "
            "pooler that keeps none (PgBouncer before 1.21, or max_prepared_statements = 0)? This process "
            "prepares no more starts; set PGFLOW['PREPARE_START'] = False to say so up front",
            " ".join(str(cause).split()),
            extra={"action": "start_unprepared"},
        )
    return True


def control_cursor() -> psycopg.Cursor[Any]:
    """This thread's plain psycopg cursor on Django's (connected) connection, for the few
    statements around a hot one (the flush after a start): made once per connection."""
    return _kept("control", psycopg.Cursor)


def preparing_cursor() -> CursorWrapper:
    """Django's cursor wrapper, with its execute wrappers, its query log under ``DEBUG``, its
    broken-transaction check and its errors, over this thread's preparing cursor on Django's
    connection: for a hot statement run in the caller's process (the plain start), where
    those must see it as any query."""
    on = wrapper()
    on.close_if_health_check_failed()
    on.ensure_connection()
    return on._prepare_cursor(_kept("preparing", _Preparing, on))  # what Django wraps its own with
