"""Real worker processes and schedules: two racing on many due ticks start each tick's run
once; a worker syncs the declared schedules when it starts; a schedule whose start is
refused never stops the others."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from pgflow import schedules
from pgflow.models import Schedule, ScheduleTick, WorkflowRun
from tests import schedule_workflows as sw
from tests.invariants import assert_exactly_once

from .conftest import wait_until

COUNT = 150


def test_two_workers_start_each_due_tick_once(start_worker):
    now = datetime.now(UTC)
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    for n in range(COUNT):
        # Back from two hours away: three ticks due each, all inside catch_up.
        Schedule.objects.create(
            workflow_class=sw.Quick.workflow_path(),
            name=f"race-{n}",
            every=timedelta(hours=1),
            overlap="allow",
            catch_up=timedelta(hours=3),
            input={"n": n},
            next_tick_at=this_hour - timedelta(hours=2),
            created_at=now,
            updated_at=now,
        )
    expected = 3 * COUNT
    one = start_worker("--concurrency", "4")
    two = start_worker("--concurrency", "4")
    wait_until(
        lambda: WorkflowRun.objects.filter(status="finished").count() >= expected,
        timeout=120,
        what=f"{expected} scheduled runs finished",
    )
    assert one.terminate() == 0 and two.terminate() == 0

    keys = list(WorkflowRun.objects.values_list("key", flat=True))
    assert len(keys) == expected
    assert len(set(keys)) == expected
    started = ScheduleTick.objects.filter(outcome="started")
    assert started.count() == expected
    per_tick = Counter(started.values_list("schedule_id", "tick_at"))
    assert set(per_tick.values()) == {1}
    for row in Schedule.objects.filter(name__startswith="race-"):
        assert row.next_tick_at == this_hour + timedelta(hours=1)
        assert sorted(row.ticks.values_list("tick_at", flat=True)) == [
            this_hour - timedelta(hours=h) for h in (2, 1, 0)
        ]
    assert WorkflowRun.objects.filter(key=schedules.run_key(Schedule.objects.get(name="race-0").pk, this_hour)).exists()
    assert assert_exactly_once() == expected  # each run, and each tick one run


def test_a_worker_syncs_the_declared_schedules_when_it_starts(start_worker):
    # The rows as an older release declared them: one with another rule and input, one
    # disabled when its declaration left the code. The worker imports only the installed
    # apps' workflows modules; it finds these classes by the rows' paths.
    schedules.sync()
    code = Schedule.objects.filter(workflow_class=sw.Report.workflow_path())
    long_ago = datetime(2020, 1, 1, tzinfo=UTC)
    code.filter(name="nightly").update(cron="0 3 * * *", input={"kind": "old"}, next_tick_at=long_ago)
    code.filter(name="hourly").update(enabled=False, disabled_reason="removed from the code (synced 2020-01-01)")
    worker = start_worker("--concurrency", "1")
    wait_until(
        lambda: code.filter(enabled=True, cron=sw.RARE).count() == 2,
        timeout=60,
        what="the worker's sync of Report's two declared schedules",
    )
    assert worker.terminate() == 0
    nightly, hourly = code.get(name="nightly"), code.get(name="hourly")
    assert (nightly.input, nightly.next_tick_at.astimezone(UTC).strftime("%m-%d %H:%M")) == (
        {"kind": "nightly"},
        "12-31 23:00",  # midnight on 1 January in Amsterdam, recomputed from the declared rule
    )
    assert nightly.next_tick_at > datetime.now(UTC)
    assert (hourly.enabled, hourly.disabled_reason) == (True, "")
    assert not WorkflowRun.objects.exists()  # the stale next tick was recomputed, not fired


def test_a_refused_schedule_never_stops_a_healthy_one(start_worker):
    sw.OnePerAccount.start(input={"account": "acme"})  # holds the key: each tick's start is refused
    every_second = {"every": timedelta(seconds=1), "overlap": "allow"}
    refused = schedules.save(
        Schedule(
            workflow_class=sw.OnePerAccount.workflow_path(), name="refused", input={"account": "acme"}, **every_second
        )
    )
    healthy = schedules.save(Schedule(workflow_class=sw.Quick.workflow_path(), name="healthy", **every_second))
    worker = start_worker("--concurrency", "2")
    wait_until(
        lambda: healthy.ticks.filter(outcome="started").count() >= 4,
        timeout=60,
        what="four ticks of the healthy schedule started",
    )
    assert worker.terminate() == 0
    reasons = list(refused.ticks.values_list("outcome", "details__reason"))
    assert reasons and all(
        outcome == "skipped" and reason.startswith("the start was refused: SingletonConflict")
        for outcome, reason in reasons
    )
    assert not refused.ticks.filter(outcome="missed").exists()
    assert assert_exactly_once() >= 5
