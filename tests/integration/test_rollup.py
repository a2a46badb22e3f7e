"""The insights' hourly rollup on a real PostgreSQL: the figures do not depend on how much
is rolled; an hour is rolled once closed, once, idempotently; each sweep rolls a bounded
number of hours; retention deletes old rollup rows; rows written into the past are counted
after a rebuild.

Rows are written directly, at known instants around a fixed NOW, as in test_insights.
"""

from __future__ import annotations

import random
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import close_old_connections, connection, transaction

from pgflow import rollup
from pgflow.core import histogram
from pgflow.models import FailureRollup, RollupState, RunRollup, Step, StepRollup, WorkflowRun
from pgflow.runtime import sweep
from pgflow_dashboard import insights
from pgflow_dashboard.window import WorkflowWindow

pytestmark = pytest.mark.django_db

NOW = datetime(2030, 1, 15, 12, 30, tzinfo=UTC)
ON_THE_HOUR = datetime(2030, 1, 15, 12, tzinfo=UTC)
CLASSES = ("shop.flows.Alpha", "shop.flows.Beta", "shop.flows.Gamma")
ERRORS = ("ConnectionError", "ValueError", None)
WINDOWS = ("1h", "24h", "7d", "30d")
S = timedelta(seconds=1)


# --- a history -----------------------------------------------------------------------------------


def seed_history(rng: random.Random, count: int = 150) -> None:
    """Runs of three classes over the last nine days (and a few from five weeks ago): finished,
    cancelled, paused, running with an attempt open (due, in progress, waiting on a signal),
    reattempts and lost workers, waits and bodies of hours (attempts that end hours after
    they were created), signal steps woken by their signal and steps parked on a batch."""
    runs: list[WorkflowRun] = []
    attempts: list[list[Step]] = []
    for index in range(count):
        old = index % 25 == 0  # started five weeks ago: before every window, ended in the 30-day one
        created = NOW - (timedelta(days=rng.uniform(29.2, 35)) if old else timedelta(hours=rng.uniform(0.02, 216)))
        run = WorkflowRun(
            workflow_class=rng.choice(CLASSES),
            status="running",
            created_at=created,
            updated_at=created,
            definition_digest="d" * 64,
        )
        steps = _life(rng, run, created)
        runs.append(run)
        attempts.append(steps)
    WorkflowRun.objects.bulk_create(runs)
    for run, steps in zip(runs, attempts, strict=True):
        for step in steps:
            step.run = run
    Step.objects.bulk_create([step for steps in attempts for step in steps])


def _life(rng: random.Random, run: WorkflowRun, created: datetime) -> list[Step]:
    steps: list[Step] = []
    clock = created
    fate = rng.random()
    for name in ("one", "two", "three"):
        number = 1
        while True:
            made = clock
            wait = rng.choice([0.0, 0.0, rng.uniform(0.5, 900), rng.uniform(3600, 4 * 3600)]) * S
            queued = rng.expovariate(1 / 3) * S
            ran = rng.choice([rng.uniform(0.0005, 2), rng.uniform(2, 90), rng.uniform(600, 3 * 3600)]) * S
            step = Step(
                step_name=name,
                attempt=number,
                status="completed",
                outcome="completed",
                queue="workflows",
                created_at=made,
                scheduled_at=made + wait,
                started_at=made + wait + queued,
                finished_at=made + wait + queued + ran,
            )
            if rng.random() < 0.3:  # a limited step: part of its time due was throttled
                step.throttled_until = step.scheduled_at + rng.uniform(0, 1) * queued
            shape = rng.random()
            if shape < 0.1:  # a signal step: parked at once, woken when the signal came
                step.waiting_since = made + rng.uniform(0.01, 1) * S
            elif shape < 0.2:  # a fan-out: parked after its body until the batch finished
                step.waiting_since = step.finished_at
                step.finished_at = step.waiting_since + rng.uniform(5, 7200) * S
            steps.append(step)
            if step.finished_at > NOW:  # still open now
                step.finished_at = None
                if step.started_at > NOW:
                    step.status, step.outcome, step.started_at = "scheduled", "", None
                    step.waiting_since = None if step.waiting_since and step.waiting_since > NOW else step.waiting_since
                elif step.waiting_since and step.waiting_since <= NOW:
                    step.status, step.outcome = "waiting", ""
                else:
                    step.status, step.outcome, step.waiting_since = "in_progress", "", None
                run.current_step = name
                return steps
            clock = step.finished_at
            draw = rng.random()
            if draw < 0.15 and number < 4:  # failed, reattempted
                step.status, step.outcome = "failed", rng.choice(["reattempted", "reattempted", "lost"])
                step.error_class = "pgflow.LeaseExpired" if step.outcome == "lost" else rng.choice(ERRORS)
                number += 1
                continue
            if fate < 0.1 and name == "two":  # failed, and the policy paused the run
                step.status, step.outcome, step.error_class = "failed", "paused", rng.choice(ERRORS)
                run.status, run.current_step, run.paused_reason = "paused", name, "step two failed"
                return steps
            if fate < 0.15 and name == "two":  # an operator paused it while the step was due
                step.status, step.outcome, step.started_at, step.waiting_since = "cancelled", "paused", None, None
                step.finished_at = step.scheduled_at - 0.5 * S if step.scheduled_at > made + S else made
                run.status, run.current_step, run.paused_reason = "paused", name, "paused by user:ops"
                return steps
            if fate < 0.22 and name == "three":  # cancelled by a verb, or by a policy on an error
                step.status, step.outcome = rng.choice(["cancelled", "failed"]), "cancelled"
                step.error_class = rng.choice(ERRORS) if step.status == "failed" else None
                run.status, run.finished_at, run.updated_at = "cancelled", clock, clock
                return steps
            break
    run.status, run.finished_at, run.updated_at, run.current_step = "finished", clock, clock, None
    return steps


def figures(now: datetime = NOW) -> dict[str, Any]:
    return {
        name: insights.compute(WorkflowWindow.parse(name, retention=timedelta(days=30), now=now)) for name in WINDOWS
    }


def live_figures(now: datetime = NOW) -> dict[str, Any]:
    """The figures counted from the engine's tables alone, as if nothing were rolled."""
    saved = list(RollupState.objects.all())
    RollupState.objects.all().delete()
    try:
        return figures(now)
    finally:
        RollupState.objects.bulk_create(saved)


def rollup_rows() -> dict[str, list[tuple[Any, ...]]]:
    return {
        "runs": list(
            RunRollup.objects.order_by("hours", "start", "workflow_class").values_list(
                "hours", "start", "workflow_class", "started", "finished", "cancelled", "durations"
            )
        ),
        "steps": list(
            StepRollup.objects.order_by("hours", "start", "workflow_class", "step_name").values_list(
                "hours",
                "start",
                "workflow_class",
                "step_name",
                "attempts",
                "failures",
                "waited",
                "throttled",
                "queued",
                "ran",
            )
        ),
        "failures": list(
            FailureRollup.objects.order_by("start", "outcome", "error_class").values_list(
                "start", "outcome", "error_class", "attempts"
            )
        ),
    }


# --- the same figures, rolled or not ---------------------------------------------------------------


def test_the_figures_are_the_same_whether_no_hour_some_or_all_are_rolled():
    seed_history(random.Random(5))
    live, live_on_the_hour = figures(), figures(ON_THE_HOUR)
    assert rollup.rolled_until() is None
    # The history has what the comparison must cover.
    week = live["7d"]
    assert sum(b["finished"] for b in week["runs_per_bucket"]) and sum(b["cancelled"] for b in week["runs_per_bucket"])
    assert {"reattempted", "paused", "cancelled"} <= {k for b in week["step_failures_per_bucket"] for k in b if b[k]}
    assert week["stuck"]["paused"]["count"] and len(week["errors"]) >= 3
    assert Step.objects.filter(status__in=["scheduled", "in_progress", "waiting"]).exists()
    assert any(s.finished_at - s.created_at > timedelta(hours=2) for s in Step.objects.exclude(finished_at=None))

    steps = 0
    while rollup.roll(at=NOW, limit=13):  # 13: the watermark stops at every hour of the day in turn
        steps += 1
        assert figures() == live, f"after {steps} rolls, rolled until {rollup.rolled_until()}"
    assert steps > 5
    assert rollup.rolled_until() == datetime(2030, 1, 15, 12, tzinfo=UTC)  # 12:00-13:00 is open at 12:30
    assert StepRollup.objects.filter(hours=24, start__gte=NOW - timedelta(days=8)).count() > 20  # days compacted
    assert figures() == live
    assert figures(ON_THE_HOUR) == live_on_the_hour


def test_day_rows_are_the_sums_of_their_hours():
    seed_history(random.Random(8), count=60)
    rollup.roll(at=NOW, limit=None)
    days = StepRollup.objects.filter(hours=24)
    assert days.count() > 10
    summed_over = []
    for day in days:
        hours = list(
            StepRollup.objects.filter(
                hours=1,
                start__gte=day.start,
                start__lt=day.start + rollup.DAY,
                workflow_class=day.workflow_class,
                step_name=day.step_name,
            )
        )
        summed_over.append(len(hours))
        assert day.attempts == sum(hour.attempts for hour in hours)
        assert day.failures == sum(hour.failures for hour in hours)
        for phase in rollup.PHASES:
            merged: dict[str, int] = {}
            for hour in hours:
                histogram.merge(merged, getattr(hour, phase))
            assert histogram.from_json(getattr(day, phase)) == histogram.from_json(merged)
    assert max(summed_over) > 1
    for day in RunRollup.objects.filter(hours=24):
        hours = RunRollup.objects.filter(
            hours=1, start__gte=day.start, start__lt=day.start + rollup.DAY, workflow_class=day.workflow_class
        )
        assert day.started == sum(hour.started for hour in hours)
        assert day.finished == sum(hour.finished for hour in hours)


def test_postgresql_counts_durations_into_the_buckets_python_does():
    rng = random.Random(2)
    values = [0.0, -1.0, 1e-7, 0.0009999, 0.001, 0.0010001, 1.0, 2.0, 86_400.0]
    values += [10 ** rng.uniform(-4, 7) for _ in range(3_000)]
    values += [histogram.bounds(key)[0] for key in range(1, 320)]  # every lower edge
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT v, {histogram.sql_bucket('v')} FROM unnest(%s::float8[]) AS v", [values])
        found = cursor.fetchall()
    assert [key for _, key in found] == [histogram.bucket(value) for value, _ in found]


# --- rolling -----------------------------------------------------------------------------------------


def make_run(
    *, created: datetime, status: str = "running", finished: datetime | None = None, path: str = CLASSES[0]
) -> WorkflowRun:
    return WorkflowRun.objects.create(
        workflow_class=path,
        status=status,
        created_at=created,
        updated_at=created,
        finished_at=finished,
        definition_digest="d" * 64,
    )


def make_step(
    run: WorkflowRun,
    *,
    created: datetime,
    finished: datetime | None,
    status: str = "completed",
    outcome: str = "completed",
    error_class: str | None = None,
) -> Step:
    return Step.objects.create(
        run=run,
        step_name="one",
        status=status,
        outcome=outcome,
        queue="workflows",
        created_at=created,
        scheduled_at=created,
        started_at=created,
        finished_at=finished,
        error_class=error_class,
    )


def test_an_hour_is_rolled_once_it_has_closed_and_only_once():
    hour = datetime(2030, 1, 15, 9, tzinfo=UTC)
    run = make_run(created=hour + 10 * 60 * S, status="finished", finished=hour + 50 * 60 * S)
    make_step(run, created=hour + 10 * 60 * S, finished=hour + 40 * 60 * S)
    closes = hour + rollup.HOUR + rollup.SETTLE

    assert rollup.roll(at=closes - timedelta(microseconds=1)) == 0
    assert rollup.rolled_until() == hour
    assert not RunRollup.objects.exists() and not StepRollup.objects.exists()

    assert rollup.roll(at=closes) == 1
    assert rollup.rolled_until() == hour + rollup.HOUR
    row = RunRollup.objects.get()
    assert (row.hours, row.start, row.started, row.finished, row.cancelled) == (1, hour, 1, 1, 0)
    assert row.durations == {str(histogram.bucket(40 * 60)): 1}
    step = StepRollup.objects.get()
    assert (step.attempts, step.failures, step.ran) == (1, 0, {str(histogram.bucket(30 * 60)): 1})

    # Rolled once: a row that appears in the hour later is not counted by a later sweep.
    make_run(created=hour + 20 * 60 * S)
    assert rollup.roll(at=hour + timedelta(hours=5)) == 0
    assert rollup.rolled_until() == hour + timedelta(hours=4)  # the empty hours after it count as rolled
    assert RunRollup.objects.get(hours=1, start=hour).started == 1


def test_rolling_again_is_idempotent():
    seed_history(random.Random(6), count=60)
    rollup.roll(at=NOW, limit=None)
    rows = rollup_rows()
    assert rows["runs"] and rows["steps"] and rows["failures"]
    ids = set(StepRollup.objects.values_list("pk", flat=True))
    counted = rollup.rebuild(NOW - timedelta(days=40), NOW)
    assert counted == 40 * 24  # every hour from 12:00 forty days ago to the watermark, 12:00 today
    assert rollup_rows() == rows
    assert not ids & set(StepRollup.objects.values_list("pk", flat=True))  # replaced, not left alone
    assert rollup.rebuild(NOW - timedelta(days=40), NOW) == counted
    assert rollup_rows() == rows
    assert rollup.roll(at=NOW, limit=None) == 0
    assert rollup_rows() == rows


def test_each_sweep_rolls_a_bounded_number_of_hours_oldest_first():
    busy = [NOW - timedelta(hours=3 + 2 * index) for index in range(15)]  # 15 hours with rows, gaps between
    for moment in busy:
        make_run(created=moment)
    oldest_first = sorted(rollup.floor_to(moment, rollup.HOUR) for moment in busy)

    assert sweep.run(at=NOW)["rolled_hours"] == rollup.HOURS_PER_SWEEP == 12
    assert rollup.rolled_until() == oldest_first[11] + rollup.HOUR
    assert sorted(RunRollup.objects.filter(hours=1).values_list("start", flat=True)) == oldest_first[:12]
    assert sweep.run(at=NOW)["rolled_hours"] == 3
    assert sweep.run(at=NOW)["rolled_hours"] == 0
    assert rollup.rolled_until() == rollup.closed_until(NOW)
    assert rollup.roll(at=NOW, limit=2) == 0


def test_the_first_roll_starts_at_the_oldest_row_and_an_empty_database_starts_now():
    assert rollup.roll(at=NOW) == 0
    assert rollup.rolled_until() == rollup.closed_until(NOW)
    RollupState.objects.all().delete()
    make_run(created=NOW - timedelta(days=3, minutes=10))
    assert rollup.roll(at=NOW, limit=1) == 1
    assert rollup.rolled_until() == rollup.floor_to(NOW - timedelta(days=3, minutes=10), rollup.HOUR) + rollup.HOUR


def test_retention_deletes_rollup_rows_older_than_it(settings):
    five_days, one_day = NOW - timedelta(days=5), NOW - timedelta(days=1)
    for moment in (five_days, one_day):
        run = make_run(created=moment, status="finished", finished=moment + 60 * S)
        make_step(
            run,
            created=moment,
            finished=moment + 30 * S,
            status="failed",
            outcome="reattempted",
            error_class="ValueError",
        )
    rollup.roll(at=NOW, limit=None)
    old_hour, new_hour = (rollup.floor_to(m, rollup.HOUR) for m in (five_days, one_day))
    old_day, new_day = (rollup.floor_to(m, rollup.DAY) for m in (five_days, one_day))
    assert set(RunRollup.objects.values_list("hours", "start")) == {
        (1, old_hour),
        (1, new_hour),
        (24, old_day),
        (24, new_day),
    }
    settings.PGFLOW = {**settings.PGFLOW, "RETENTION": timedelta(days=3)}
    sweep.purge(at=NOW)
    assert set(RunRollup.objects.values_list("hours", "start")) == {(1, new_hour), (24, new_day)}
    assert set(StepRollup.objects.values_list("hours", "start")) == {(1, new_hour), (24, new_day)}
    assert list(FailureRollup.objects.values_list("start", flat=True)) == [new_hour]


# --- rows written into the past ------------------------------------------------------------------


def test_rows_written_into_rolled_hours_are_counted_after_a_rebuild():
    seed_history(random.Random(7), count=60)
    rollup.roll(at=NOW, limit=None)
    assert figures() == live_figures()

    # A backdated history (as manage.py shop_history writes): unseen until rebuilt.
    two_days = NOW - timedelta(days=2)
    run = make_run(created=two_days, status="finished", finished=two_days + 90 * S, path="shop.flows.Backdated")
    make_step(
        run,
        created=two_days,
        finished=two_days + 60 * S,
        status="failed",
        outcome="reattempted",
        error_class="Backdated",
    )
    truth = live_figures()
    assert figures() != truth
    assert "shop.flows.Backdated" not in {row["workflow_class"] for row in figures()["7d"]["workflows"]}
    assert rollup.rebuild(two_days - timedelta(hours=1), two_days + timedelta(hours=1)) == 3  # 11:00 to 14:00
    assert figures() == truth
    assert {"error_class": "Backdated", "count": 1} in figures()["7d"]["errors"]

    # And the figures of rolled hours do come from the rollup: deleting their attempts changes nothing.
    gone = Step.objects.filter(status="completed", finished_at__lt=two_days)
    assert gone.exists()
    gone.delete()
    assert figures() == truth


def test_the_history_generator_rebuilds_the_hours_it_wrote():
    from example_project.shop.history import generate

    now = rollup.floor_to(datetime.now(UTC), rollup.HOUR) + 20 * 60 * S
    rollup.roll(at=now)  # an empty database: everything before the last closed hour counts as rolled
    assert rollup.rolled_until() is not None
    generate(120, days=2, seed=3, now=now)
    assert RunRollup.objects.exists()
    assert figures(now) == live_figures(now)


# --- the live hours between reads -----------------------------------------------------------------


def test_the_live_hours_rows_are_kept_between_reads_and_only_the_new_ones_counted(monkeypatch):
    monkeypatch.setattr(rollup, "LIVE_SETTLE", timedelta(seconds=1))
    now = datetime.now(UTC)
    mark = rollup.floor_to(now - timedelta(hours=2), rollup.HOUR)
    RollupState.objects.create(pk=1, rolled_until=mark)  # everything before is rolled (here: nothing)
    since = now - timedelta(hours=24)

    def read() -> rollup.Tally:
        return rollup.tally(since, datetime.now(UTC) + S, 3600)

    def truth() -> rollup.Tally:
        return rollup.aggregate([(mark, datetime.now(UTC) + S)], 3600)

    def kept(kind: str) -> rollup._Kept:
        (part,) = [part for key, part in rollup._kept.items() if key[1] == kind]
        return part

    def ended(at: datetime, path: str = CLASSES[0], took: timedelta = 5 * S) -> None:
        run = make_run(created=at - took, status="finished", finished=at, path=path)
        make_step(run, created=at - took, finished=at)

    ended(now - timedelta(minutes=40))
    assert read() == truth()
    assert kept(rollup.ENDS).counted.steps[(CLASSES[0], "one")].attempts == 1
    assert sum(counts[0] for counts in kept(rollup.STARTS).counted.runs.values()) == 1

    ended(datetime.now(UTC), took=timedelta(0))  # after the kept parts: counted live
    assert read() == truth()
    assert sum(step.attempts for step in truth().steps.values()) == 2
    first_until = kept(rollup.ENDS).until

    time.sleep(1.2)  # the second end settles: the next read keeps it
    assert read() == truth()
    assert kept(rollup.ENDS).until > first_until
    assert kept(rollup.ENDS).counted.steps[(CLASSES[0], "one")].attempts == 2
    # The starts are kept up to this test's transaction, open since it began (less the margin).
    assert kept(rollup.STARTS).until < now

    # A start or an end stamped before its kept part's end (a backdated row, or one whose
    # transaction was open longer than LIVE_SETTLE or SETTLE) is missing until its hour is
    # rolled, or this process forgets what it kept.
    make_run(created=now - timedelta(minutes=30), path=CLASSES[1])
    ended(now - timedelta(minutes=30), path=CLASSES[2])
    counted, exact = read(), truth()
    assert (CLASSES[1], "one") not in counted.steps and not any(k[1] in CLASSES[1:] for k in counted.runs)
    assert {k[1] for k in exact.runs} == set(CLASSES[:3]) and (CLASSES[2], "one") in exact.steps
    rollup.forget()
    assert read() == truth()


@pytest.mark.django_db(transaction=True)
def test_the_kept_rows_stop_at_the_oldest_transaction_open_not_seconds_or_minutes_back():
    now = datetime.now(UTC)
    mark = rollup.floor_to(now - timedelta(hours=2), rollup.HOUR)
    RollupState.objects.create(pk=1, rolled_until=mark)

    def behind() -> timedelta:  # the longer of the ends' and the starts' way back
        _, ends, starts = rollup._watermark_and_settled()
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            clock = cursor.fetchone()[0]
        return max(clock - ends, clock - starts)

    # Nothing else open: the rows a margin back have all committed, not only those 10 s (the
    # ends) or 5 min (the starts) back.
    assert rollup.STAMP_MARGIN <= behind() < rollup.LIVE_SETTLE / 2

    def read() -> rollup.Tally:
        return rollup.tally(now - timedelta(hours=24), datetime.now(UTC) + S, 3600)

    def truth() -> rollup.Tally:
        return rollup.aggregate([(mark, datetime.now(UTC) + S)], 3600)

    stamped, commit = threading.Event(), threading.Event()

    def end_late() -> None:  # a start and an end stamped in a transaction that commits seconds later
        try:
            with transaction.atomic():
                at = datetime.now(UTC)
                make_step(make_run(created=at, status="finished", finished=at), created=at, finished=at)
                stamped.set()
                commit.wait(10)
        finally:
            close_old_connections()

    ending = threading.Thread(target=end_late)
    ending.start()
    try:
        assert stamped.wait(10)
        time.sleep((rollup.STAMP_MARGIN + S / 2).total_seconds())  # older than the margin, not yet committed
        assert behind() > rollup.STAMP_MARGIN + S / 2  # held back by the open transaction
        read()  # keeps what has settled: not the end still uncommitted
    finally:
        commit.set()
        ending.join(10)
    counted, exact = read(), truth()
    assert sum(step.attempts for step in exact.steps.values()) == 1
    assert sum(counts[0] for counts in exact.runs.values()) == 1
    assert counted == exact


@pytest.mark.django_db(transaction=True)
def test_a_sweep_pass_holds_the_kept_parts_back_to_before_its_clock(monkeypatch):
    # The pass stamps its repairs with the clock it read first, and commits them one by one,
    # up to seconds later: its open transaction must keep the kept parts from passing them.
    seen: dict[str, datetime] = {}

    def repair_waits(*, at: datetime) -> int:
        time.sleep((rollup.STAMP_MARGIN + S / 2).total_seconds())  # a pass's later repairs
        _, seen["ends"], seen["starts"] = rollup._watermark_and_settled()
        seen["at"] = at
        return 0

    monkeypatch.setattr(sweep, "repair_waits", repair_waits)
    sweep.run()
    assert seen["ends"] <= seen["at"] - rollup.STAMP_MARGIN and seen["starts"] <= seen["ends"]


def test_a_tally_asks_for_the_watermark_and_the_clock_once_and_short_buckets_for_neither():
    from django.test.utils import CaptureQueriesContext

    now = datetime.now(UTC)
    RollupState.objects.create(pk=1, rolled_until=rollup.floor_to(now - timedelta(hours=2), rollup.HOUR))

    def statements(bucket_seconds: int, hours: int) -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            rollup.tally(now - timedelta(hours=hours), now, bucket_seconds)
        return [query["sql"] for query in captured.captured_queries]

    hourly = statements(3600, 24)
    assert len([sql for sql in hourly if "pgflow_rollup_state" in sql]) == 1
    assert len([sql for sql in hourly if "statement_timestamp()" in sql]) == 1
    # An alert's 5-minute window by minutes is all live: neither is read.
    assert not [sql for sql in statements(60, 1) if "pgflow_rollup_state" in sql or "statement_timestamp" in sql]


# --- the command --------------------------------------------------------------------------------------


def test_the_command_rolls_and_rebuilds():
    now = datetime.now(UTC)
    for hours in (3, 30, 50):
        make_run(created=now - timedelta(hours=hours))
    out = StringIO()
    call_command("pgflow_rollup", stdout=out)
    assert out.getvalue().startswith("rolled 3 hours in ")
    assert f"every hour before {rollup.rolled_until():%Y-%m-%d %H:%M UTC} is rolled" in out.getvalue()
    assert RunRollup.objects.filter(hours=1).count() == 3
    out = StringIO()
    call_command("pgflow_rollup", "--rebuild", "--days", "2", stdout=out)
    # every rolled hour since 48 h ago (its hour included), up to the watermark
    counted = re.match(r"counted (\d+) rolled hours again since (\S+ \S+) UTC\n", out.getvalue())
    assert counted, out.getvalue()
    since = datetime.strptime(counted[2], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    assert int(counted[1]) == (rollup.rolled_until() - since.replace(minute=0)) // timedelta(hours=1)
    assert 47 <= int(counted[1]) <= 48  # 48 whole hours, 47 if an hour struck between the commands
    assert "rolled 0 hours" in out.getvalue()
    assert RunRollup.objects.filter(hours=1).count() == 3


def test_the_command_refuses_a_bad_number_of_days():
    with pytest.raises(CommandError, match=r"must be a positive whole number of days, got '0'"):
        call_command("pgflow_rollup", "--rebuild", "--days", "0")
    with pytest.raises(CommandError, match=r"--days goes with --rebuild"):
        call_command("pgflow_rollup", "--days", "3")
