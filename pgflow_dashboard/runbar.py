"""A run's small timeline bar, as the runs inline draws it: the run's span from its start to
its end (or now) as one bar, each attempt's phases placed on it at their share of the span,
coloured as the run page's chart colours them (:data:`timeline.SERIES`).

Pure: the run's start, end and attempt dicts (the ``Step`` field names, aware datetimes) in,
plain dicts out.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from . import timeline
from .timeformat import duration

MIN_WIDTH = 0.5  # percent: a phase too short to see still shows as a sliver


def pieces(
    started: datetime, ended: datetime, steps: Iterable[timeline.StepRow], *, now: datetime
) -> list[dict[str, Any]]:
    """``[{"series", "colour", "left", "width", "title"}]``: each phase of each attempt, with
    ``left`` and ``width`` in percent of the run's span (``started`` to ``ended``), oldest
    first. A run of no length, or with no attempts, has no pieces."""
    span = (ended - started).total_seconds()
    if span <= 0:
        return []
    drawn = []
    for step in sorted(steps, key=lambda step: (step["created_at"], int(step.get("attempt") or 0))):
        for segment in timeline.segments(step, now=now):
            series = timeline.series_for(segment["kind"], step)
            low = max(0.0, (segment["from"] - started).total_seconds() / span * 100)
            high = min(100.0, (segment["to"] - started).total_seconds() / span * 100)
            if high <= low and low >= 100:
                continue
            colour, label = timeline.SERIES[series]
            seconds = (segment["to"] - segment["from"]).total_seconds()
            drawn.append(
                {
                    "series": series,
                    "colour": colour,
                    "left": round(min(low, 100 - MIN_WIDTH), 2),
                    "width": round(max(high - low, MIN_WIDTH), 2),
                    "title": f"{step.get('step_name')} #{step.get('attempt')}: {label}, {duration(seconds)}",
                }
            )
    return drawn
