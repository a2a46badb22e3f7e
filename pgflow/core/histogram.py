"""Log-scale histograms of durations: mergeable counts per bucket, and percentiles from them.

The insights' p50/p95 must add up across hours (the rollup keeps one histogram per hour
and group, and a window merges them), which exact percentiles cannot do. A duration of
``d`` seconds is counted in bucket

- ``-1`` when ``d <= 0`` (an exact zero, e.g. a step with no ``wait``: estimated as 0);
- ``0`` when ``0 < d < FLOOR`` (under 1 ms);
- ``k >= 1`` when ``FLOOR * RATIO ** (k - 1) <= d < FLOOR * RATIO ** k``, ``RATIO = 2 ** (1/8)``:
  eight buckets per doubling, about 250 from 1 ms to a month.

A percentile follows PostgreSQL's ``percentile_cont`` (interpolating between the two
nearest ranks) with each rank's value estimated inside its bucket by linear interpolation
(the bucket's ``c`` values spread evenly across it). Each estimate stays inside the bucket
of the exact value, so it is within :data:`MAX_RELATIVE_ERROR` (``RATIO - 1``, 9.05 %) of
it, or within 1 ms for values under 1 ms; exact zeros stay exact.

Stored sparse as JSON objects ``{"<bucket>": count}``. :func:`sql_bucket` is the same rule
in SQL, so the database counts values into buckets and only the counts travel.
Pure: no Django, no database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

SUBDIVISIONS = 8  # buckets per doubling
RATIO = 2 ** (1 / SUBDIVISIONS)
FLOOR = 0.001  # seconds: the lower end of bucket 1
MAX_RELATIVE_ERROR = RATIO - 1  # 0.0905: the worst case for a percentile of 1 ms or more
ZERO = -1  # the bucket of exact zeros
_LN2 = math.log(2)

Histogram = dict[int, int]
K = TypeVar("K")


def bucket(seconds: float) -> int:
    """The bucket holding a duration of ``seconds``."""
    if seconds <= 0:
        return ZERO
    if seconds < FLOOR:
        return 0
    # Worded exactly as sql_bucket, so Python and PostgreSQL round the same way.
    return math.floor(SUBDIVISIONS * math.log(seconds / FLOOR) / _LN2) + 1


def bounds(key: int) -> tuple[float, float]:
    """``(low, high)``: the durations bucket ``key`` holds are ``low <= d < high`` (0, 0 for zeros)."""
    if key == ZERO:
        return 0.0, 0.0
    if key == 0:
        return 0.0, FLOOR
    return FLOOR * RATIO ** (key - 1), FLOOR * RATIO**key


def sql_bucket(seconds: str) -> str:
    """The SQL expression of :func:`bucket` for the float8 expression ``seconds`` (NULL stays NULL)."""
    return (
        f"CASE WHEN ({seconds}) <= 0 THEN {ZERO} WHEN ({seconds}) < {FLOOR!r} THEN 0 "
        f"ELSE floor({SUBDIVISIONS} * ln(({seconds}) / {FLOOR!r}) / ln(2))::int + 1 END"
    )


def of(values: Iterable[float]) -> Histogram:
    """The histogram of some durations."""
    counts: Histogram = {}
    for value in values:
        key = bucket(value)
        counts[key] = counts.get(key, 0) + 1
    return counts


def merge(into: dict[K, int], other: Mapping[K, int]) -> dict[K, int]:
    """Add ``other``'s counts to ``into`` (changed in place, and returned)."""
    for key, count in other.items():
        into[key] = into.get(key, 0) + count
    return into


def from_json(document: Mapping[str, Any]) -> Histogram:
    """A stored ``{"<bucket>": count}`` object as a histogram."""
    return {int(key): int(count) for key, count in document.items()}


def to_json(histogram: Mapping[int, int]) -> dict[str, int]:
    """The histogram as a JSON object, buckets in order, empty buckets left out."""
    return {str(key): histogram[key] for key in sorted(histogram) if histogram[key]}


def quantiles(histogram: Mapping[int, int], fractions: Sequence[float]) -> list[float | None]:
    """``percentile_cont`` of each fraction (0 to 1) of the counted durations, estimated
    (see the module docstring); ``None`` for each when nothing was counted."""
    keys = sorted(key for key, count in histogram.items() if count > 0)
    total = sum(histogram[key] for key in keys)
    if total == 0:
        return [None for _ in fractions]
    result: list[float | None] = []
    for fraction in fractions:
        if not 0 <= fraction <= 1:
            raise ValueError(f"a fraction must be between 0 and 1, got {fraction!r}")
        rank = fraction * (total - 1)
        below = math.floor(rank)
        low = _ranked(histogram, keys, below)
        high = low if below + 1 >= total else _ranked(histogram, keys, below + 1)
        result.append(low + (rank - below) * (high - low))
    return result


def _ranked(histogram: Mapping[int, int], keys: Sequence[int], rank: int) -> float:
    """The estimated value of the ``rank``-th smallest duration (0-based)."""
    seen = 0
    for key in keys:
        count = histogram[key]
        if rank < seen + count:
            low, high = bounds(key)
            # The bucket's values spread evenly: the m-th of c sits at the middle of its c-th.
            return low + (rank - seen + 0.5) / count * (high - low)
        seen += count
    raise AssertionError("rank beyond the histogram")  # quantiles keeps rank < total
