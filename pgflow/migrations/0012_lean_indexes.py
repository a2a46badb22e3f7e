"""Fewer index entries per claim and outcome: foreign-key indexes that a composite index
already leads with are dropped (step.run, event.run, run.subject_type), and those of columns
that are almost always NULL index only their non-NULL rows (step.batch, step.signal,
run.parent, run.rerun_of). Each claim and each outcome writes the step row anew into every
index of the table (its status is in their conditions), so these were paid on every step.
The new indexes are built from a scan of each table: on a large history, expect this
migration to take as long as an index build on pgflow_step and pgflow_run."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("pgflow", "0011_rollup_throttled_queues"),
    ]

    operations = [
        migrations.AlterField(
            model_name="event",
            name="run",
            field=models.ForeignKey(
                db_index=False, on_delete=django.db.models.deletion.CASCADE, to="pgflow.workflowrun"
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
