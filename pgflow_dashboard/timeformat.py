"""Durations in words for the dashboard: the step table, the chart's tooltips, insights.

``duration(125)`` is ``"2m 5s"``. At most two units, the largest first, so a figure reads
at a glance whether it is seconds or days; the units below the second one are dropped,
not rounded into it (``7199`` is ``"1h 59m"``). A run of three seconds needs finer
figures than whole seconds, so below 10 seconds the value keeps up to two decimals
(``"0.25s"``, ``"1.5s"``); from 10 seconds on it is rounded to whole seconds. Pure.
"""

from __future__ import annotations

import math
from datetime import timedelta

NONE = "—"  # no duration: a phase the attempt never reached
FINE_BELOW = 10  # seconds: shorter durations keep hundredths of a second

# Largest first.
UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))


def duration(seconds: float | int | timedelta | None) -> str:
    """``45`` -> ``"45s"``, ``125`` -> ``"2m 5s"``, ``3720`` -> ``"1h 2m"``, ``90000`` -> ``"1d 1h"``.

    ``None`` is ``"—"``. A negative value (clock skew between hosts) reads ``"0s"``.
    A second unit of zero is left out: ``120`` is ``"2m"``, not ``"2m 0s"``.
    """
    if seconds is None:
        return NONE
    value = seconds.total_seconds() if isinstance(seconds, timedelta) else float(seconds)
    if value <= 0:
        return "0s"
    if round(value, 2) < FINE_BELOW:
        return f"{round(value, 2):g}s"
    total = math.floor(value + 0.5)  # whole seconds, half up as people round
    # The largest unit that fits, then the next one down when it is not zero.
    index = next(i for i, (_, size) in enumerate(UNITS) if total >= size)
    suffix, size = UNITS[index]
    count, rest = divmod(total, size)
    words = [f"{count}{suffix}"]
    if index + 1 < len(UNITS):
        next_suffix, next_size = UNITS[index + 1]
        if rest >= next_size:
            words.append(f"{rest // next_size}{next_suffix}")
    return " ".join(words)
