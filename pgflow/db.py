"""The database pgflow keeps its tables in: ``PGFLOW["DATABASE"]``, a Django alias.

``"default"`` unless set. Everything pgflow reads and writes goes through it: its ORM queries
by :class:`Router` (which a project with another alias lists in ``DATABASE_ROUTERS``; the
system check ``pgflow.E005`` says so when it is missing), its SQL through :data:`connection`
and its transactions through :func:`atomic`. A project's own models stay where its routers
put them: a ``start()`` inside the project's ``atomic()`` on another database is not part of
that transaction (docs/reference.md, "Settings").
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils.connection import ConnectionProxy

APP_LABEL = "pgflow"

_cached: list[str] = []  # the alias, read once: the hot path asks for it on every statement


def alias() -> str:
    if not _cached:
        _cached.append(getattr(settings, "PGFLOW", {}).get("DATABASE", DEFAULT_DB_ALIAS))
    return _cached[0]


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting in ("PGFLOW", "DATABASES"):
        _cached.clear()


setting_changed.connect(_forget)


class _Connection(ConnectionProxy):
    """``django.db.connection``, for pgflow's alias of the moment (a test may change it)."""

    def __init__(self) -> None:
        super().__init__(connections, DEFAULT_DB_ALIAS)

    @property
    def _alias(self) -> str:  # read on every access, not fixed
        return alias()


connection: Any = _Connection()


def wrapper() -> Any:
    """This thread's connection wrapper for pgflow's alias, looked up once: ``connection``
    looks it up again on every attribute read, which a hot path pays for each field it
    prepares (a start's, about ten lookups)."""
    return connections[alias()]


# A statement stopped before its end, not refused for what it asked: cancelled (a
# statement_timeout, pg_cancel_backend), a lock_timeout, or chosen to lose a serialization
# conflict or a deadlock. Nothing of its transaction was written; run again, it may pass.
_STOPPED = ("57014", "55P03", "40001", "40P01")


def stopped(error: BaseException) -> bool:
    """Whether ``error`` (or its cause or context) stopped a statement that may pass if run
    again: neither the database away (``pgflow.runtime.connections.away``) nor a value it
    refused."""
    return any(getattr(link, "sqlstate", None) in _STOPPED for link in error_chain(error))


def error_chain(error: BaseException) -> list[BaseException]:
    """``error`` and the errors it was raised from or during (Django wraps psycopg's)."""
    seen: list[BaseException] = []
    link: BaseException | None = error
    while link is not None and link not in seen and len(seen) < 20:
        seen.append(link)
        link = link.__cause__ or link.__context__
    return seen


def atomic(*, savepoint: bool = True, durable: bool = False) -> transaction.Atomic:
    """``transaction.atomic()`` on pgflow's database."""
    return transaction.atomic(using=alias(), savepoint=savepoint, durable=durable)


def on_commit(func: Any, robust: bool = False) -> None:
    """``transaction.on_commit()`` on pgflow's database."""
    transaction.on_commit(func, using=alias(), robust=robust)


class Router:
    """Sends pgflow's models to ``PGFLOW["DATABASE"]`` and migrates them only there; says
    nothing about any other app's. ``DATABASE_ROUTERS = ["pgflow.db.Router", ...]``."""

    def db_for_read(self, model: type, **hints: Any) -> str | None:
        return alias() if model._meta.app_label == APP_LABEL else None  # type: ignore[attr-defined]

    def db_for_write(self, model: type, **hints: Any) -> str | None:
        return alias() if model._meta.app_label == APP_LABEL else None  # type: ignore[attr-defined]

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        # A run's subject may live in another database: it is a content type and a key, no
        # foreign key, so Django need not be told anything about it.
        return None

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool | None:
        if app_label == APP_LABEL:
            return db == alias()
        return None
