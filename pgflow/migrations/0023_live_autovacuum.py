"""The tables every run passes through get autovacuum settings of their own: ``pgflow_run``,
``pgflow_step_live`` and ``pgflow_event_live``.

Each ended run leaves dead rows in all three: the filing moves its attempts and events out of
the live partitions (an UPDATE of the partition key is a DELETE there), and retention deletes
its run row. On PostgreSQL's defaults a pass over them is throttled
(``autovacuum_vacuum_cost_limit`` 200 per 2 ms) and starts once a fifth of the table is dead:
with 5,000 runs ending a second the passes came late and irregularly, dead rows reached
nearly twice the live ones, and the tables grew to 1.3-1.6 times the size they keep with
these settings before the passes caught up (benchmarks/RESULTS.md, "Issue 38: autovacuum settings of their own, sustained").

Here a pass is not throttled (``autovacuum_vacuum_cost_delay = 0``, as a manual VACUUM runs)
and starts at 2 % dead rows: each table is vacuumed at every ``autovacuum_naptime`` (a minute
by default) that finds work, its dead rows go back to nothing each time, and its size stays
flat. An unthrottled pass costs CPU and I/O while it runs; on a quiet installation there is
nothing for it to do.

ALTER TABLE … SET takes a SHARE UPDATE EXCLUSIVE lock, which blocks neither reads nor writes,
and rewrites nothing. A DBA's own settings for these tables are replaced; going back RESETs
the three to the server's.
"""

from django.db import migrations

TABLES = ("pgflow_run", "pgflow_step_live", "pgflow_event_live")
SETTINGS = {
    "autovacuum_vacuum_cost_delay": "0",
    "autovacuum_vacuum_scale_factor": "0.02",
    "autovacuum_analyze_scale_factor": "0.05",
}


class Migration(migrations.Migration):
    dependencies = [
        ("pgflow", "0022_owned_rows_unchecked"),
    ]

    operations = [
        migrations.RunSQL(
            [f"ALTER TABLE {table} SET ({', '.join(f'{k} = {v}' for k, v in SETTINGS.items())})" for table in TABLES],
            reverse_sql=[f"ALTER TABLE {table} RESET ({', '.join(SETTINGS)})" for table in TABLES],
        ),
    ]
