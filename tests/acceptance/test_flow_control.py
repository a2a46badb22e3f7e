"""Flow control with four real workers, proven from the attempts' own start and finish times."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pgflow
from pgflow.models import Step, WorkflowRun
from tests import flowcontrol_workflows as fc
from tests.acceptance.conftest import wait_until
from tests.invariants import assert_exactly_once


def four_workers(start_worker, queue: str = "limits") -> list:
    return [start_worker("--queues", queue, "--concurrency", "4") for _ in range(4)]


def all_finished(count: int) -> bool:
    return WorkflowRun.objects.filter(status="finished").count() >= count


def most_at_once(intervals: list[tuple]) -> int:
    """The most intervals [start, end) open at one instant."""
    points = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    open_now = peak = 0
    for _, change in points:  # an end sorts before a start at the same instant
        open_now += change
        peak = max(peak, open_now)
    return peak


def attempts_of(tenant: str, step_name: str = "work") -> list[Step]:
    return list(Step.objects.filter(step_name=step_name, run__input__tenant=tenant).order_by("started_at"))


def test_a_limit_of_two_never_has_three_in_progress_and_other_keys_keep_flowing(start_worker):
    for _ in range(16):
        fc.PerTenant.start(input={"tenant": "busy", "sleep": 0.3})
    for _ in range(4):
        fc.PerTenant.start(input={"tenant": "small", "sleep": 0.3})
    for _ in range(8):
        fc.PerTenant.start(input={"sleep": 0.3})  # no tenant: the key is None, not limited
    workers = four_workers(start_worker)
    wait_until(lambda: all_finished(28), timeout=120, what="28 runs to finish")
    for worker in workers:
        assert worker.terminate() == 0

    busy = attempts_of("busy")
    assert most_at_once([(s.started_at, s.finished_at) for s in busy]) == 2
    small = attempts_of("small")
    assert most_at_once([(s.started_at, s.finished_at) for s in small]) == 2
    # the small tenant did not wait for the busy one: done while the busy one still had most to do
    assert max(s.finished_at for s in small) < sorted(s.started_at for s in busy)[8]
    free = list(Step.objects.exclude(run__input__has_key="tenant"))
    assert most_at_once([(s.started_at, s.finished_at) for s in free]) > 2
    # the waits a limit caused are throttled time, recorded on the attempt
    held = [s for s in busy if s.throttled_until and s.throttled_until > s.scheduled_at]
    assert len(held) >= 10
    assert all(s.scheduled_at <= s.throttled_until <= s.started_at for s in held)
    assert_exactly_once()


def test_a_rate_never_has_four_starts_in_a_second(start_worker):
    for _ in range(12):
        fc.Throttled.start(input={"tenant": "api"})
    for _ in range(3):
        fc.Throttled.start(input={"tenant": "other"})
    workers = four_workers(start_worker)
    wait_until(lambda: all_finished(15), timeout=120, what="15 runs to finish")
    for worker in workers:
        assert worker.terminate() == 0
    starts = [s.started_at for s in attempts_of("api", "call_api")]
    window = timedelta(seconds=1)
    for first in starts:
        assert sum(first <= other < first + window for other in starts) <= 3
    assert starts[-1] - starts[0] >= timedelta(seconds=3)  # 12 starts at 3 a second: 4 windows
    other = [s.started_at for s in attempts_of("other", "call_api")]
    assert max(other) - min(other) < window  # its own key: not held by the busy one
    assert_exactly_once()


def test_round_robin_takes_a_quiet_tenants_one_step_in_the_first_claim_round(start_worker):
    for _ in range(200):
        fc.Wide.start(input={"tenant": "busy"})
    fc.Wide.start(input={"tenant": "quiet"})
    workers = four_workers(start_worker, "fair")
    wait_until(lambda: all_finished(201), timeout=120, what="201 runs to finish")
    for worker in workers:
        assert worker.terminate() == 0
    order = list(Step.objects.order_by("started_at", "id").values_list("run__input__tenant", flat=True))
    # four workers of four slots: one claim round takes at most 16
    assert order.index("quiet") < 16
    assert_exactly_once()


def test_a_queued_singleton_runs_one_run_per_key_at_a_time(start_worker):
    for _ in range(4):
        fc.OnePerAccount.start(input={"account": "a"})
    for _ in range(2):
        fc.OnePerAccount.start(input={"account": "b"})
    workers = four_workers(start_worker)
    wait_until(lambda: all_finished(6), timeout=120, what="6 runs to finish")
    for worker in workers:
        assert worker.terminate() == 0

    def spans(account: str) -> list[tuple]:
        result = []
        for run in WorkflowRun.objects.filter(input__account=account):
            steps = list(run.steps)
            result.append((min(s.started_at for s in steps), max(s.finished_at for s in steps)))
        return result

    assert most_at_once(spans("a")) == 1
    assert most_at_once(spans("b")) == 1
    assert most_at_once(spans("a") + spans("b")) == 2  # another key is not held
    assert_exactly_once()


@pytest.mark.django_db(transaction=True)
def test_a_skipping_singleton_refuses_a_second_start_naming_the_open_run():
    first = fc.OnlyOne.start(input={"account": "x"})
    with pytest.raises(pgflow.SingletonConflict, match=rf"run #{first.pk} with key 'x' is still running") as refused:
        fc.OnlyOne.start(input={"account": "x"})
    assert refused.value.open_run.pk == first.pk
    assert WorkflowRun.objects.count() == 1  # the refused start left nothing behind
    assert fc.OnlyOne.start(input={"account": "y"}).pk != first.pk
    first.cancel()
    assert fc.OnlyOne.start(input={"account": "x"}).pk != first.pk
