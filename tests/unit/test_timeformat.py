"""Durations in words, as the step table and the chart's tooltips print them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgflow_dashboard.timeformat import duration


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        # API.md's examples.
        (45, "45s"),
        (125, "2m 5s"),
        (3720, "1h 2m"),
        (90000, "1d 1h"),
        # Nothing, nothing at all, less than nothing (clock skew).
        (None, "—"),
        (0, "0s"),
        (0.0, "0s"),
        (-5, "0s"),
        (-0.25, "0s"),
        # Below 10 seconds: hundredths, trailing zeros dropped.
        (0.004, "0s"),
        (0.01, "0.01s"),
        (0.25, "0.25s"),
        (1.5, "1.5s"),
        (3, "3s"),
        (9.99, "9.99s"),
        (9.996, "10s"),
        # From 10 seconds: whole seconds, rounded half up.
        (10, "10s"),
        (45.4, "45s"),
        (45.5, "46s"),
        (59, "59s"),
        (59.6, "1m"),
        # Exact unit boundaries drop a zero second unit.
        (60, "1m"),
        (61, "1m 1s"),
        (120, "2m"),
        (3599, "59m 59s"),
        (3600, "1h"),
        (3660, "1h 1m"),
        (86399, "23h 59m"),
        (86400, "1d"),
        (90060, "1d 1h"),
        # Two units at most: the third is dropped, not rounded into the second.
        (3601, "1h"),
        (3661, "1h 1m"),
        (7199, "1h 59m"),
        (90061, "1d 1h"),
        (30 * 86400 + 3 * 3600 + 59 * 60, "30d 3h"),
        (400 * 86400, "400d"),
    ],
)
def test_duration_in_words(seconds, words):
    assert duration(seconds) == words


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (timedelta(minutes=2, seconds=5), "2m 5s"),
        (timedelta(milliseconds=250), "0.25s"),
        (timedelta(days=1, hours=1, minutes=30), "1d 1h"),
        (timedelta(seconds=-3), "0s"),
        (timedelta(0), "0s"),
    ],
)
def test_duration_of_a_timedelta(value, words):
    assert duration(value) == words
