"""Times, durations and the timeline as the command line prints them: UTC moments to the
second, short durations (``"13ms"``, ``"45s"``, ``"2m 5s"``, ``"1h 2m"``, ``"1d 1h"``) and
one text bar per attempt. Pure."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

TIMELINE_WIDTH = 48  # columns of the text timeline's bars
# One character per phase on the text timeline; a paused run's columns read "P".
PHASE_CHARS = {"waited": ".", "throttled": "t", "queued": "q", "ran": "#", "waiting": "~"}
PAUSED_CHAR = "P"


def when(moment: datetime | None) -> str:
    """``2025-03-04 10:16:02 UTC``, or ``—`` for none."""
    if moment is None:
        return "—"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(value: float | timedelta | None) -> str:
    """A duration in at most two units: milliseconds under a second, tenths under 10 s."""
    if value is None:
        return "—"
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 10:
        return f"{seconds:.1f}s" if seconds % 1 else f"{int(seconds)}s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m {secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def timeline_lines(
    attempts: list[dict[str, Any]], paused: list[dict[str, datetime]], *, width: int = TIMELINE_WIDTH
) -> list[str]:
    """One bar a line per attempt across the run's span, each phase a character on the columns
    it overlaps (``.`` waited, ``t`` throttled, ``q`` queued, ``#`` ran, ``~`` waiting), and a
    line of the paused periods (``P``). ``attempts`` carry ``step_name``, ``attempt``,
    ``status`` and ``segments`` (``[{"kind", "from", "to"}]``)."""
    moments = [moment for a in attempts for s in a["segments"] for moment in (s["from"], s["to"])]
    moments += [moment for p in paused for moment in (p["from"], p["to"])]
    if not moments:
        return ["timeline: nothing yet"]
    start, end = min(moments), max(moments)
    span = (end - start).total_seconds()
    column = span / width if span > 0 else 0.0
    lines = [f"timeline: {when(start)} to {when(end)} ({duration(span)}; a column is {duration(column)})"]
    labels = [f"{a['step_name']} #{a['attempt']}" for a in attempts]
    pad = max([len(label) for label in labels] + [len("paused")])

    def bar(ranges: list[tuple[datetime, datetime, str]]) -> str:
        # Each phase takes the columns it overlaps, at least one (a 5 ms body in a two-day
        # wait still shows); the shorter of two phases sharing a column is drawn over the longer.
        cells = [" "] * width
        for low, high, char in sorted(ranges, key=lambda piece: piece[0] - piece[1]):
            if span <= 0:
                cells[0] = char
                continue
            first = min(width - 1, int((low - start).total_seconds() / column))
            last = max(first, min(width - 1, math.ceil((high - start).total_seconds() / column) - 1))
            for index in range(first, last + 1):
                cells[index] = char
        return "".join(cells)

    for label, attempt in zip(labels, attempts, strict=True):
        ranges = [(s["from"], s["to"], PHASE_CHARS[s["kind"]]) for s in attempt["segments"]]
        lines.append(f"  {label.ljust(pad)} |{bar(ranges)}| {attempt['status']}")
    if paused:
        lines.append(f"  {'paused'.ljust(pad)} |{bar([(p['from'], p['to'], PAUSED_CHAR) for p in paused])}|")
    legend = ", ".join(f"{char} {phase}" for phase, char in PHASE_CHARS.items())
    lines.append(f"  ({legend}, {PAUSED_CHAR} paused)")
    return lines
