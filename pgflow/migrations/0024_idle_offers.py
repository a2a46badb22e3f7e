"""``pgflow_offer``: an idle worker's offer of a slot, which a plain start takes to hand its
first attempt straight to that worker (pgflow.store.offers, docs/architecture.md).

UNLOGGED: an offer is only worth anything to the session that made it, so losing the table's
rows in a crash, or not having them on a standby, loses nothing (a worker whose offer is gone
is claimed for as before), and the offers made and taken at every idle moment write no WAL.
A new, empty table: creating it locks nothing else; going back drops it.
"""

import pgflow.models
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("pgflow", "0023_live_autovacuum"),
    ]

    operations = [
        migrations.CreateModel(
            name="Offer",
            fields=[
                ("worker", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("queues", pgflow.models.ListColumn(element="text")),
                ("backend_pid", models.IntegerField()),
                ("until", models.DateTimeField()),
                ("lease", models.DurationField()),
            ],
            options={
                "db_table": "pgflow_offer",
            },
        ),
        migrations.RunSQL("ALTER TABLE pgflow_offer SET UNLOGGED", reverse_sql=migrations.RunSQL.noop),
    ]
