"""The worker's database connections: which errors mean "the database is away", a step
thread's connection between bodies, the socket defaults, and a bound on a silent socket.

A step thread's database connection between bodies:

Django closes a connection that failed around each request (``close_old_connections``, from
the request signals). A worker's step threads run body after body on one connection and no
request ever ends, so they do it here: without it a connection that died with the database
(a restart, a failover) stayed in its thread, and every later body there that read
``self.outputs`` or queried failed with "the connection is closed", for the rest of the
worker's life. Age (``CONN_MAX_AGE``) is not looked at: a worker keeps its connections.

"Away" (:func:`away`) is one classifier for every connection of the worker (the claim loop,
the committer, the heartbeat, the sweep, the schedules, the step threads): a lost
connection, a server shutting down or starting (57P01-57P03), and a node that is read-only
(25006: a demoted primary, a standby a name still points at). Each closes its connection on
it and reconnects; a multi-host URL with ``target_session_attrs=read-write`` then finds the
writable node. A connection to another node than the one the claim loop last found writable
is closed before the next body, so no body reads a node that stopped taking writes.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import InterfaceError, OperationalError, connections
from django.db.backends.signals import connection_created

from .. import db
from ..conf import pgflow_settings
from ..db import connection

logger = logging.getLogger("pgflow")

# What a query raises when its connection went away (Django's wrappers of psycopg's, and
# psycopg's own from a raw cursor).
CONNECTION_ERRORS = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)
DJANGO_CONNECTION_ERRORS = (OperationalError, InterfaceError)


def unusable(wrapper: Any) -> bool:
    """Whether the connection of ``wrapper`` (this thread's, looked up once by the caller) is
    open but cannot be used any more. Free while no query failed on it; one ``SELECT 1``
    after one did (as Django's own check)."""
    raw = wrapper.connection
    if raw is None:
        return False  # not connected: the next query connects
    if raw.closed or raw.broken:
        return True
    if read_only(raw) or not on_writable_node(raw):
        return True  # a query would read a node that takes no writes (any more)
    if condemned(raw):
        return True  # opened before a silence the watchdog found: its socket may be as silent
    if not wrapper.errors_occurred:
        return False
    if wrapper.is_usable():
        wrapper.errors_occurred = False  # an error of the query, not of the connection
        return False
    return True


def close_if_unusable() -> bool:
    """Close this thread's connection if it failed and cannot be used (the next query opens a
    fresh one); True when it did. Before every body: the wrapper is looked up once (each read
    through ``db.connection`` looks it up again)."""
    wrapper = db.wrapper()
    if wrapper.in_atomic_block or not unusable(wrapper):
        return False
    close()
    return True


def close() -> None:
    try:
        connection.close()
    except Exception:  # noqa: BLE001,S110 - a dead connection may fail to close; it is gone either way
        pass


def away(error: BaseException) -> bool:
    """Whether ``error`` means the database is away, not that a query was wrong: its error
    (raised, or the cause or context of what it raised) is one of the connection's, or the
    node refused a write for being read-only, or it is shutting down or starting.

    Decided from the error, not from the connection as it is now: async bodies share one
    connection, and the first of them to fail closes it and opens another, on which the
    others, failed with "the connection is closed" meanwhile, would look fine."""
    return any(_of_connection(link) for link in db.error_chain(error))


lost_with_connection = away  # a body that failed this way is re-attempted, never failed


def refused_as_read_only(error: BaseException) -> bool:
    """The node refused the statement for being read-only (25006): nothing of it was written."""
    return any(isinstance(link, psycopg.errors.ReadOnlySqlTransaction) for link in db.error_chain(error))


def read_only(raw: Any = None) -> bool:
    """Whether the server of ``raw`` (this thread's connection by default) said it takes no
    writes: in recovery (a standby) or ``default_transaction_read_only`` on (a demoted
    primary). Free: PostgreSQL 14+ reports both with every change, libpq keeps them."""
    raw = db.wrapper().connection if raw is None else raw
    if raw is None or raw.closed:
        return False
    # libpq's own reads: ConnectionInfo.parameter_status looks the client encoding up for each.
    status = raw.pgconn.parameter_status
    return status(b"in_hot_standby") == b"on" or status(b"default_transaction_read_only") == b"on"


# (address, port) of the node the claim loop last claimed on: the writable one.
_writable: tuple[str, int] | None = None
# How many times every connection had to be checked again (the writable node moved, or
# condemn_open): a thread that saw a lower count checks its connection before its next use.
_checks = 0


def checks() -> int:
    return _checks


_nodes: weakref.WeakKeyDictionary[Any, tuple[str, int] | None] = weakref.WeakKeyDictionary()


def _node(raw: Any) -> tuple[str, int] | None:
    """The (address, port) ``raw`` is connected to: read from libpq once per connection (a
    connection never changes node), since the claim loop and every body ask."""
    try:
        return _nodes[raw]
    except KeyError:
        node = _nodes[raw] = _read_node(raw)
        return node


def _read_node(raw: Any) -> tuple[str, int] | None:
    try:
        info = raw.info
        return (info.hostaddr or info.host, info.port)
    except (psycopg.Error, AttributeError, ValueError):
        return None


def found_writable() -> None:
    """The claim loop wrote on this thread's connection: its node is the writable one."""
    global _writable  # noqa: PLW0603 - one value for the process, read by every step thread
    raw = db.wrapper().connection
    if raw is not None and not raw.closed and not read_only(raw):
        node = _node(raw)
        if node != _writable:
            global _checks  # noqa: PLW0603 - as _writable
            _checks += 1
        _writable = node


def on_writable_node(raw: Any) -> bool:
    """False when ``raw`` is connected to another node than the claim loop's last writable one."""
    writable = _writable
    return writable is None or _node(raw) in (None, writable)


def _of_connection(error: BaseException) -> bool:
    if isinstance(error, DJANGO_CONNECTION_ERRORS) and isinstance(error.__cause__, psycopg.Error):
        return _of_connection(error.__cause__)
    if isinstance(error, psycopg.InterfaceError | InterfaceError):
        return True  # used after it closed
    if isinstance(error, psycopg.errors.ReadOnlySqlTransaction):
        return True  # an InternalError, not an OperationalError
    if not isinstance(error, psycopg.OperationalError):
        return False
    state = error.sqlstate
    # No SQLSTATE: libpq's own failure (the server closed the connection, it is closed, a
    # connection attempt failed). 08: a connection exception. 57P01-57P03: the server is
    # shutting down, crashed or not accepting connections yet. A query's own operational
    # errors (a statement timeout, a lock not available, a serialization failure) have
    # SQLSTATEs of their own and stay the body's failures.
    # 25006: the node is read-only (a demoted primary, a standby); another node takes writes.
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03", "25006")


# --- a silent socket ---------------------------------------------------------------------

SOCKET_OPTIONS = ("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout")


def socket_defaults(lease: float) -> dict[str, int]:
    """libpq's TCP settings for a worker's connections, from the lease: a host that vanished
    (no FIN, no RST) is noticed within about a quarter of it, not the kernel's ~15 minutes of
    retransmissions, so a worker reconnects well before its attempts' leases run out."""
    quarter = max(2.0, lease / 4)
    return {
        "keepalives": 1,
        "keepalives_idle": max(1, int(quarter / 2)),  # idle seconds before the first probe
        "keepalives_interval": max(1, int(quarter / 6)),
        "keepalives_count": 3,
        "tcp_user_timeout": int(quarter * 1000),  # ms unacknowledged data may wait
        "connect_timeout": max(2, int(quarter)),  # libpq's default waits for ever
    }


def apply_socket_defaults(options: dict[str, Any], lease: float) -> dict[str, int]:
    """Set in ``options`` (a database's OPTIONS) each default the user did not set; returns
    what it set. A value the user set, in OPTIONS or the URL, is theirs."""
    added = {name: value for name, value in socket_defaults(lease).items() if name not in options}
    options.update(added)
    return added


def without_session_state(options: dict[str, Any]) -> bool:
    """With ``PGFLOW["NOTIFY"]`` False (a worker behind a transaction-mode pooler), psycopg
    prepares none of the worker's statements, whatever ``prepare_threshold`` OPTIONS set: a
    statement prepared on one server connection is missing on the next (PgBouncer before 1.21
    keeps none). True when it turned a threshold off."""
    if options.get("prepare_threshold") is None:
        return False
    options["prepare_threshold"] = None
    logger.warning(
        "PGFLOW['NOTIFY'] is False: the worker prepares no statement (OPTIONS' prepare_threshold ignored)",
        extra={"action": "worker_unprepared"},
    )
    return True


def silence_limit(options: dict[str, Any], lease: float) -> float:
    """Seconds a worker's own query (a claim, a commit, a heartbeat) may go unanswered
    before its socket is taken for dead: ``tcp_user_timeout`` as set (or defaulted)."""
    value = options.get("tcp_user_timeout") or socket_defaults(lease)["tcp_user_timeout"]
    return max(1.0, int(value) / 1000)


# When each of the process's connections was opened (connection_created, from the watchdog
# on) and the moment of the last silence found: a connection opened before it is condemned.
_opened: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
_silent_at = 0.0


def _note_opened(sender: Any, connection: Any, **kwargs: Any) -> None:
    if connection.connection is not None:
        _opened[connection.connection] = time.monotonic()


def condemned(raw: Any) -> bool:
    """Whether ``raw`` was opened before the last silence the watchdog found (the path to the
    server that went silent on one connection is likely silent on all of them then)."""
    return _silent_at > 0 and _opened.get(raw, 0.0) < _silent_at


def condemn_open() -> None:
    """Every connection the process holds now reconnects before its next use: the database
    went away (a restart kills each session, and a socket shows it only when a query on it
    fails), or the path to it went silent."""
    global _silent_at, _checks  # noqa: PLW0603 - one moment for the process's connections
    _silent_at = time.monotonic()
    _checks += 1


def leave_if_stale() -> None:
    """Close this thread's connection before its next use when it is on a read-only node or
    was opened before a silence: the next query reconnects (and finds the writable node)."""
    wrapper = db.wrapper()
    raw = wrapper.connection
    if raw is not None and not wrapper.in_atomic_block and (read_only(raw) or condemned(raw)):
        close()


class Watchdog:
    """Bounds how long a worker's thread waits on a query. A peer that stops forwarding but
    keeps the socket open (a proxy, a load balancer) answers TCP's keepalives and acks for
    the server, so neither the kernel nor libpq ever notices: a query past ``limit`` has its
    socket shut down from here, which ends the wait with a connection error, and the thread
    reconnects (the claim loop LISTENs again).

    The claim loop, the committer, the heartbeat and the sweep guard their own passes
    (:meth:`guard`); every other query of the process through Django (the schedules', marked
    by :meth:`each_query`, a body's ORM queries, the runner's) is guarded one by one, by
    ``query_limit`` unless marked otherwise: a body's query may legitimately run long, so its
    bound is the lease (a query that answers nothing for longer is taken for a dead socket,
    and its attempt re-run as one that lost its connection, never failed)."""

    def __init__(self, limit: float, query_limit: float | None = None) -> None:
        global _current  # noqa: PLW0603 - the one watchdog of the worker's process
        self.limit = limit
        self.query_limit = query_limit or max(limit, pgflow_settings.seconds("LEASE"))
        self._open: dict[int, tuple[float, float, str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._marks = threading.local()
        connection_created.connect(_note_opened, dispatch_uid="pgflow-watchdog")
        connection_created.connect(_wrap_queries, dispatch_uid="pgflow-watchdog-queries")
        _current = self
        self._thread = threading.Thread(target=self._watch, name="pgflow-watchdog", daemon=True)
        self._thread.start()

    @contextmanager
    def each_query(self, what: str, limit: float | None = None) -> Iterator[None]:
        """Each query this thread runs in the block is bounded by ``limit`` (the watchdog's
        own by default) and named ``what`` in the log: for a thread of pgflow's own short
        queries that does not guard its passes (the schedules)."""
        saved = getattr(self._marks, "each", None)
        self._marks.each = (what, limit or self.limit)
        try:
            yield
        finally:
            self._marks.each = saved

    def _query(self, execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
        if threading.get_ident() in self._open or self._stop.is_set():
            return execute(sql, params, many, context)  # its thread guards the whole pass
        what, limit = getattr(self._marks, "each", None) or ("body's query", self.query_limit)
        with self.guard(what, limit, context["connection"]):
            return execute(sql, params, many, context)

    @contextmanager
    def guard(self, what: str, limit: float | None = None, wrapper: Any = None) -> Iterator[None]:
        """The queries in this block, on this thread's connection to pgflow's database (or on
        ``wrapper``, a body's query's), are bounded (by ``limit`` seconds, the watchdog's own
        by default)."""
        key = threading.get_ident()
        with self._lock:
            # The thread's own wrapper: ``connection`` is a proxy the watchdog's thread would
            # resolve to its own.
            self._open[key] = (time.monotonic(), limit or self.limit, what, wrapper or connections[db.alias()])
        try:
            yield
        finally:
            with self._lock:
                self._open.pop(key, None)

    def stop(self) -> None:
        global _current  # noqa: PLW0603 - as in __init__
        self._stop.set()
        if _current is self:
            _current = None

    def _watch(self) -> None:
        while not self._stop.wait(min(0.5, self.limit / 4)):
            now = time.monotonic()
            with self._lock:
                late = [(key, *entry) for key, entry in self._open.items() if now - entry[0] > entry[1]]
            for key, since, _, what, wrapper in late:
                condemn_open()  # the others opened before it reconnect at their next use
                if _shut_down(wrapper.connection):
                    logger.error(
                        "the database did not answer the %s for %.1fs: closing its connection to reconnect",
                        what,
                        now - since,
                        extra={"action": "database_silent"},
                    )
                with self._lock:
                    if self._open.get(key, (None,))[0] == since:
                        self._open.pop(key)  # once per wait


_current: Watchdog | None = None


def _guarded_query(execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
    """Django's execute wrapper on each of the worker's connections: the watchdog's bound."""
    watchdog = _current
    if watchdog is None:
        return execute(sql, params, many, context)
    return watchdog._query(execute, sql, params, many, context)


def _wrap_queries(sender: Any, connection: Any, **kwargs: Any) -> None:
    # Each thread's wrapper keeps its execute wrappers across reconnects: added once.
    if _guarded_query not in connection.execute_wrappers:
        connection.execute_wrappers.append(_guarded_query)


def _shut_down(raw: Any) -> bool:
    """Shut the socket of ``raw`` down (not close: its file descriptor stays libpq's)."""
    if raw is None or raw.closed:
        return False
    try:
        fd = raw.pgconn.socket
        dup = socket.socket(fileno=os.dup(fd))
    except (OSError, psycopg.Error, ValueError):
        return False
    try:
        dup.shutdown(socket.SHUT_RDWR)
    except OSError:
        return False
    finally:
        dup.close()
    return True
