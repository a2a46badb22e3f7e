"""The runs inline's small timeline bar: each phase at its share of the run's span."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgflow_dashboard import runbar, timeline

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)


def test_each_phase_sits_at_its_share_of_the_run():
    steps = [
        {
            "step_name": "a",
            "attempt": 1,
            "status": "completed",
            "created_at": T0,
            "scheduled_at": T0,
            "started_at": T0 + 10 * S,
            "finished_at": T0 + 50 * S,
        },
        {
            "step_name": "b",
            "attempt": 1,
            "status": "failed",
            "created_at": T0 + 50 * S,
            "scheduled_at": T0 + 50 * S,
            "started_at": T0 + 50 * S,
            "finished_at": T0 + 100 * S,
        },
    ]
    pieces = runbar.pieces(T0, T0 + 100 * S, steps, now=T0 + 200 * S)
    assert [(p["series"], p["left"], p["width"]) for p in pieces] == [
        ("queued", 0.0, 10.0),
        ("ran_ok", 10.0, 40.0),
        ("ran_failed", 50.0, 50.0),
    ]
    assert pieces[1]["colour"] == timeline.SERIES["ran_ok"][0]
    assert pieces[2]["title"] == "b #1: ran: failed, 50s"


def test_a_phase_too_short_to_see_still_shows_and_nothing_leaves_the_bar():
    steps = [
        {
            "step_name": "a",
            "attempt": 1,
            "status": "completed",
            "created_at": T0,
            "scheduled_at": T0,
            "started_at": T0,
            "finished_at": T0 + S / 100,
        },
        {
            "step_name": "b",
            "attempt": 1,
            "status": "in_progress",
            "created_at": T0 + 999 * S,
            "scheduled_at": T0 + 999 * S,
            "started_at": T0 + 999 * S,
        },
    ]
    pieces = runbar.pieces(T0, T0 + 1000 * S, steps, now=T0 + 1000 * S)
    assert pieces[0]["width"] == runbar.MIN_WIDTH
    assert all(p["left"] + p["width"] <= 100.0 + runbar.MIN_WIDTH for p in pieces)
    assert pieces[-1]["series"] == "ran_open" and pieces[-1]["left"] <= 100 - runbar.MIN_WIDTH


def test_a_run_of_no_length_has_no_bar():
    assert runbar.pieces(T0, T0, [], now=T0) == []
