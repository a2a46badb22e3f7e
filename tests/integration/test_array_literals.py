"""The array literals the hot statements pass for their ``::text[]`` and ``::bigint[]``
parameters read back in PostgreSQL as the values they were made from, with the server
binding them (the claims, the group commit) and with Django's cursor binding them in the
text (the gated claim)."""

from __future__ import annotations

import pytest
from django.db import connection

from pgflow.store.cursors import bigint_array, hot_cursor, text_array

pytestmark = pytest.mark.django_db

AWKWARD = ["default", "a,b", "NULL", "null", "", 'say "hi"', "back\\slash", "{brace}", " spaced ", "ünï", "x}y{z"]


def test_text_arrays_read_back_as_given_bound_by_the_server():
    with hot_cursor() as cursor:
        cursor.execute("SELECT %(v)s::text[], %(e)s::text[]", {"v": text_array(AWKWARD), "e": text_array([])})
        assert cursor.fetchone() == (AWKWARD, [])


def test_text_arrays_read_back_as_given_bound_in_the_text():
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::text[], cardinality(%s::text[])", [text_array(AWKWARD), text_array(AWKWARD)])
        assert cursor.fetchone() == (AWKWARD, len(AWKWARD))


def test_bigint_arrays_read_back_as_given():
    ids = [1, 2**40, 7]
    with hot_cursor() as cursor:
        cursor.execute("SELECT %(v)s::bigint[], %(e)s::bigint[]", {"v": bigint_array(ids), "e": bigint_array([])})
        assert cursor.fetchone() == (ids, [])
