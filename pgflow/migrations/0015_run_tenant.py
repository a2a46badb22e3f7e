"""Tenants: ``pgflow_run.tenant`` (``PGFLOW["TENANT"]``'s key when the run started) and its
partial index ``pgflow_run_tenant`` (the run list filtered by tenant, newest first);
``pgflow_schedule.tenant`` (a declared ``Schedule(tenant=...)``: its runs' tenant).

The columns are nullable with no default: adding them rewrites no row, and the previous
release's INSERTs, which do not name it, still work while it rolls out. The index is built
CONCURRENTLY, as 0014's: a plain CREATE INDEX on a live run table would hold up every start
and commit while it builds, so the migration is not atomic.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("pgflow", "0014_run_attributes"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="tenant",
            field=models.CharField(blank=True, max_length=100, null=True),
        ),
        migrations.AddField(
            model_name="workflowrun",
            name="tenant",
            field=models.CharField(blank=True, max_length=100, null=True),
        ),
        # The model's index in the state, built CONCURRENTLY in the database (Django's
        # AddIndexConcurrently lives in django.contrib.postgres, which need not be installed).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="workflowrun",
                    index=models.Index(
                        condition=models.Q(("tenant__isnull", False)),
                        fields=["tenant", "created_at"],
                        name="pgflow_run_tenant",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS pgflow_run_tenant ON pgflow_run (tenant, created_at) "
                    "WHERE tenant IS NOT NULL",
                    reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS pgflow_run_tenant",
                ),
            ],
        ),
    ]
