"""Where the dashboard's aggregate reads go: ``PGFLOW["READ_DATABASE"]``, else the primary.

Only reads that may be a little old go to a replica: the run list, the insights (and the
rollup reads under them) and the ``/metrics`` gauges. A replica can show states the
primary never had (a "long fork"), so the run page, every control, every MCP action and
everything a worker reads stay on the primary: they never enter :func:`reading`.

It is a function the callers enter, not a Django database router: a project keeps its own
routers, and a router cannot tell the run list from the run page (both read the same model).

``with reading() as route:`` checks the replica with one query (its replay position and
time; the primary's write position), sets :func:`alias` for the block and yields the route,
whose ``note`` the dashboard shows. A replica that cannot be reached (refused, or no answer
within ``CONNECT_TIMEOUT``) is left alone for ``RETRY_SECONDS`` and the primary serves the
reads, with a note saying so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import DatabaseError, InterfaceError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from . import db
from .conf import pgflow_settings
from .core import replicas

CONNECT_TIMEOUT = 2  # seconds: a dead replica's host costs a page at most this, not the OS's minutes
RETRY_SECONDS = 10.0  # a replica found down is not tried again for this long

_alias: ContextVar[str | None] = ContextVar("pgflow_read_alias", default=None)  # None: pgflow's database
_down: dict[str, tuple[float, str, str]] = {}  # alias: (monotonic time, error, UTC time) it was found down
_lock = threading.Lock()

_STANDBY_SQL = """
SELECT pg_is_in_recovery(), pg_last_xact_replay_timestamp(), now(), pg_last_wal_replay_lsn()::text,
       CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END
"""


@dataclass(frozen=True)
class Route:
    """Where this block's reads go and what to tell the operator."""

    alias: str  # the Django alias the reads use
    replica: str | None  # PGFLOW["READ_DATABASE"]; None: no replica is configured
    note: str | None  # None when no replica is configured
    lag_seconds: float | None = None
    fell_back: bool = False


def configured() -> str | None:
    return pgflow_settings.READ_DATABASE


def alias() -> str:
    """The alias aggregate reads use here: the replica inside :func:`reading`, else the primary
    (``PGFLOW["DATABASE"]``)."""
    return _alias.get() or db.alias()


def connection() -> BaseDatabaseWrapper:
    return connections[alias()]


@contextmanager
def reading() -> Iterator[Route]:
    """Send this block's aggregate reads to the replica (or the primary when it is down)."""
    found = route()
    token = _alias.set(found.alias)
    try:
        yield found
    finally:
        _alias.reset(token)


def route() -> Route:
    replica = configured()
    if replica is None or replica == db.alias():
        return Route(db.alias(), None, None)
    with _lock:
        down = _down.get(replica)
        if down is not None and time.monotonic() - down[0] >= RETRY_SECONDS:
            del _down[replica]
            down = None
    if down is not None:
        return _fallback(replica, down)
    try:
        state = _standby(replica)
    except (DatabaseError, InterfaceError) as exc:
        connections[replica].close()  # a broken connection is opened afresh on the next try
        found = (time.monotonic(), _first_line(exc), datetime.now(UTC).strftime("%H:%M:%S UTC"))
        with _lock:
            _down[replica] = found
        return _fallback(replica, found)
    figure = replicas.lag(replica, state)
    return Route(replica, replica, figure.note, figure.seconds)


def _fallback(replica: str, down: tuple[float, str, str]) -> Route:
    return Route(db.alias(), replica, replicas.fallback_note(replica, down[1], down[2], RETRY_SECONDS), None, True)


def _standby(replica: str) -> replicas.Standby:
    wrapper = connections[replica]
    options = wrapper.settings_dict.setdefault("OPTIONS", {})
    options.setdefault("connect_timeout", CONNECT_TIMEOUT)
    with wrapper.cursor() as cursor:
        cursor.execute(_STANDBY_SQL)
        in_recovery, replayed_at, now, replay_lsn, paused = cursor.fetchone()
    primary_lsn = None
    if in_recovery:
        with db.connection.cursor() as cursor:
            cursor.execute("SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn()::text END")
            primary_lsn = replicas.lsn(cursor.fetchone()[0])
    return replicas.Standby(
        in_recovery=in_recovery,
        replayed_at=replayed_at,
        now=now,
        replay_lsn=replicas.lsn(replay_lsn),
        paused=bool(paused),
        primary_lsn=primary_lsn,
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]
