"""The insights' approval waits: per approval step, how long its decisions took (p50/p95, exact
from each attempt's rows, as the schedules' lag is) and how many wait now.

A wait runs from the attempt parking (``waiting_since``) to its decision waking it
(``scheduled_at``), or to now while it still waits; counted are the waits decided in the
window and those open now. Which steps are approvals is read from each class's definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgflow import readdb
from pgflow.core import filing
from pgflow.exceptions import WorkflowNotFound
from pgflow.registry import resolve

from .window import WorkflowWindow

_WAITS = """
SELECT r.workflow_class, s.step_name,
       count(*) FILTER (WHERE s.status <> 'waiting'),
       count(*) FILTER (WHERE s.status = 'waiting'),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM
           (CASE WHEN s.status = 'waiting' THEN %(now)s ELSE s.scheduled_at END) - s.waiting_since)),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM
           (CASE WHEN s.status = 'waiting' THEN %(now)s ELSE s.scheduled_at END) - s.waiting_since))
FROM pgflow_step s JOIN pgflow_run r ON r.id = s.run_id
WHERE s.waiting_since IS NOT NULL AND s.batch_id IS NULL AND {filed}
  AND (s.status = 'waiting'
       OR (s.waiting_since < s.scheduled_at AND s.scheduled_at >= %(since)s AND s.scheduled_at <= %(now)s)){tenants}
GROUP BY r.workflow_class, s.step_name
ORDER BY r.workflow_class, s.step_name
"""


def approval_waits(window: WorkflowWindow, *, tenants: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Per approval step: ``decided`` in the window, ``waiting`` now, ``p50_seconds`` / ``p95_seconds``;
    with ``tenants``, of those tenants' runs only."""
    mine = "" if tenants is None else " AND r.tenant = ANY(%(tenants)s)"
    with readdb.connection().cursor() as cursor:  # the replica inside readdb.reading()
        cursor.execute(
            _WAITS.format(tenants=mine, filed=filing.filed_from("s.history_day", "day")),
            {
                "since": window.since(),
                "now": window.now,
                # An attempt scheduled in the window ended in it or after: the days before are left out.
                "day": filing.first_day(window.since()),
                "tenants": list(tenants or ()),
            },
        )
        rows = cursor.fetchall()
    found = []
    for path, step, decided, waiting, p50, p95 in rows:
        if not _is_approval(path, step):
            continue
        found.append(
            {
                "workflow_class": path,
                "step_name": step,
                "decided": decided,
                "waiting": waiting,
                "p50_seconds": None if p50 is None else max(0.0, float(p50)),
                "p95_seconds": None if p95 is None else max(0.0, float(p95)),
            }
        )
    return found


def _is_approval(path: str, step: str) -> bool:
    try:
        definition = resolve(path).steps().get(step)
    except WorkflowNotFound:
        return False
    return definition is not None and definition.approval is not None
