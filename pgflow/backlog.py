"""The backlog: the scheduled attempts, read along ``pgflow_step_due`` (the queue, then the due
time): which queues hold any, which have one due, and how many are due. The dashboard, the
alerts and the ``/metrics`` gauges read them so, one range of the index per queue; a bound on
``scheduled_at`` alone has no index to use and reads every scheduled row, a whole backlog of
future ones included. Plain SQL on the caller's cursor (the primary's, or
``PGFLOW["READ_DATABASE"]``'s): a foundation, below the features that read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db.backends.utils import CursorWrapper

# Every queue holding a scheduled attempt, one probe of pgflow_step_due each (it leads with the
# queue): a DISTINCT would read every scheduled row, a whole backlog.
_SCHEDULED = """
    WITH RECURSIVE queues(queue) AS (
        (SELECT queue FROM pgflow_step_live WHERE status = 'scheduled' ORDER BY queue LIMIT 1)
        UNION ALL
        SELECT (SELECT s.queue FROM pgflow_step_live s WHERE s.status = 'scheduled' AND s.queue > queues.queue
                ORDER BY s.queue LIMIT 1)
        FROM queues WHERE queues.queue IS NOT NULL
    )
    SELECT queue FROM queues WHERE queue IS NOT NULL
"""

# Of the queues given, those whose oldest scheduled attempt was due by then: the first entry
# of each in pgflow_step_due, whose second column is this expression.
_DUE_BY = """
    SELECT q.queue FROM unnest(%(queues)s::text[]) AS q(queue)
    WHERE EXISTS (SELECT 1 FROM pgflow_step_live s WHERE s.status = 'scheduled' AND s.queue = q.queue
                  AND timezone('UTC', s.scheduled_at) <= timezone('UTC', %(by)s::timestamptz))
    ORDER BY q.queue
"""

# The FROM of the scheduled attempts of %(queues)s due before %(before)s, read the way
# pgflow_step_due is built (the queue, then the due time as timezone('UTC', ...)): one range
# of the index per queue. A bound on scheduled_at alone has no index to use, and reads every
# scheduled row. Formatted with the subquery's ``columns``, a ``join`` (to pgflow_run as r, or
# ""), a ``where`` ("" or " AND ...") and an ``order`` ("" or its ORDER BY ... LIMIT).
DUE_BEFORE = """
    unnest(%(queues)s::text[]) AS q(queue) CROSS JOIN LATERAL (
        SELECT {columns} FROM pgflow_step_live s{join}
        WHERE s.status = 'scheduled' AND s.queue = q.queue
          AND timezone('UTC', s.scheduled_at) < timezone('UTC', %(before)s::timestamptz){where}
        {order}
    ) AS s
"""


def scheduled_queues(cursor: CursorWrapper) -> list[str]:
    """Every queue with an attempt scheduled, due or not, in order, read on ``cursor``'s database."""
    cursor.execute(_SCHEDULED)
    return [row[0] for row in cursor.fetchall()]


def due_by(cursor: CursorWrapper, queues: Sequence[str], by: datetime) -> list[str]:
    """Those of ``queues`` with an attempt due at ``by`` or before, in order."""
    if not queues:
        return []
    cursor.execute(_DUE_BY, {"queues": list(queues), "by": by})
    return [row[0] for row in cursor.fetchall()]


def count_due_before(cursor: CursorWrapper, queues: Sequence[str], before: datetime) -> int:
    """How many attempts of ``queues`` are scheduled and were due before ``before``."""
    cursor.execute(
        "SELECT count(*) FROM " + DUE_BEFORE.format(columns="1", join="", where="", order=""),
        {"queues": list(queues), "before": before},
    )
    return cursor.fetchone()[0]
