"""Indexes for the run search language (pgflow.search): each qualifier that no earlier index
answered gets one, and no more, since every index on pgflow_run or pgflow_step is written by
every start or step:

- ``pgflow_run_key``: ``key:`` without ``class:`` (the unique index leads with the class),
  exact or a prefix (``varchar_pattern_ops``: ``LIKE 'order-%'`` under any collation); only
  runs started with a key have an entry.
- ``pgflow_run_input`` (GIN, jsonb_path_ops): ``input.<path>:<value>`` as ``input @> …``.
- ``pgflow_step_output`` (GIN, jsonb_path_ops, completed attempts only):
  ``output.<step>.<path>:<value>``; an attempt's output is final when it completes, so each
  attempt writes it once.
- ``pgflow_step_error`` (btree, attempts with an error only): ``error:<text>`` reads the
  failed attempts, never every attempt. A substring of a message in any case needs a
  trigram index, and pg_trgm is an extension: CREATE EXTENSION needs a privilege a project's
  database user often lacks, while failed attempts are few enough to read.

``step:`` (current step), ``class:<name>``, ``status:``, ``since:``, ``parent:`` and
``attr.`` use the indexes that were already there (see pgflow.searching). The GIN indexes
live in the database only, as 0014's: as GinIndex in the model's state, Django 6.1 would
require django.contrib.postgres in INSTALLED_APPS (postgres.E005). Every index is built
CONCURRENTLY: a plain CREATE INDEX would hold up every start and commit while it builds, so
the migration is not atomic; on a large history expect it to take as long as a scan of
pgflow_run and pgflow_step.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("pgflow", "0015_run_tenant"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="workflowrun",
                    index=models.Index(
                        condition=models.Q(("key__isnull", False)),
                        fields=["key"],
                        name="pgflow_run_key",
                        opclasses=["varchar_pattern_ops"],
                    ),
                ),
                migrations.AddIndex(
                    model_name="step",
                    index=models.Index(
                        condition=models.Q(("error_class__isnull", False)),
                        fields=["run"],
                        name="pgflow_step_error",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS pgflow_run_key ON pgflow_run "
                    "(key varchar_pattern_ops) WHERE key IS NOT NULL",
                    reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS pgflow_run_key",
                ),
                migrations.RunSQL(
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS pgflow_step_error ON pgflow_step (run_id) "
                    "WHERE error_class IS NOT NULL",
                    reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS pgflow_step_error",
                ),
            ],
        ),
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS pgflow_run_input ON pgflow_run USING gin (input jsonb_path_ops)",
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS pgflow_run_input",
        ),
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS pgflow_step_output ON pgflow_step "
            "USING gin (output jsonb_path_ops) WHERE status = 'completed'",
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS pgflow_step_output",
        ),
    ]
