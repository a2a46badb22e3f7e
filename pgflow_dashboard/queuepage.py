"""What the Queues page shows: each queue's figures, read from the step, worker and queue
state rows. Reads only; pausing and resuming go through ``pgflow.pause_queue`` /
``pgflow.resume_queue``.

A queue is listed while it has attempts scheduled or in progress, a live worker serves it,
or it has a ``QueueState`` row (it was paused once: the row keeps who did what last).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pgflow.db import connection
from pgflow.models import QueueState, Worker

# One scan of the open attempts (the claim indexes cover scheduled rows): per queue, the due
# ones, the oldest due time, and those in progress. Open attempts are in the live partition
# only (pgflow.store.history): the parent would also scan every day of history.
_OPEN_SQL = """
    SELECT queue,
           count(*) FILTER (WHERE status = 'scheduled' AND scheduled_at <= %(now)s),
           min(scheduled_at) FILTER (WHERE status = 'scheduled' AND scheduled_at <= %(now)s),
           count(*) FILTER (WHERE status = 'in_progress')
    FROM pgflow_step_live WHERE status IN ('scheduled', 'in_progress') GROUP BY queue
"""


def queues(now: datetime) -> list[dict[str, Any]]:
    """``[{"queue", "due", "oldest_due_age", "in_progress", "workers", "paused", "changed_by",
    "changed_at"}]`` by queue name; ages in seconds (None with nothing due)."""
    with connection.cursor() as cursor:
        cursor.execute(_OPEN_SQL, {"now": now})
        open_by_queue = {queue: (due, oldest, running) for queue, due, oldest, running in cursor.fetchall()}
    workers: dict[str, int] = {}
    for served in Worker.objects.live(now).values_list("queues", flat=True):
        for queue in served or ():
            workers[queue] = workers.get(queue, 0) + 1
    states = {state.queue: state for state in QueueState.objects.all()}
    rows = []
    for queue in sorted(set(open_by_queue) | set(workers) | set(states)):
        due, oldest, running = open_by_queue.get(queue, (0, None, 0))
        state = states.get(queue)
        rows.append(
            {
                "queue": queue,
                "due": due,
                "oldest_due_age": None if oldest is None else max((now - oldest).total_seconds(), 0.0),
                "in_progress": running,
                "workers": workers.get(queue, 0),
                "paused": bool(state and state.paused),
                "changed_by": state.changed_by if state else None,
                "changed_at": state.changed_at if state else None,
            }
        )
    return rows
