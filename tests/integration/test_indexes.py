"""Every index on pgflow's tables earns its place: each claim and each outcome rewrites a step
row into every index of its table, so one that another already covers is paid on every step."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

# Each non-unique index of a pgflow table on plain columns: its table, name, key columns
# (positions) and whether it is partial (a partial index covers only some rows).
INDEXES_SQL = """
SELECT t.relname, i.relname, x.indkey::text, x.indpred IS NOT NULL
FROM pg_index AS x
JOIN pg_class AS i ON i.oid = x.indexrelid
JOIN pg_class AS t ON t.oid = x.indrelid
JOIN pg_namespace AS n ON n.oid = t.relnamespace
WHERE n.nspname = current_schema() AND t.relname LIKE 'pgflow\\_%' AND NOT x.indisunique AND x.indexprs IS NULL
"""


def test_no_index_repeats_the_leading_columns_of_a_longer_one():
    with connection.cursor() as cursor:
        cursor.execute(INDEXES_SQL)
        indexes = [(table, name, keys.split(), partial) for table, name, keys, partial in cursor.fetchall()]
    redundant = [
        f"{name} ({' '.join(keys)}) is covered by {other}"
        for table, name, keys, partial in indexes
        if not partial
        for other_table, other, other_keys, other_partial in indexes
        if other_table == table and not other_partial
        if len(other_keys) > len(keys) and other_keys[: len(keys)] == keys
    ]
    assert redundant == []


def test_the_partial_foreign_key_indexes_serve_lookups_by_value():
    # A lookup by value implies NOT NULL, so the planner may use an index of non-NULL rows only.
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN SELECT id FROM pgflow_run WHERE parent_id = %s", [1])
        plan = " ".join(row[0] for row in cursor.fetchall())
    assert "pgflow_run_parent" in plan
