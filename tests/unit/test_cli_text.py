"""The command line's text (pgflow.cli.text): durations and the timeline as text bars. No database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgflow.cli.text import duration, timeline_lines, when

T0 = datetime(2025, 3, 4, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "—"),
        (0.013, "13ms"),
        (2.5, "2.5s"),
        (3, "3s"),
        (45, "45s"),
        (125, "2m 5s"),
        (3720, "1h 2m"),
        (90000, "1d 1h"),
    ],
)
def test_durations(seconds, shown):
    assert duration(seconds) == shown


def test_when_is_utc_to_the_second():
    assert when(T0 + timedelta(seconds=2.7)) == "2025-03-04 10:00:02 UTC"
    assert when(None) == "—"


def _attempt(name, status, *segments):
    return {
        "step_name": name,
        "attempt": 1,
        "status": status,
        "segments": [
            {"kind": kind, "from": T0 + timedelta(seconds=a), "to": T0 + timedelta(seconds=b)}
            for kind, a, b in segments
        ],
    }


def test_the_timeline_draws_each_phase_on_the_columns_it_covers():
    attempts = [
        _attempt("reserve", "completed", ("queued", 0, 2), ("ran", 2, 4)),
        _attempt("charge", "waiting", ("ran", 4, 4.001), ("waiting", 4.001, 8)),
    ]
    lines = timeline_lines(attempts, [], width=8)
    assert lines[0] == "timeline: 2025-03-04 10:00:00 UTC to 2025-03-04 10:00:08 UTC (8s; a column is 1s)"
    assert lines[1] == "  reserve #1 |qq##    | completed"
    assert lines[2] == "  charge #1  |    #~~~| waiting"  # a 1 ms body still takes a column
    assert lines[-1].startswith("  (. waited, t throttled, q queued, # ran, ~ waiting, P paused")


def test_paused_periods_have_their_own_line_and_an_empty_run_says_so():
    attempts = [_attempt("reserve", "failed", ("ran", 0, 1))]
    lines = timeline_lines(attempts, [{"from": T0 + timedelta(seconds=1), "to": T0 + timedelta(seconds=4)}], width=4)
    assert lines[1:3] == ["  reserve #1 |#   | failed", "  paused     | PPP|"]
    assert timeline_lines([], []) == ["timeline: nothing yet"]
