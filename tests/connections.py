"""A second session on the test database, beside Django's: a transaction held open while the
code under test runs (a webhook holding a run's lock, a purge not yet committed, a reader of
the live partition), or a LISTEN."""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import connection

_PARAMS = ("dbname", "user", "password", "host", "port")


def other_connection(**options: Any) -> psycopg.Connection:
    """A new psycopg connection to the database Django's default connection uses; ``options``
    go to ``psycopg.connect`` (``autocommit=True``, …)."""
    params = connection.get_connection_params()
    return psycopg.connect(**{k: v for k, v in params.items() if k in _PARAMS}, **options)
