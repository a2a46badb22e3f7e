# Flow control (issue 20): gates on attempts, the gate and queue-state tables, the split claim index.

import pgflow.models
import pgflow.core.states
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('pgflow', '0009_rerun_children'),
    ]

    operations = [
        migrations.CreateModel(
            name='Gate',
            fields=[
                ('name', models.CharField(max_length=320, primary_key=True, serialize=False)),
                ('size', models.PositiveIntegerField(default=1)),
                ('per', models.FloatField(default=0)),
                ('holders', pgflow.models.ListColumn(default=list, element='bigint')),
                ('starts', pgflow.models.ListColumn(default=list, element='timestamptz')),
                ('served_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'db_table': 'pgflow_gate',
            },
        ),
        migrations.CreateModel(
            name='QueueState',
            fields=[
                ('queue', models.CharField(max_length=100, primary_key=True, serialize=False)),
                ('paused', models.BooleanField(default=False)),
                ('changed_at', models.DateTimeField()),
                ('changed_by', models.CharField(default='system', max_length=200)),
            ],
            options={
                'db_table': 'pgflow_queue_state',
            },
        ),
        migrations.RemoveIndex(
            model_name='step',
            name='pgflow_step_claim',
        ),
        migrations.AddField(
            model_name='step',
            name='gate',
            field=models.CharField(blank=True, db_default='', default='', max_length=320),
        ),
        migrations.AddField(
            model_name='step',
            name='gate_max',
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name='step',
            name='gated',
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddField(
            model_name='step',
            name='rate_gate',
            field=models.CharField(blank=True, db_default='', default='', max_length=320),
        ),
        migrations.AddField(
            model_name='step',
            name='rate_limit',
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name='step',
            name='rate_per',
            field=models.FloatField(db_default=0.0, default=0),
        ),
        migrations.AddField(
            model_name='step',
            name='throttled_until',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='workflowrun',
            name='singleton_key',
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AddIndex(
            model_name='step',
            index=models.Index(models.F('queue'), models.OrderBy(models.F('priority'), descending=True), models.F('scheduled_at'), models.F('id'), condition=models.Q(('gated', False), ('status', pgflow.core.states.StepStatus['SCHEDULED'])), name='pgflow_step_claim'),
        ),
        migrations.AddIndex(
            model_name='step',
            index=models.Index(models.F('queue'), models.F('gate'), models.F('rate_gate'), models.OrderBy(models.F('priority'), descending=True), models.F('scheduled_at'), models.F('id'), condition=models.Q(('gated', True), ('status', pgflow.core.states.StepStatus['SCHEDULED'])), name='pgflow_step_gated'),
        ),
        migrations.AddIndex(
            model_name='workflowrun',
            index=models.Index(condition=models.Q(('singleton_key__isnull', False), ('status__in', ['running', 'paused'])), fields=['workflow_class', 'singleton_key'], name='pgflow_run_singleton'),
        ),
    ]
