"""The worker's classifier of database errors and its socket defaults (no database)."""

from __future__ import annotations

import psycopg
from django.db import InternalError, OperationalError, ProgrammingError

from pgflow import db
from pgflow.runtime import connections


def _raised(error: BaseException, wrapper: type[Exception] | None = None) -> BaseException:
    if wrapper is None:
        return error
    wrapped = wrapper(str(error))
    wrapped.__cause__ = error
    return wrapped


def test_a_read_only_node_and_admin_shutdown_are_the_database_away() -> None:
    read_only = psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction")
    assert connections.away(read_only)
    assert connections.away(_raised(read_only, InternalError))  # as Django raises it
    assert connections.refused_as_read_only(_raised(read_only, InternalError))
    for error in (psycopg.errors.AdminShutdown("terminating"), psycopg.errors.CannotConnectNow("starting up")):
        assert connections.away(error)
        assert not connections.refused_as_read_only(error)


def test_a_query_s_own_errors_are_not() -> None:
    for error in (
        psycopg.errors.QueryCanceled("statement timeout"),
        psycopg.errors.UndefinedTable("no such table"),
        psycopg.errors.SerializationFailure("could not serialize"),
    ):
        assert not connections.away(error)
        assert not connections.away(_raised(error, ProgrammingError))
    assert not connections.away(ValueError("a body's own"))


def test_socket_defaults_stay_below_the_lease_and_leave_what_the_user_set() -> None:
    for lease in (5.0, 60.0, 600.0):
        values = connections.socket_defaults(lease)
        probing = values["keepalives_idle"] + values["keepalives_interval"] * values["keepalives_count"]
        assert probing < lease
        assert values["tcp_user_timeout"] / 1000 < lease
        assert values["connect_timeout"] < lease
    options = {"keepalives_idle": 99, "tcp_user_timeout": 1234}
    added = connections.apply_socket_defaults(options, 60.0)
    assert options["keepalives_idle"] == 99 and options["tcp_user_timeout"] == 1234
    assert "keepalives_idle" not in added and added["keepalives"] == 1
    assert connections.silence_limit(options, 60.0) == 1.234
    assert connections.silence_limit({}, 60.0) == 15.0


def test_a_worker_without_session_state_prepares_nothing_whatever_its_options_said() -> None:
    options = {"prepare_threshold": 5, "keepalives": 1}
    assert connections.without_session_state(options)
    assert options == {"prepare_threshold": None, "keepalives": 1}
    assert not connections.without_session_state(options)  # nothing left to turn off
    assert not connections.without_session_state({})


def test_a_statement_cancelled_timed_out_or_chosen_to_lose_was_stopped_not_refused() -> None:
    for error in (
        psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
        psycopg.errors.LockNotAvailable("canceling statement due to lock timeout"),
        psycopg.errors.SerializationFailure("could not serialize access"),
        psycopg.errors.DeadlockDetected("deadlock detected"),
    ):
        assert db.stopped(error)
        assert db.stopped(_raised(error, OperationalError))  # as Django raises it
        assert not connections.away(error)
    for error in (
        psycopg.errors.UntranslatableCharacter("unsupported Unicode escape sequence"),
        psycopg.errors.AdminShutdown("terminating"),
        psycopg.OperationalError("server closed the connection unexpectedly"),
    ):
        assert not db.stopped(error)
    assert not db.stopped(ValueError("a body's own"))
