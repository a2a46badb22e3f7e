"""Durations as declared (a timedelta or a number of seconds), read as float seconds. Pure.

Below both :mod:`pgflow.core.definitions` and :mod:`pgflow.core.policy`, which read the
``wait``, ``timeout`` and ``wait_timeout`` options with it.
"""

from __future__ import annotations

import math
from datetime import timedelta


def seconds(value: object, option: str, *, positive: bool) -> float:
    """``value`` (a timedelta or a number of seconds) as float seconds.

    ``positive``: more than 0 is required; otherwise 0 or more. Anything else is a
    ValueError whose message names the option and what it accepts; callers declaring a
    workflow turn it into a :class:`~pgflow.exceptions.DefinitionError`.
    """
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        result = float(value)
    else:
        raise ValueError(f"{option} must be a timedelta or a number of seconds, got {value!r}")
    if not math.isfinite(result):
        raise ValueError(f"{option} must be a finite number of seconds, got {value!r}")
    if positive and result <= 0:
        raise ValueError(f"{option} must be more than 0 seconds, got {value!r}")
    if not positive and result < 0:
        raise ValueError(f"{option} must be 0 or more seconds, got {value!r}")
    return result
