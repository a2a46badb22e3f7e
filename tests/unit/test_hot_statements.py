"""The hot statements fit psycopg's cache of parsed queries: past its limits (the text's
bytes, the parameters' count) psycopg parses a statement's placeholders again on every run
(pgflow.store.cursors.CACHED_LENGTH)."""

from __future__ import annotations

import pytest
from psycopg import _queries

from pgflow.store import claims, starting
from pgflow.store.cursors import CACHED_LENGTH, compact


def test_the_cached_length_is_psycopgs() -> None:
    # psycopg's own constant: if a release changes it, the statements below are measured
    # against the wrong figure.
    assert CACHED_LENGTH == _queries.MAX_CACHED_STATEMENT_LENGTH


@pytest.mark.parametrize(
    ("name", "sql"),
    [
        ("the ungated claim", claims.UNGATED_CLAIM_SQL),
        ("the claim by id", claims.CLAIM_NOTIFIED_SQL),
        ("the plain start", starting._plain_start_statement().sql),
    ],
)
def test_a_hot_statement_is_parsed_once(name: str, sql: str) -> None:
    size = len(sql.encode())
    assert size <= CACHED_LENGTH, f"{name} is {size} bytes: psycopg parses it on every run"
    parameters = sql.count("%s") + len(set(_named(sql)))
    assert parameters <= _queries.MAX_CACHED_STATEMENT_PARAMS, f"{name} has {parameters} parameters"


def test_compact_takes_out_the_layout_only() -> None:
    sql = """
    SELECT a, b
    FROM t WHERE (x = %(x)s AND y <= 'a b') ,z
    """
    assert compact(sql) == "SELECT a,b FROM t WHERE(x=%(x)s AND y <='a b'),z"


def _named(sql: str) -> list[str]:
    return [part.split(")s", 1)[0] for part in sql.split("%(")[1:]]
