"""pgflow.core.filing: the day a row that ended at a moment or after may be filed under."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

from pgflow.core import filing


def test_the_first_day_is_the_moments_utc_date_whatever_its_zone():
    east = timezone(timedelta(hours=10))
    assert filing.first_day(datetime(2026, 12, 3, 8, 30, tzinfo=east)) == date(2026, 12, 2)
    assert filing.first_day(datetime(2026, 12, 3, 0, 0, tzinfo=UTC)) == date(2026, 12, 3)
    assert filing.first_day(datetime(2026, 12, 2, 23, 59, 59, tzinfo=UTC)) == date(2026, 12, 2)


def test_the_condition_keeps_the_live_rows_and_the_days_from_the_parameter():
    assert filing.filed_from("s.history_day", "day") == "(s.history_day IS NULL OR s.history_day >= %(day)s)"
