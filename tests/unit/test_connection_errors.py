"""Which body errors mean the database went away (re-attempted as lost) and which are the
query's own (the body's failure, judged by its policies)."""

from __future__ import annotations

import psycopg
import psycopg.errors
import pytest
from django.db import InterfaceError, OperationalError

from pgflow.runtime.connections import lost_with_connection


def wrapped(django_class: type[Exception], cause: BaseException) -> Exception:
    error = django_class(str(cause))
    error.__cause__ = cause
    return error


def raised_from(cause: BaseException) -> ValueError:
    try:
        try:
            raise cause
        except Exception as exc:
            raise ValueError("the body's own error") from exc
    except ValueError as outer:
        return outer


@pytest.mark.parametrize(
    "error",
    [
        psycopg.OperationalError("the connection is closed"),
        psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly"),
        wrapped(OperationalError, psycopg.OperationalError("the connection is closed")),
        wrapped(OperationalError, psycopg.errors.AdminShutdown("terminating connection due to administrator command")),
        wrapped(OperationalError, psycopg.errors.CannotConnectNow("the database system is starting up")),
        wrapped(InterfaceError, psycopg.InterfaceError("connection already closed")),
        raised_from(psycopg.OperationalError("server closed the connection unexpectedly")),
    ],
)
def test_errors_of_the_connection_are_a_lost_database(error: BaseException) -> None:
    assert lost_with_connection(error)


@pytest.mark.parametrize(
    "error",
    [
        ValueError("a body's bug"),
        wrapped(OperationalError, psycopg.errors.QueryCanceled("canceling statement due to statement timeout")),
        wrapped(OperationalError, psycopg.errors.LockNotAvailable("could not obtain lock")),
        wrapped(OperationalError, psycopg.errors.SerializationFailure("could not serialize access")),
        raised_from(psycopg.errors.QueryCanceled("canceling statement due to statement timeout")),
    ],
)
def test_a_querys_own_errors_stay_the_bodys_failures(error: BaseException) -> None:
    assert not lost_with_connection(error)
