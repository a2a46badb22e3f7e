"""A step thread's database connection between bodies.

Django closes a connection that failed around each request (``close_old_connections``, from
the request signals). A worker's step threads run body after body on one connection and no
request ever ends, so they do it here: without it a connection that died with the database
(a restart, a failover) stayed in its thread, and every later body there that read
``self.outputs`` or queried failed with "the connection is closed", for the rest of the
worker's life. Age (``CONN_MAX_AGE``) is not looked at: a worker keeps its connections.
"""

from __future__ import annotations

import psycopg
from django.db import InterfaceError, OperationalError, connection

# What a query raises when its connection went away (Django's wrappers of psycopg's, and
# psycopg's own from a raw cursor).
CONNECTION_ERRORS = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)
DJANGO_CONNECTION_ERRORS = (OperationalError, InterfaceError)


def unusable() -> bool:
    """Whether this thread's connection is open but cannot be used any more. Free while no
    query failed on it; one ``SELECT 1`` after one did (as Django's own check)."""
    raw = connection.connection
    if raw is None:
        return False  # not connected: the next query connects
    if raw.closed or raw.broken:
        return True
    if not connection.errors_occurred:
        return False
    if connection.is_usable():
        connection.errors_occurred = False  # an error of the query, not of the connection
        return False
    return True


def close_if_unusable() -> bool:
    """Close this thread's connection if it failed and cannot be used (the next query opens a
    fresh one); True when it did."""
    if connection.in_atomic_block or not unusable():
        return False
    close()
    return True


def close() -> None:
    try:
        connection.close()
    except Exception:  # noqa: BLE001,S110 - a dead connection may fail to close; it is gone either way
        pass


def lost_with_connection(error: BaseException) -> bool:
    """Whether a body failed only because the database went away under it: its error (raised,
    or the cause or context of what it raised) is one of the connection's, not of a query.

    Decided from the error, not from the connection as it is now: async bodies share one
    connection, and the first of them to fail closes it and opens another, on which the
    others, failed with "the connection is closed" meanwhile, would look fine."""
    return any(_of_connection(link) for link in _chain(error))


def _of_connection(error: BaseException) -> bool:
    if isinstance(error, DJANGO_CONNECTION_ERRORS) and isinstance(error.__cause__, psycopg.Error):
        return _of_connection(error.__cause__)
    if isinstance(error, psycopg.InterfaceError | InterfaceError):
        return True  # used after it closed
    if not isinstance(error, psycopg.OperationalError):
        return False
    state = error.sqlstate
    # No SQLSTATE: libpq's own failure (the server closed the connection, it is closed, a
    # connection attempt failed). 08: a connection exception. 57P01-57P03: the server is
    # shutting down, crashed or not accepting connections yet. A query's own operational
    # errors (a statement timeout, a lock not available, a serialization failure) have
    # SQLSTATEs of their own and stay the body's failures.
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and link not in seen and len(seen) < 20:
        seen.append(link)
        link = link.__cause__ or link.__context__
    return seen
