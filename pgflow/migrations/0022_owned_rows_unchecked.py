"""The rows a run owns stop being checked by database foreign keys: its attempts, events,
signals and batches (``pgflow_step_live``, ``pgflow_event_live``, ``pgflow_signal``,
``pgflow_batch``).

A key costs twice. Every row inserted into those tables ran a check query against
``pgflow_run`` (several per step: its attempt and its events), and every run retention deletes
ran one query per key to look for rows still pointing at it (benchmarks/RESULTS.md, "Issue
38: retention without the owning keys' checks"). Neither check can find anything: every writer
of those rows holds the run's row lock (``store.locking.locked``) or made the run in the same
transaction, and retention deletes a run's rows with it, under the same lock
(pgflow.store.retention); ``tests/invariants.py`` checks that no such row names a gone run.
Django's ``on_delete=CASCADE`` still deletes them with a run deleted through the ORM.

A batch member's child run stays a key (see ``BatchMember.child``), and so do the keys that
point at attempts and batches. Each DROP CONSTRAINT takes the two tables' ACCESS EXCLUSIVE
lock for a moment and rewrites nothing. Going back adds each key ``NOT VALID`` and then
validates it, which scans the table under a SHARE UPDATE EXCLUSIVE lock the claims pass.
"""

import django.db.models.deletion
from django.db import migrations, models

# Django's names for the keys of the tables 0019 made partitions (named for the tables as
# they were); dropped by what they are, whatever they were named.
_PARTITIONED = {
    "pgflow_step_live": "pgflow_step_run_id_a391fa7d_fk_pgflow_run_id",
    "pgflow_event_live": "pgflow_event_run_id_66eb8ec9_fk_pgflow_run_id",
}


def _drop(table: str) -> str:
    return f"""DO $$ DECLARE key name; BEGIN
        FOR key IN SELECT c.conname FROM pg_constraint AS c
                   WHERE c.contype = 'f' AND c.conrelid = '{table}'::regclass
                     AND c.confrelid = 'pgflow_run'::regclass
                     AND c.conkey = ARRAY[(SELECT attnum FROM pg_attribute
                                           WHERE attrelid = '{table}'::regclass AND attname = 'run_id')]
        LOOP EXECUTE format('ALTER TABLE {table} DROP CONSTRAINT %I', key); END LOOP; END $$"""


def _add(table: str, key: str) -> list[str]:
    return [
        f"ALTER TABLE {table} ADD CONSTRAINT {key} FOREIGN KEY (run_id) REFERENCES pgflow_run (id) "
        "DEFERRABLE INITIALLY DEFERRED NOT VALID",
        f"ALTER TABLE {table} VALIDATE CONSTRAINT {key}",
    ]


def _unchecked(model_name: str, **options) -> migrations.AlterField:
    return migrations.AlterField(
        model_name=model_name,
        name="run",
        field=models.ForeignKey(
            db_constraint=False, on_delete=django.db.models.deletion.CASCADE, to="pgflow.workflowrun", **options
        ),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("pgflow", "0021_step_waiting_index"),
    ]

    operations = [
        # The partitions' keys are the live partitions' own (0019), not the parent's that the
        # models name: Django's AlterField would look for them on the parent and not find them.
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(_drop(table), reverse_sql=_add(table, key)) for table, key in _PARTITIONED.items()
            ],
            state_operations=[_unchecked("step", db_index=False), _unchecked("event", db_index=False)],
        ),
        _unchecked("signal"),
        _unchecked("batch"),
    ]
