"""Run attributes and saved views: ``pgflow_run.attributes`` (flat JSON tags from
``start(attributes=...)`` and a body's ``set_attributes()``), its GIN index
``pgflow_run_attributes`` (jsonb_path_ops: the @> and @@ that ``attr.K:V`` searches use),
the ``attributes_set`` event, the ``runs_matching`` alert kind and ``pgflow_saved_view``.

The column is added with a constant default (no table rewrite, and the previous release's
INSERTs, which do not name it, still work while it rolls out). The index is built
CONCURRENTLY: on a live run table a plain CREATE INDEX would hold up every start and
commit while it builds, so the migration is not atomic.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("pgflow", "0013_event_reconnected"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="SavedView",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "name",
                    models.CharField(
                        help_text="shown on the run list, e.g. 'gold paused'", max_length=100, unique=True
                    ),
                ),
                (
                    "query",
                    models.CharField(help_text="a run list search, e.g. attr.plan:gold status:paused", max_length=500),
                ),
                ("created_at", models.DateTimeField(editable=False)),
            ],
            options={
                "db_table": "pgflow_saved_view",
                "ordering": ["name"],
            },
        ),
        migrations.AddField(
            model_name="workflowrun",
            name="attributes",
            field=models.JSONField(blank=True, db_default=models.Value({}, models.JSONField()), default=dict),
        ),
        migrations.AlterField(
            model_name="alertrule",
            name="kind",
            field=models.CharField(
                help_text="phase_p95, runs_paused, steps_overdue, waits_past_deadline, queue_without_worker, failure_rate or runs_matching",
                max_length=32,
            ),
        ),
        migrations.AlterField(
            model_name="event",
            name="event",
            field=models.CharField(
                choices=[
                    ("started", "started"),
                    ("step_completed", "step completed"),
                    ("step_failed", "step failed"),
                    ("skipped", "skipped"),
                    ("reattempted", "reattempted"),
                    ("paused", "paused"),
                    ("resumed", "resumed"),
                    ("cancelled", "cancelled"),
                    ("finished", "finished"),
                    ("step_cancelled", "step cancelled"),
                    ("handed_back", "handed back"),
                    ("lease_lost", "lease lost"),
                    ("reconnected", "reconnected"),
                    ("definition_changed", "definition changed"),
                    ("signal_received", "signal received"),
                    ("timed_out", "timed out"),
                    ("fan_out_opened", "fan out opened"),
                    ("fan_out_finished", "fan out finished"),
                    ("rerun_of", "rerun of"),
                    ("rerun_as", "rerun as"),
                    ("attributes_set", "attributes set"),
                ],
                max_length=40,
            ),
        ),
        # In the database only: as a GinIndex in the model's state, Django 6.1 would require
        # django.contrib.postgres in INSTALLED_APPS (postgres.E005).
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS pgflow_run_attributes ON pgflow_run "
            "USING gin (attributes jsonb_path_ops)",
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS pgflow_run_attributes",
        ),
        migrations.AddField(
            model_name="savedview",
            name="created_by",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
    ]
