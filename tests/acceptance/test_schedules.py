"""Two real worker processes racing on many due ticks: each tick starts exactly one run."""

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
    assert assert_exactly_once() == expected
