"""pgflow.core.ticks: tick arithmetic, DST days in two zones, catch-up and overlap, no database."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

import pgflow
from pgflow.core import ticks
from pgflow.core.ticks import Rule, plan

AMS = ZoneInfo("Europe/Amsterdam")
NY = ZoneInfo("America/New_York")


def local_ticks(rule: Rule, start: datetime, end: datetime, zone: ZoneInfo) -> list[datetime]:
    out = []
    for tick in ticks.walk(rule, start):
        if tick >= end:
            return out
        out.append(tick.astimezone(zone))
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("zone", "day"), [("Europe/Amsterdam", datetime(2025, 3, 30)), ("America/New_York", datetime(2025, 3, 9))]
)
def test_spring_forward_day_runs_a_2am_job_once(zone, day):
    tz = ZoneInfo(zone)
    rule = Rule(cron="0 2 * * *", timezone=zone)
    start = day.replace(tzinfo=tz) - timedelta(hours=12)
    found = local_ticks(rule, start, start + timedelta(days=3), tz)
    on_the_day = [t for t in found if t.date() == day.date()]
    assert len(on_the_day) == 1
    assert on_the_day[0].hour == 3  # 02:00 does not exist that day; the first valid minute after it
    assert [t.hour for t in found] == [3, 2, 2]


@pytest.mark.parametrize(
    ("zone", "day"), [("Europe/Amsterdam", datetime(2025, 10, 26)), ("America/New_York", datetime(2025, 11, 2))]
)
def test_fall_back_day_runs_a_job_in_the_repeated_hour_once(zone, day):
    tz = ZoneInfo(zone)
    hour = 2 if zone == "Europe/Amsterdam" else 1  # the hour that happens twice
    rule = Rule(cron=f"30 {hour} * * *", timezone=zone)
    start = day.replace(tzinfo=tz) - timedelta(hours=12)
    found = local_ticks(rule, start, start + timedelta(days=3), tz)
    assert [t.date() for t in found] == [day.date(), (day + timedelta(days=1)).date(), (day + timedelta(days=2)).date()]
    assert all((t.hour, t.minute) == (hour, 30) for t in found)
    # One day lasts 25 hours: the ticks are 25 h then 24 h apart in real time.
    real = [t.astimezone(UTC) for t in found]
    assert [b - a for a, b in zip(real, real[1:], strict=False)] == [timedelta(hours=25), timedelta(hours=24)]


def test_weekday_morning_job_never_on_a_weekend():
    rule = Rule(cron="30 9 * * 1-5", timezone="Europe/Amsterdam")
    start = datetime(2025, 3, 1, tzinfo=UTC)  # a Saturday; spans the spring-forward weekend
    found = local_ticks(rule, start, start + timedelta(days=35), AMS)
    assert len(found) == 25
    assert all(t.weekday() < 5 and (t.hour, t.minute) == (9, 30) for t in found)


def test_interval_ticks_on_multiples_from_the_epoch():
    rule = Rule(every=timedelta(minutes=15))
    assert rule.next_after(datetime(2025, 1, 1, 10, 7, tzinfo=UTC)) == datetime(2025, 1, 1, 10, 15, tzinfo=UTC)
    assert rule.next_after(datetime(2025, 1, 1, 10, 15, tzinfo=UTC)) == datetime(2025, 1, 1, 10, 30, tzinfo=UTC)
    assert rule.describe() == "Every 15m"


def test_bad_declarations_name_the_field():
    with pytest.raises(pgflow.DefinitionError, match=r"Schedule 'nightly': cron '61 \* \* \* \*' is not a valid"):
        pgflow.Schedule(name="nightly", cron="61 * * * *")
    with pytest.raises(pgflow.DefinitionError, match="timezone must be an IANA time zone name.*'Mars/Base'"):
        pgflow.Schedule(name="n", cron="0 3 * * *", timezone="Mars/Base")
    with pytest.raises(
        pgflow.DefinitionError,
        match="overlap must be one of 'allow', 'skip', 'buffer_one', 'cancel_previous', got 'queue'",
    ):
        pgflow.Schedule(name="n", every=timedelta(hours=1), overlap="queue")
    with pytest.raises(pgflow.DefinitionError, match="cron= or every=, exactly one"):
        pgflow.Schedule(name="n", cron="0 3 * * *", every=timedelta(hours=1))
    with pytest.raises(pgflow.DefinitionError, match="catch_up must be a non-negative timedelta"):
        pgflow.Schedule(name="n", every=timedelta(hours=1), catch_up=3600)  # type: ignore[arg-type]
    with pytest.raises(pgflow.DefinitionError, match="every must be a timedelta of at least 1 second"):
        pgflow.Schedule(name="n", every=timedelta(0))
    with pytest.raises(pgflow.DefinitionError, match="input"):
        pgflow.Schedule(name="n", every=timedelta(hours=1), input={"at": object()})


def test_bounds_a_schedule_could_not_run_with_are_refused_naming_the_field(settings):
    every = timedelta(hours=1)
    with pytest.raises(pgflow.DefinitionError, match="every must be .* at most 3650 days, got datetime.timedelta"):
        pgflow.Schedule(name="n", every=timedelta(days=999_999_999))
    for catch_up in (timedelta(seconds=-1), timedelta(days=3651)):
        with pytest.raises(pgflow.DefinitionError, match="catch_up must be a non-negative timedelta of at most 3650"):
            pgflow.Schedule(name="n", every=every, catch_up=catch_up)
    with pytest.raises(pgflow.DefinitionError, match="Schedule 'n': input holds a NUL character"):
        pgflow.Schedule(name="n", every=every, input={"a": "\x00"})
    with pytest.raises(
        pgflow.DefinitionError, match=re.escape("Schedule name 'a\\x00' cannot be stored: it holds a NUL")
    ):
        pgflow.Schedule(name="a\x00", every=every)
    with pytest.raises(pgflow.DefinitionError, match="cron must be at most 200 characters, got 201"):
        pgflow.Schedule(name="n", cron="0" * 201)
    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "MAX_INPUT_BYTES": 100}
    with pytest.raises(
        pgflow.DefinitionError,
        match=r"input is 211 bytes as JSON; at most 100 are accepted \(PGFLOW\['MAX_INPUT_BYTES'\]\)",
    ):
        pgflow.Schedule(name="n", every=every, input={"blob": "x" * 199})


def test_problems_names_every_field_that_is_wrong_at_once():
    found = ticks.problems(
        name="",
        cron="61 * * * *",
        every=None,
        timezone="Mars/Base",
        input=[],
        overlap="queue",
        catch_up=timedelta(-1),
        max_bytes=None,
    )
    assert list(found) == ["name", "cron", "timezone", "input", "overlap", "catch_up"]
    assert ticks.problems(name="n", cron=None, every=None, timezone="UTC", input={}, overlap="skip", catch_up=None) == {
        None: ticks.ONE_RULE
    }
    assert not ticks.problems(
        name="n", cron=None, every=timedelta(days=3650), timezone="UTC", input={}, overlap="skip", catch_up=None
    )


HOUR = Rule(every=timedelta(hours=1))
T0 = datetime(2025, 6, 1, 0, 0, tzinfo=UTC)


def test_an_on_time_tick_starts_even_without_catch_up():
    result = plan(HOUR, next_tick=T0, now=T0 + timedelta(seconds=3), catch_up=None)
    assert result.start == (T0,)
    assert result.missed == 0
    assert result.next_tick == T0 + timedelta(hours=1)


def test_downtime_without_catch_up_starts_none_and_records_the_missed():
    result = plan(HOUR, next_tick=T0, now=T0 + timedelta(hours=5, minutes=30), catch_up=None)
    assert result.start == ()
    assert (result.missed, result.first_missed, result.last_missed) == (6, T0, T0 + timedelta(hours=5))
    assert result.next_tick == T0 + timedelta(hours=6)


def test_catch_up_starts_the_recent_missed_ticks_oldest_first():
    result = plan(HOUR, next_tick=T0, now=T0 + timedelta(hours=5, minutes=30), catch_up=timedelta(hours=3))
    assert result.start == tuple(T0 + timedelta(hours=h) for h in (3, 4, 5))
    assert (result.missed, result.first_missed, result.last_missed) == (3, T0, T0 + timedelta(hours=2))


def test_every_tick_less_than_a_minute_late_starts_not_only_the_latest():
    # A busy worker comes round 2.5 s late to a 1 s schedule: three ticks due, all on time.
    every_second = Rule(every=timedelta(seconds=1))
    result = plan(every_second, next_tick=T0, now=T0 + timedelta(seconds=2.5), catch_up=None)
    assert result.start == (T0, T0 + timedelta(seconds=1), T0 + timedelta(seconds=2))
    assert (result.missed, result.first_missed) == (0, None)
    assert result.next_tick == T0 + timedelta(seconds=3)


def test_a_tick_a_minute_late_starts_and_one_later_is_missed():
    ten = Rule(every=timedelta(seconds=10))
    result = plan(ten, next_tick=T0, now=T0 + timedelta(seconds=65), catch_up=None)
    assert (result.missed, result.first_missed, result.last_missed) == (1, T0, T0)
    assert result.start == tuple(T0 + timedelta(seconds=s) for s in (10, 20, 30, 40, 50, 60))
    # A catch_up shorter than a minute does not shorten the minute.
    assert plan(ten, next_tick=T0, now=T0 + timedelta(seconds=65), catch_up=timedelta(seconds=5)) == result


def test_a_long_outage_is_counted_up_to_a_cap_and_then_jumped():
    every_second = Rule(every=timedelta(seconds=1))
    back = T0 + timedelta(days=2)
    result = plan(every_second, next_tick=T0, now=back, catch_up=None)
    assert result.missed >= ticks.MAX_COUNTED
    assert result.start == tuple(back - timedelta(seconds=s) for s in range(60, -1, -1))  # the last minute's
    assert result.next_tick == back + timedelta(seconds=1)


def test_limit_leaves_the_rest_due():
    minute = Rule(every=timedelta(minutes=1))
    result = plan(minute, next_tick=T0, now=T0 + timedelta(minutes=30), catch_up=timedelta(hours=1), limit=10)
    assert len(result.start) == 10
    assert result.next_tick == T0 + timedelta(minutes=10)


@pytest.mark.parametrize(
    ("overlap", "previous_open", "buffered", "action"),
    [
        ("skip", False, False, ticks.START),
        ("skip", True, False, ticks.SKIP),
        ("allow", True, False, ticks.START),
        ("buffer_one", True, False, ticks.BUFFER),
        ("buffer_one", True, True, ticks.SKIP),
        ("cancel_previous", True, False, ticks.CANCEL_AND_START),
        ("cancel_previous", False, False, ticks.START),
    ],
)
def test_overlap_actions(overlap, previous_open, buffered, action):
    assert ticks.overlap_action(overlap, previous_open=previous_open, buffered=buffered) == action


def test_cron_rule_describes_itself_in_words():
    assert (
        Rule(cron="30 9 * * 1-5", timezone="Europe/Amsterdam").describe()
        == "At 09:30 on Monday through Friday (Europe/Amsterdam)"
    )


def test_schedules_on_a_class_are_validated_and_not_inherited():
    class Nightly(pgflow.Workflow):
        schedules = [pgflow.Schedule(name="nightly", cron="0 3 * * *")]

        @pgflow.step
        def work(self): ...

    class Child(Nightly):
        pass

    assert [s.name for s in Nightly._pgflow_schedules] == ["nightly"]
    assert Child._pgflow_schedules == ()
    with pytest.raises(pgflow.DefinitionError, match="'nightly' is used more than once"):

        class Twice(pgflow.Workflow):
            schedules = [
                pgflow.Schedule(name="nightly", cron="0 3 * * *"),
                pgflow.Schedule(name="nightly", every=timedelta(hours=1)),
            ]

            @pgflow.step
            def work(self): ...

    with pytest.raises(pgflow.DefinitionError, match="schedules must be a list of pgflow.Schedule"):

        class Loose(pgflow.Workflow):
            schedules = ["0 3 * * *"]

            @pgflow.step
            def work(self): ...

    with pytest.raises(pgflow.DefinitionError, match=r"\.Stepless: schedules need a workflow with steps to start"):

        class Stepless(pgflow.Workflow):
            schedules = [pgflow.Schedule(name="nightly", cron="0 3 * * *")]
