"""An index of the attempts that have waited (``waiting_since`` set), on every partition of
``pgflow_step``: the insights' approval waits and the alerts' waiting histogram read those
attempts only, and without it scanned every attempt of their window, in the live partition
and in each day of history since (docs/scaling.md, "History in partitions").

Partial, so an attempt that never waits (nearly every one) writes no entry. Built the way a
partitioned table allows without holding up the claims: the parent's index ``ON ONLY``
first, then each partition's ``CONCURRENTLY`` and attached to it; the parent's is valid once
every partition's is attached. So the migration is not atomic; on a large history expect it
to take as long as a scan of each partition. A day's partition made later by the sweep is
built with it (``pgflow.store.history.INDEXES``). Going back drops it: one catalog change.
"""

from django.db import migrations, models

DEFINITION = "(waiting_since) WHERE waiting_since IS NOT NULL"


def _partitions(cursor) -> list[str]:
    cursor.execute("SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'pgflow_step'::regclass")
    return sorted(row[0] for row in cursor.fetchall())


def forward(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"CREATE INDEX IF NOT EXISTS pgflow_step_waiting ON ONLY pgflow_step {DEFINITION}")
        for name in _partitions(cursor):
            cursor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name}_waiting ON {name} {DEFINITION}")
            cursor.execute(
                "SELECT 1 FROM pg_inherits WHERE inhparent = 'pgflow_step_waiting'::regclass "
                "AND inhrelid = %s::regclass",
                [f"{name}_waiting"],
            )
            if cursor.fetchone() is None:  # a partition the sweep made meanwhile has it attached already
                cursor.execute(f"ALTER INDEX pgflow_step_waiting ATTACH PARTITION {name}_waiting")


def backward(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS pgflow_step_waiting")  # and every partition's attached to it
        for name in _partitions(cursor):
            cursor.execute(f"DROP INDEX IF EXISTS {name}_waiting")  # one a stopped forward left unattached


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("pgflow", "0020_run_links_unchecked"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="step",
                    index=models.Index(
                        condition=models.Q(("waiting_since__isnull", False)),
                        fields=["waiting_since"],
                        name="pgflow_step_waiting",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(forward, backward)],
        ),
    ]
