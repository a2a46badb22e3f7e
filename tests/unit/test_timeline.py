"""Where a run's time went: the phases of each attempt, the pauses, the chart payload."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from pgflow.core.states import RunStatus, StepStatus
from pgflow_dashboard import timeline

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
T0_MS = 1_735_732_800_000  # T0 in epoch milliseconds


def at(seconds: float | None) -> datetime | None:
    return None if seconds is None else T0 + timedelta(seconds=seconds)


def make_step(**fields):
    """A step dict with the Step field names; times given in seconds after T0."""
    times = ("created_at", "scheduled_at", "started_at", "finished_at", "waiting_since", "throttled_until")
    row = {"step_name": "send", "attempt": 1, "status": "completed", "outcome": None, "error_class": None}
    row.update({name: None for name in times})
    row["created_at"] = at(0)
    row.update({name: (at(value) if name in times else value) for name, value in fields.items()})
    return row


def make_events(*pairs):
    return [{"event": name, "created_at": at(seconds)} for name, seconds in pairs]


def spans(pieces):
    """Segments as (kind, from, to) with seconds after T0, for readable expectations."""
    return [(p["kind"], (p["from"] - T0).total_seconds(), (p["to"] - T0).total_seconds()) for p in pieces]


SEGMENT_CASES = {
    "plain: waited, queued, ran": (
        {"status": "completed", "scheduled_at": 10, "started_at": 15, "finished_at": 45},
        None,
        [("waited", 0, 10), ("queued", 10, 15), ("ran", 15, 45)],
    ),
    "plain, due at once: no waited": (
        {"status": "completed", "scheduled_at": 0, "started_at": 2, "finished_at": 5},
        None,
        [("queued", 0, 2), ("ran", 2, 5)],
    ),
    "parked on a batch, then completed": (
        {"status": "completed", "scheduled_at": 0, "started_at": 5, "waiting_since": 20, "finished_at": 100},
        None,
        [("queued", 0, 5), ("ran", 5, 20), ("waiting", 20, 100)],
    ),
    "parked and still waiting: waiting runs to now": (
        {"status": "waiting", "scheduled_at": 0, "started_at": 5, "waiting_since": 20},
        300,
        [("queued", 0, 5), ("ran", 5, 20), ("waiting", 20, 300)],
    ),
    "parked until its wait timed out": (
        {"status": "failed", "scheduled_at": 0, "started_at": 5, "waiting_since": 20, "finished_at": 80},
        None,
        [("queued", 0, 5), ("ran", 5, 20), ("waiting", 20, 80)],
    ),
    "signal step woken: waiting_since before scheduled_at": (
        {"status": "completed", "waiting_since": 30, "scheduled_at": 90, "started_at": 95, "finished_at": 100},
        None,
        [("waited", 0, 30), ("waiting", 30, 90), ("queued", 90, 95), ("ran", 95, 100)],
    ),
    "signal step woken and running: ran runs to now": (
        {"status": "in_progress", "waiting_since": 30, "scheduled_at": 90, "started_at": 95},
        120,
        [("waited", 0, 30), ("waiting", 30, 90), ("queued", 90, 95), ("ran", 95, 120)],
    ),
    "cancelled before its scheduled_at: clipped at finished_at": (
        {"status": "cancelled", "scheduled_at": 3600, "finished_at": 600},
        None,
        [("waited", 0, 600)],
    ),
    "cancelled while queued": (
        {"status": "cancelled", "scheduled_at": 10, "finished_at": 30},
        None,
        [("waited", 0, 10), ("queued", 10, 30)],
    ),
    "in progress: ran runs to now": (
        {"status": "in_progress", "scheduled_at": 0, "started_at": 2},
        10,
        [("queued", 0, 2), ("ran", 2, 10)],
    ),
    "due and unclaimed: queued runs to now": (
        {"status": "scheduled", "scheduled_at": 5},
        20,
        [("waited", 0, 5), ("queued", 5, 20)],
    ),
    "throttled by a limit, then queued for a worker": (
        {"status": "completed", "scheduled_at": 10, "throttled_until": 40, "started_at": 42, "finished_at": 50},
        None,
        [("waited", 0, 10), ("throttled", 10, 40), ("queued", 40, 42), ("ran", 42, 50)],
    ),
    "let through at once: no throttled phase": (
        {"status": "completed", "scheduled_at": 10, "throttled_until": 10, "started_at": 12, "finished_at": 20},
        None,
        [("waited", 0, 10), ("queued", 10, 12), ("ran", 12, 20)],
    ),
    "claimed as the place freed: throttled up to its start, no queued": (
        {"status": "in_progress", "scheduled_at": 0, "throttled_until": 30, "started_at": 30},
        40,
        [("throttled", 0, 30), ("ran", 30, 40)],
    ),
    "throttled_until past the start (another clock): cut at the start": (
        {"status": "completed", "scheduled_at": 0, "throttled_until": 31, "started_at": 30, "finished_at": 35},
        None,
        [("throttled", 0, 30), ("ran", 30, 35)],
    ),
    "held by a full gate, unclaimed: throttled runs to now": (
        {"status": "scheduled", "scheduled_at": 5, "held": True},
        20,
        [("waited", 0, 5), ("throttled", 5, 20)],
    ),
    "woken signal step, throttled after the wake": (
        {
            "status": "completed",
            "waiting_since": 30,
            "scheduled_at": 90,
            "throttled_until": 93,
            "started_at": 95,
            "finished_at": 100,
        },
        None,
        [("waited", 0, 30), ("waiting", 30, 90), ("throttled", 90, 93), ("queued", 93, 95), ("ran", 95, 100)],
    ),
    "throttled, ran, parked on a batch": (
        {"status": "waiting", "scheduled_at": 0, "throttled_until": 4, "started_at": 5, "waiting_since": 20},
        60,
        [("throttled", 0, 4), ("queued", 4, 5), ("ran", 5, 20), ("waiting", 20, 60)],
    ),
    "cancelled while throttled: clipped at finished_at": (
        {"status": "cancelled", "scheduled_at": 10, "held": True, "finished_at": 30},
        None,
        [("waited", 0, 10), ("throttled", 10, 30)],
    ),
    "not yet due: the wait shows up to scheduled_at": (
        {"status": "scheduled", "scheduled_at": 3600},
        600,
        [("waited", 0, 3600)],
    ),
    "closed without finished_at: no open end": (
        {"status": "failed", "scheduled_at": 0, "started_at": 5},
        50,
        [("queued", 0, 5)],
    ),
}


@pytest.mark.parametrize(("fields", "now", "expected"), SEGMENT_CASES.values(), ids=SEGMENT_CASES.keys())
def test_segments(fields, now, expected):
    # A "now" far later than any closed attempt shows closed attempts do not run to now.
    result = timeline.segments(make_step(**fields), now=at(now if now is not None else 10_000))
    assert spans(result) == expected


DURATION_CASES = {
    "plain": (
        {"status": "completed", "scheduled_at": 10, "started_at": 15, "finished_at": 45},
        None,
        {"waited": 10.0, "throttled": None, "queued": 5.0, "ran": 30.0, "waiting": None},
    ),
    "parked, still waiting": (
        {"status": "waiting", "scheduled_at": 0, "started_at": 5, "waiting_since": 20},
        300,
        {"waited": None, "throttled": None, "queued": 5.0, "ran": 15.0, "waiting": 280.0},
    ),
    "signal step woken": (
        {"status": "completed", "waiting_since": 30, "scheduled_at": 90, "started_at": 95, "finished_at": 100},
        None,
        {"waited": 30.0, "throttled": None, "queued": 5.0, "ran": 5.0, "waiting": 60.0},
    ),
    "in progress, sub-second queue": (
        {"status": "in_progress", "scheduled_at": 0, "started_at": 0.25},
        3,
        {"waited": None, "throttled": None, "queued": 0.25, "ran": 2.75, "waiting": None},
    ),
    "throttled, then ran": (
        {"status": "completed", "scheduled_at": 10, "throttled_until": 70, "started_at": 70.5, "finished_at": 80},
        None,
        {"waited": 10.0, "throttled": 60.0, "queued": 0.5, "ran": 9.5, "waiting": None},
    ),
    "cancelled before its scheduled_at": (
        {"status": "cancelled", "scheduled_at": 3600, "finished_at": 600},
        None,
        {"waited": 600.0, "throttled": None, "queued": None, "ran": None, "waiting": None},
    ),
}


@pytest.mark.parametrize(("fields", "now", "expected"), DURATION_CASES.values(), ids=DURATION_CASES.keys())
def test_durations(fields, now, expected):
    assert timeline.durations(make_step(**fields), now=at(now if now is not None else 10_000)) == expected


def test_durations_count_real_time_across_a_dst_change():
    # Europe/Berlin: 01:30 CET and 03:30 CEST on 2025-03-30 are one hour apart.
    berlin = ZoneInfo("Europe/Berlin")
    step = make_step(status="completed")
    step.update(
        created_at=datetime(2025, 3, 30, 1, 0, tzinfo=berlin),
        scheduled_at=datetime(2025, 3, 30, 1, 0, tzinfo=berlin),
        started_at=datetime(2025, 3, 30, 1, 30, tzinfo=berlin),
        finished_at=datetime(2025, 3, 30, 3, 30, tzinfo=berlin),
    )
    assert timeline.durations(step, now=T0) == {
        "waited": None,
        "throttled": None,
        "queued": 1800.0,
        "ran": 3600.0,
        "waiting": None,
    }


def test_naive_datetimes_are_refused():
    step = make_step(status="completed")
    step["created_at"] = datetime(2025, 1, 1, 12, 0)
    with pytest.raises(ValueError, match=r"^the timeline needs aware datetimes"):
        timeline.segments(step, now=T0)


PAUSE_CASES = {
    "closed by resumed": ([("paused", 10), ("resumed", 40)], "running", [(10, 40)]),
    "closed by cancelled": ([("paused", 10), ("cancelled", 40)], "cancelled", [(10, 40)]),
    "closed by finished": ([("paused", 10), ("finished", 40)], "finished", [(10, 40)]),
    "two pauses": ([("paused", 10), ("resumed", 20), ("paused", 30), ("resumed", 50)], "running", [(10, 20), (30, 50)]),
    "a second paused inside an open pause": ([("paused", 10), ("paused", 15), ("resumed", 40)], "running", [(10, 40)]),
    "other events do not end a pause": (
        [("started", 0), ("paused", 10), ("step_completed", 20), ("signal_received", 25), ("resumed", 40)],
        "running",
        [(10, 40)],
    ),
    "an end without a pause is ignored": ([("resumed", 5), ("paused", 10), ("resumed", 20)], "running", [(10, 20)]),
    "events in any order": ([("resumed", 40), ("started", 0), ("paused", 10)], "running", [(10, 40)]),
    "still open while paused: runs to now": ([("paused", 10)], "paused", [(10, 100)]),
    "still open, the run is not paused: dropped": ([("paused", 10)], "running", []),
    "still open, the run finished without its event: dropped": ([("paused", 10)], "finished", []),
    "one closed, one still open while paused": (
        [("paused", 10), ("resumed", 20), ("paused", 30)],
        "paused",
        [(10, 20), (30, 100)],
    ),
    "no events": ([], "paused", []),
}


@pytest.mark.parametrize(("pairs", "status", "expected"), PAUSE_CASES.values(), ids=PAUSE_CASES.keys())
def test_paused_periods(pairs, status, expected):
    periods = timeline.paused_periods(make_events(*pairs), status=status, now=at(100))
    assert [((p["from"] - T0).total_seconds(), (p["to"] - T0).total_seconds()) for p in periods] == expected


def test_paused_periods_take_the_status_enum():
    periods = timeline.paused_periods(make_events(("paused", 10)), status=RunStatus.PAUSED, now=at(100))
    assert periods == [{"from": at(10), "to": at(100)}]


def test_chart_payload():
    steps = [
        make_step(step_name="charge", attempt=2, status="in_progress", created_at=10, scheduled_at=25, started_at=26),
        make_step(
            step_name="send_welcome",
            attempt=1,
            status="completed",
            outcome="completed",
            scheduled_at=0,
            started_at=1,
            finished_at=3.5,
        ),
        make_step(
            step_name="charge",
            attempt=1,
            status="failed",
            outcome="reattempted",
            error_class="ConnectionError",
            created_at=3.5,
            scheduled_at=3.5,
            started_at=4,
            finished_at=10,
        ),
    ]
    events = make_events(("started", 0), ("paused", 10), ("resumed", 20))

    payload = timeline.chart(steps, events, status="running", now=at(40))

    assert payload == {
        "rows": [
            {
                "label": "send_welcome #1",
                "status": "completed",
                "outcome": "completed",
                "error_class": None,
                "segments": [
                    {
                        "kind": "queued",
                        "series": "queued",
                        "from": 1_735_732_800_000,
                        "to": 1_735_732_801_000,
                        "duration": "1s",
                    },
                    {
                        "kind": "ran",
                        "series": "ran_ok",
                        "from": 1_735_732_801_000,
                        "to": 1_735_732_803_500,
                        "duration": "2.5s",
                    },
                ],
            },
            {
                "label": "charge #1",
                "status": "failed",
                "outcome": "reattempted",
                "error_class": "ConnectionError",
                "segments": [
                    {
                        "kind": "queued",
                        "series": "queued",
                        "from": 1_735_732_803_500,
                        "to": 1_735_732_804_000,
                        "duration": "0.5s",
                    },
                    {
                        "kind": "ran",
                        "series": "ran_failed",
                        "from": 1_735_732_804_000,
                        "to": 1_735_732_810_000,
                        "duration": "6s",
                    },
                ],
            },
            {
                "label": "charge #2",
                "status": "in_progress",
                "outcome": None,
                "error_class": None,
                "segments": [
                    {
                        "kind": "waited",
                        "series": "waited",
                        "from": 1_735_732_810_000,
                        "to": 1_735_732_825_000,
                        "duration": "15s",
                    },
                    {
                        "kind": "queued",
                        "series": "queued",
                        "from": 1_735_732_825_000,
                        "to": 1_735_732_826_000,
                        "duration": "1s",
                    },
                    {
                        "kind": "ran",
                        "series": "ran_open",
                        "from": 1_735_732_826_000,
                        "to": 1_735_732_840_000,
                        "duration": "14s",
                    },
                ],
            },
        ],
        "paused": [
            {
                "kind": "paused",
                "series": "paused",
                "from": 1_735_732_810_000,
                "to": 1_735_732_820_000,
                "duration": "10s",
            }
        ],
    }
    assert json.loads(json.dumps(payload)) == payload


def test_chart_of_a_parked_step_and_a_still_open_pause():
    steps = [make_step(step_name="notify", status="waiting", scheduled_at=0, started_at=1, waiting_since=2)]
    payload = timeline.chart(steps, make_events(("paused", 30)), status="paused", now=at(2 * 86400 + 3600 + 2))
    assert [(s["series"], s["duration"]) for s in payload["rows"][0]["segments"]] == [
        ("queued", "1s"),
        ("ran_open", "1s"),
        ("waiting", "2d 1h"),
    ]
    assert [(p["from"], p["duration"]) for p in payload["paused"]] == [
        (T0_MS + 30_000, "2d")
    ]  # 2d 0h 59m 32s: two units, the zero hour dropped


def test_chart_rows_of_one_instant_are_ordered_by_attempt():
    steps = [make_step(step_name="x", attempt=attempt, status="skipped") for attempt in (10, 2, 1)]
    assert [row["label"] for row in timeline.chart(steps, [], status="running", now=at(5))["rows"]] == [
        "x #1",
        "x #2",
        "x #10",
    ]


def test_a_fan_out_waiting_on_child_runs_is_its_own_series_and_counts_them():
    parked = {"scheduled_at": 0, "started_at": 1, "waiting_since": 2}
    steps = [
        make_step(step_name="spread", status="waiting", children={"total": 3, "ended": 1}, **parked),
        make_step(step_name="tasks", status="waiting", created_at=1, **{**parked, "scheduled_at": 1}),
        make_step(
            step_name="one",
            status="completed",
            created_at=2,
            children={"total": 1, "ended": 1},
            finished_at=9,
            **{**parked, "scheduled_at": 2, "started_at": 3, "waiting_since": 4},
        ),
    ]
    rows = timeline.chart(steps, [], status="running", now=at(10))["rows"]
    spread, tasks, one = (row["segments"][-1] for row in rows)
    assert spread == {
        "kind": "waiting",
        "series": "waiting_children",
        "from": T0_MS + 2_000,
        "to": T0_MS + 10_000,
        "duration": "8s",
        "note": "waiting for 3 child runs (1 ended)",
    }
    # A batch of django-q2 tasks only keeps the plain waiting series, with no note.
    assert (tasks["series"], "note" in tasks) == ("waiting", False)
    assert (one["series"], one["note"], one["duration"]) == (
        "waiting_children",
        "waiting for 1 child run (1 ended)",
        "5s",
    )
    # Only the waiting phase is the batch's: the body's phases keep their series.
    assert [s["series"] for s in rows[0]["segments"]] == ["queued", "ran_open", "waiting_children"]
    # The step table's durations still count it as waiting.
    assert timeline.durations(steps[0], now=at(10))["waiting"] == 8.0


@pytest.mark.parametrize(
    ("status", "series"),
    [
        ("completed", "ran_ok"),
        ("skipped", "ran_ok"),
        ("failed", "ran_failed"),
        ("in_progress", "ran_open"),
        ("waiting", "ran_open"),
        ("cancelled", "ran_cancelled"),
        ("scheduled", "ran_cancelled"),  # a ran phase on a re-scheduled attempt: its worker was lost
        (StepStatus.FAILED, "ran_failed"),
    ],
)
def test_ran_is_coloured_by_how_the_attempt_ended(status, series):
    step = make_step(status=status, scheduled_at=0, started_at=1, finished_at=None)
    if str(status) not in timeline.OPEN:
        step["finished_at"] = at(4)
    row = timeline.chart([step], [], status="running", now=at(4))["rows"][0]
    assert row["segments"][-1] == {
        "kind": "ran",
        "series": series,
        "from": T0_MS + 1_000,
        "to": T0_MS + 4_000,
        "duration": "3s",
    }
    assert type(row["status"]) is str and row["status"] == str(status)


@pytest.mark.parametrize(
    ("moment", "millis"),
    [
        (datetime(1970, 1, 1, tzinfo=UTC), 0),
        (T0, T0_MS),
        (datetime(2025, 1, 1, 12, 0, 0, 123_456, tzinfo=UTC), T0_MS + 123),
        (datetime(2025, 1, 1, 12, 0, 0, 499, tzinfo=UTC), T0_MS),
        (datetime(2025, 1, 1, 12, 0, 0, 500, tzinfo=UTC), T0_MS + 1),
        (datetime(2025, 1, 1, 12, 0, 0, 999_600, tzinfo=UTC), T0_MS + 1_000),
        # The same instant in another zone is the same number.
        (datetime(2025, 1, 1, 17, 30, tzinfo=timezone(timedelta(hours=5, minutes=30))), T0_MS),
    ],
)
def test_epoch_milliseconds(moment, millis):
    assert timeline.millis(moment) == millis
    assert type(timeline.millis(moment)) is int


def test_series_legend():
    assert list(timeline.SERIES) == [
        "waited",
        "throttled",
        "queued",
        "ran_ok",
        "ran_failed",
        "ran_open",
        "ran_cancelled",
        "waiting",
        "waiting_children",
        "paused",
    ]
    colours = [colour for colour, _ in timeline.SERIES.values()]
    assert len(set(colours)) == len(colours)
    assert all(len(c) == 7 and c.startswith("#") and int(c[1:], 16) >= 0 for c in colours)
    assert timeline.legend()[3] == {
        "series": "ran_ok",
        "colour": timeline.SERIES["ran_ok"][0],
        "label": "ran: completed or skipped",
    }
    assert len(timeline.legend()) == len(timeline.SERIES)
    assert {"series": "waiting_children", "colour": "#0e7490", "label": "waiting for child runs"} in timeline.legend()


def test_every_series_the_chart_can_emit_has_a_colour():
    emitted = {
        "waited",
        "throttled",
        "queued",
        "waiting",
        "waiting_children",
        "paused",
        "ran_cancelled",
        *timeline.RAN_SERIES.values(),
    }
    assert emitted == set(timeline.SERIES)
