"""The insights window: choices, the default, capping by retention, buckets, Invalid."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from pgflow_dashboard.window import WorkflowWindow

NOW = datetime(2025, 3, 10, 12, 7, 30, tzinfo=UTC)
THIRTY_DAYS = timedelta(days=30)


@pytest.mark.parametrize(
    ("value", "retention", "expected"),
    [
        # The default, whatever way "no choice" arrives.
        (None, THIRTY_DAYS, {"name": "24h", "seconds": 86_400, "bucket_seconds": 3_600, "capped": False}),
        ("", THIRTY_DAYS, {"name": "24h", "seconds": 86_400, "bucket_seconds": 3_600, "capped": False}),
        # Every choice within the default retention.
        ("1h", THIRTY_DAYS, {"name": "1h", "seconds": 3_600, "bucket_seconds": 300, "capped": False}),
        ("24h", THIRTY_DAYS, {"name": "24h", "seconds": 86_400, "bucket_seconds": 3_600, "capped": False}),
        ("7d", THIRTY_DAYS, {"name": "7d", "seconds": 604_800, "bucket_seconds": 21_600, "capped": False}),
        ("30d", THIRTY_DAYS, {"name": "30d", "seconds": 2_592_000, "bucket_seconds": 86_400, "capped": False}),
        # No retention: nothing is purged, nothing is capped.
        ("30d", None, {"name": "30d", "seconds": 2_592_000, "bucket_seconds": 86_400, "capped": False}),
        # A retention longer than the window, or exactly as long, caps nothing.
        ("30d", timedelta(days=90), {"name": "30d", "seconds": 2_592_000, "bucket_seconds": 86_400, "capped": False}),
        ("7d", timedelta(days=7), {"name": "7d", "seconds": 604_800, "bucket_seconds": 21_600, "capped": False}),
        # Capped: the length is the retention's, the bucket the shortest covering choice's.
        ("30d", timedelta(days=7), {"name": "30d", "seconds": 604_800, "bucket_seconds": 21_600, "capped": True}),
        ("7d", timedelta(days=3), {"name": "7d", "seconds": 259_200, "bucket_seconds": 21_600, "capped": True}),
        ("30d", timedelta(days=1), {"name": "30d", "seconds": 86_400, "bucket_seconds": 3_600, "capped": True}),
        ("24h", timedelta(hours=2), {"name": "24h", "seconds": 7_200, "bucket_seconds": 3_600, "capped": True}),
        ("24h", timedelta(minutes=30), {"name": "24h", "seconds": 1_800, "bucket_seconds": 300, "capped": True}),
        ("1h", timedelta(minutes=30), {"name": "1h", "seconds": 1_800, "bucket_seconds": 300, "capped": True}),
        # Retention in seconds, fractions dropped.
        ("1h", 1_800.9, {"name": "1h", "seconds": 1_800, "bucket_seconds": 300, "capped": True}),
    ],
)
def test_parse(value, retention, expected):
    window = WorkflowWindow.parse(value, retention=retention, now=NOW)
    assert window.to_dict() == expected
    assert (window.name, window.seconds, window.bucket_seconds, window.capped) == tuple(expected.values())
    assert window.now == NOW


@pytest.mark.parametrize("value", ["2h", "24H", " 24h", "1d", "30 days", "24h\n", 24, ["24h"]])
def test_anything_else_is_invalid_and_names_the_choices(value):
    with pytest.raises(WorkflowWindow.Invalid) as raised:
        WorkflowWindow.parse(value, retention=THIRTY_DAYS, now=NOW)
    assert str(raised.value) == f"unknown window {value!r} (one of 1h, 24h, 7d, 30d)"


def test_invalid_is_a_value_error():
    assert issubclass(WorkflowWindow.Invalid, ValueError)


def test_invalid_message_quotes_the_value():
    with pytest.raises(WorkflowWindow.Invalid, match=r"^unknown window 'x' \(one of 1h, 24h, 7d, 30d\)$"):
        WorkflowWindow.parse("x", retention=None, now=NOW)


def test_constructing_an_unknown_name_is_invalid_too():
    with pytest.raises(WorkflowWindow.Invalid, match=r"^unknown window '90d' "):
        WorkflowWindow("90d", retention=None, now=NOW)


def test_now_must_be_aware():
    with pytest.raises(ValueError, match=r"^now must be an aware datetime"):
        WorkflowWindow.parse("1h", retention=None, now=datetime(2025, 3, 10, 12, 0))


def test_choices_and_default():
    assert dict(WorkflowWindow.CHOICES) == {
        "1h": (3_600, 300),
        "24h": (86_400, 3_600),
        "7d": (604_800, 21_600),
        "30d": (2_592_000, 86_400),
    }
    assert WorkflowWindow.DEFAULT == "24h"


@pytest.mark.parametrize(
    ("value", "retention", "reference", "since"),
    [
        ("24h", THIRTY_DAYS, None, datetime(2025, 3, 9, 12, 7, 30, tzinfo=UTC)),
        ("1h", THIRTY_DAYS, None, datetime(2025, 3, 10, 11, 7, 30, tzinfo=UTC)),
        ("30d", timedelta(days=7), None, datetime(2025, 3, 3, 12, 7, 30, tzinfo=UTC)),
        # Another reference point (the previous period, for a comparison).
        (
            "24h",
            THIRTY_DAYS,
            datetime(2025, 3, 9, 12, 7, 30, tzinfo=UTC),
            datetime(2025, 3, 8, 12, 7, 30, tzinfo=UTC),
        ),
    ],
)
def test_since(value, retention, reference, since):
    assert WorkflowWindow.parse(value, retention=retention, now=NOW).since(reference) == since


def test_the_window_is_frozen():
    window = WorkflowWindow.parse("1h", retention=None, now=NOW)
    with pytest.raises(dataclasses.FrozenInstanceError):
        window.seconds = 60  # type: ignore[misc]


def test_windows_with_the_same_values_are_equal():
    assert WorkflowWindow.parse(None, retention=THIRTY_DAYS, now=NOW) == WorkflowWindow("24h", retention=None, now=NOW)


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "retention", "count", "first", "last"),
    [
        # 11:07:30 .. 12:07:30 by 5 minutes: 11:05 .. 12:05.
        ("1h", None, 13, _utc(2025, 3, 10, 11, 5), _utc(2025, 3, 10, 12, 5)),
        ("24h", None, 25, _utc(2025, 3, 9, 12), _utc(2025, 3, 10, 12)),
        # 2025-03-03 12:07:30 .. by 6 hours, from 12:00 UTC.
        ("7d", None, 29, _utc(2025, 3, 3, 12), _utc(2025, 3, 10, 12)),
        # By day, days starting at midnight UTC: the most a window holds.
        ("30d", None, 31, _utc(2025, 2, 8), _utc(2025, 3, 10)),
        # Capped at 3 days, with the 7d window's 6-hour bucket.
        ("30d", timedelta(days=3), 13, _utc(2025, 3, 7, 12), _utc(2025, 3, 10, 12)),
    ],
)
def test_buckets(value, retention, count, first, last):
    buckets = WorkflowWindow.parse(value, retention=retention, now=NOW).buckets()
    assert (len(buckets), buckets[0], buckets[-1]) == (count, first, last)
    steps = {later - earlier for earlier, later in zip(buckets, buckets[1:], strict=False)}
    assert steps == {timedelta(seconds=WorkflowWindow.parse(value, retention=retention, now=NOW).bucket_seconds)}


def test_buckets_when_now_is_on_a_bucket_boundary():
    buckets = WorkflowWindow.parse("1h", retention=None, now=_utc(2025, 3, 10, 12)).buckets()
    assert (len(buckets), buckets[0], buckets[-1]) == (13, _utc(2025, 3, 10, 11), _utc(2025, 3, 10, 12))


def test_buckets_are_in_the_timezone_of_now_and_step_in_real_time_across_dst():
    # Europe/Berlin springs forward at 02:00 local (01:00 UTC) on 2025-03-30.
    now = datetime(2025, 3, 30, 4, 30, tzinfo=ZoneInfo("Europe/Berlin"))  # 02:30 UTC
    buckets = WorkflowWindow.parse("24h", retention=None, now=now).buckets()
    assert len(buckets) == 25
    assert [b.isoformat() for b in buckets[-3:]] == [
        "2025-03-30T01:00:00+01:00",  # 00:00 UTC
        "2025-03-30T03:00:00+02:00",  # 01:00 UTC: the local hour 02:00 never happened
        "2025-03-30T04:00:00+02:00",  # 02:00 UTC, holds now
    ]


def test_bucket_start_aligns_to_the_epoch_not_to_local_midnight():
    now = datetime(2025, 3, 10, 23, 30, tzinfo=timezone(timedelta(hours=5)))  # 18:30 UTC
    window = WorkflowWindow.parse("30d", retention=None, now=now)
    assert window.bucket_start(now).isoformat() == "2025-03-10T05:00:00+05:00"


def test_since_counts_real_seconds_across_dst():
    now = datetime(2025, 3, 30, 4, 30, tzinfo=ZoneInfo("Europe/Berlin"))  # 02:30 UTC, after the change
    since = WorkflowWindow.parse("24h", retention=None, now=now).since()
    assert since.isoformat() == "2025-03-29T03:30:00+01:00"  # 02:30 UTC the day before
