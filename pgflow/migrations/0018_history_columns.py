"""The first half of moving history into partitions (0019 has the layout, pgflow.store.history
the rest): ``pgflow_history_state``, where the sweep's filing stands; each attempt and event
gets ``history_day``, the UTC day its run ended once the sweep has filed it, NULL until then;
and the three foreign keys into ``pgflow_step`` go, since PostgreSQL only lets a key point at a
unique index of a partitioned table that includes its partition key (the ORM's on_delete was
always Python's; retention does its own).

Not atomic, so that on a large installation no step holds a lock that stops the claim for
longer than a catalog change: ADD COLUMN without a default rewrites nothing; each CHECK
(``history_day IS NULL``, which 0019's layout needs on the default partitions) is added NOT
VALID, under a brief lock, and then VALIDATEd under SHARE UPDATE EXCLUSIVE, which scans the
table while claims, starts and commits go on.
"""

import django.db.models.deletion
from django.db import migrations, models

_CHECKS = [
    migrations.RunSQL(
        f"ALTER TABLE {table} ADD CONSTRAINT {table}_live CHECK (history_day IS NULL) NOT VALID",
        reverse_sql=f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {table}_live",
    )
    for table in ("pgflow_step", "pgflow_event")
] + [
    migrations.RunSQL(f"ALTER TABLE {table} VALIDATE CONSTRAINT {table}_live", reverse_sql=migrations.RunSQL.noop)
    for table in ("pgflow_step", "pgflow_event")
]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("pgflow", "0017_run_fillfactor"),
    ]

    operations = [
        migrations.AlterField(
            model_name="batch",
            name="step",
            field=models.ForeignKey(
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="pgflow.step",
            ),
        ),
        migrations.AlterField(
            model_name="event",
            name="step",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="pgflow.step",
            ),
        ),
        migrations.AlterField(
            model_name="signal",
            name="consumed_by",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="pgflow.step",
            ),
        ),
        migrations.AddField(
            model_name="event",
            name="history_day",
            field=models.DateField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="step",
            name="history_day",
            field=models.DateField(blank=True, editable=False, null=True),
        ),
        migrations.CreateModel(
            name="HistoryState",
            fields=[
                ("id", models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ("filed_until", models.DateTimeField(blank=True, null=True)),
                ("filed_id", models.BigIntegerField(default=0)),
            ],
            options={"db_table": "pgflow_history_state"},
        ),
        *_CHECKS,
    ]
