"""Fewer index entries to write: foreign-key indexes that a composite index already leads
with are dropped (step.run, event.run, run.subject_type, alert.rule, schedule_tick.schedule),
and those of columns that are almost always NULL index only their non-NULL rows (step.batch,
step.signal, run.parent, run.rerun_of; schedule_tick.run already had one). Each claim and
each outcome writes the step row anew into every index of its table (its status is in their
conditions), so the step table's were paid on every step. The new indexes are built from a
scan of their tables: on a large history, expect this migration to take as long as an index
build on pgflow_step and pgflow_run."""

import django.db.models.deletion
from django.db import migrations, models

# The foreign keys' own indexes, by the names Django gave them (the same on every database).
DROPPED = [
    ("pgflow_alert_rule_id_82b93651", "pgflow_alert", "rule_id"),
    ("pgflow_event_run_id_66eb8ec9", "pgflow_event", "run_id"),
    ("pgflow_schedule_tick_run_id_b2d8cbcf", "pgflow_schedule_tick", "run_id"),
    ("pgflow_schedule_tick_schedule_id_af9806dd", "pgflow_schedule_tick", "schedule_id"),
    ("pgflow_step_batch_id_90b50f06", "pgflow_step", "batch_id"),
    ("pgflow_step_run_id_a391fa7d", "pgflow_step", "run_id"),
    ("pgflow_step_signal_id_1fa3b4ac", "pgflow_step", "signal_id"),
    ("pgflow_run_parent_id_0c4e15aa", "pgflow_run", "parent_id"),
    ("pgflow_run_rerun_of_id_6684095b", "pgflow_run", "rerun_of_id"),
    ("pgflow_run_subject_type_id_ca4aee60", "pgflow_run", "subject_type_id"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("pgflow", "0011_rollup_throttled_queues"),
    ]

    # Django's AlterField to db_index=False drops every plain index on the column that
    # Meta.indexes does not name, and so also the partial unique index of the step table's
    # UniqueConstraint pgflow_step_one_open on run_id: each index is dropped here by name.
    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"DROP INDEX IF EXISTS {name}", reverse_sql=f"CREATE INDEX {name} ON {table} ({column})"
                )
                for name, table, column in DROPPED
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="alert",
                    name="rule",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="alerts",
                        to="pgflow.alertrule",
                    ),
                ),
                migrations.AlterField(
                    model_name="event",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE, to="pgflow.workflowrun"
                    ),
                ),
                migrations.AlterField(
                    model_name="scheduletick",
                    name="run",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="pgflow.workflowrun",
                    ),
                ),
                migrations.AlterField(
                    model_name="scheduletick",
                    name="schedule",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="ticks",
                        to="pgflow.schedule",
                    ),
                ),
                migrations.AlterField(
                    model_name="step",
                    name="batch",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="pgflow.batch",
                    ),
                ),
                migrations.AlterField(
                    model_name="step",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.CASCADE, to="pgflow.workflowrun"
                    ),
                ),
                migrations.AlterField(
                    model_name="step",
                    name="signal",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="pgflow.signal",
                    ),
                ),
                migrations.AlterField(
                    model_name="workflowrun",
                    name="parent",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="children",
                        to="pgflow.workflowrun",
                    ),
                ),
                migrations.AlterField(
                    model_name="workflowrun",
                    name="rerun_of",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="reruns",
                        to="pgflow.workflowrun",
                    ),
                ),
                migrations.AlterField(
                    model_name="workflowrun",
                    name="subject_type",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to="contenttypes.contenttype",
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="step",
            index=models.Index(
                condition=models.Q(("batch__isnull", False)), fields=["batch"], name="pgflow_step_batch"
            ),
        ),
        migrations.AddIndex(
            model_name="step",
            index=models.Index(
                condition=models.Q(("signal__isnull", False)), fields=["signal"], name="pgflow_step_signal"
            ),
        ),
        migrations.AddIndex(
            model_name="workflowrun",
            index=models.Index(
                condition=models.Q(("parent__isnull", False)), fields=["parent"], name="pgflow_run_parent"
            ),
        ),
        migrations.AddIndex(
            model_name="workflowrun",
            index=models.Index(
                condition=models.Q(("rerun_of__isnull", False)), fields=["rerun_of"], name="pgflow_run_rerun_of"
            ),
        ),
    ]
