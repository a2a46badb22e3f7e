"""pgflow_run keeps room on each page (fillfactor 70) for the updates every step makes.

Each step's commit updates its run's row (current_step, updated_at). With full pages the new
version goes to another page, so it is written into every index of pgflow_run (fourteen, two
of them GIN); with room on the page, and no indexed column changed, PostgreSQL makes it a
heap-only tuple (HOT): no index entry at all. The run's last step changes its status and
finished_at, which are indexed, so two of a three-step run's three updates can be HOT.
benchmarks/RESULTS.md ("Issue 35, part F") has what it saves a step: 8 % of its WAL.

ALTER TABLE … SET (fillfactor) takes a SHARE UPDATE EXCLUSIVE lock, which blocks neither
reads nor writes, and rewrites nothing: pages written from now on keep the room; a VACUUM
FULL or pg_repack would give it to the older ones, which are mostly history.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("pgflow", "0016_search_indexes"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE pgflow_run SET (fillfactor = 70)",
            reverse_sql="ALTER TABLE pgflow_run RESET (fillfactor)",
        ),
    ]
