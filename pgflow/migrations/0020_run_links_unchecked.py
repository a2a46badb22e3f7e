"""Four links between runs stop being database foreign keys: a re-run's original, a child's
parent, a schedule's last run and a tick's run.

Deleting a row of pgflow_run makes PostgreSQL check every foreign key that points at it, one
query per key per row, about 12 µs each on two cores: with nine keys that was three quarters
of what retention spends on a run (benchmarks/RESULTS.md, "Issue 38: retention without the
links' checks"). These four are references, not ownership; retention nulls them itself
before it deletes (pgflow.store.retention), and whoever writes one holds the run it names
(pgflow.store.links), so none names a run that is gone. The ownership keys stay (attempts,
events, signals and batches to their run), and so does a batch member's child run, whose
writer holds its parent's lock (see BatchMember.child).

Each DROP CONSTRAINT takes pgflow_run's ACCESS EXCLUSIVE lock for a moment and rewrites
nothing. Going back re-adds the keys, which validates every row of the four columns under
a SHARE ROW EXCLUSIVE lock: run it when the workers are stopped.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("pgflow", "0019_history_partitions"),
    ]

    operations = [
        migrations.AlterField(
            model_name="schedule",
            name="last_run",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="pgflow.workflowrun",
            ),
        ),
        migrations.AlterField(
            model_name="scheduletick",
            name="run",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="pgflow.workflowrun",
            ),
        ),
        migrations.AlterField(
            model_name="workflowrun",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
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
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="reruns",
                to="pgflow.workflowrun",
            ),
        ),
    ]
