"""The scheduled attempts of a queue by due time (see Step.Meta.indexes).

Built CONCURRENTLY: on a live step table a plain CREATE INDEX would hold up every
claim and commit while it builds.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

import pgflow.core.states


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("pgflow", "0002_rollup"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="step",
            index=models.Index(
                models.F("queue"),
                models.Func(models.Value("UTC"), models.F("scheduled_at"), function="timezone",
                            output_field=models.DateTimeField()),
                condition=models.Q(("status", pgflow.core.states.StepStatus["SCHEDULED"])),
                name="pgflow_step_due",
            ),
        ),
    ]
