"""Schedules on a real PostgreSQL with a fixed clock: sync, one run per tick, overlap
policies, catch-up after downtime, DST, pause/resume, start now, pgflow.testing."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

import pgflow
from pgflow import schedules
from pgflow.models import Schedule, WorkflowRun
from pgflow.testing import fire_schedule
from tests import schedule_workflows as sw
from tests.invariants import assert_exactly_once

pytestmark = pytest.mark.django_db

T0 = datetime(2025, 6, 2, 8, 0, tzinfo=UTC)


def make(workflow=sw.Quick, *, at=T0, **fields) -> Schedule:
    fields.setdefault("every", timedelta(hours=1))
    row = Schedule(workflow_class=workflow.workflow_path(), name=fields.pop("name", "s"), **fields)
    return schedules.save(row, now=at - timedelta(seconds=1))  # next tick: T0


def outcomes(row: Schedule) -> list[str]:
    return list(row.ticks.order_by("id").values_list("outcome", flat=True))


def test_sync_creates_declared_schedules_and_disables_removed_ones():
    Schedule.objects.all().delete()  # migrate's own sync made them already
    counts = schedules.sync()
    assert counts["created"] >= 2
    nightly = Schedule.objects.get(workflow_class=sw.Report.workflow_path(), name="nightly")
    assert (nightly.origin, nightly.timezone, nightly.input, nightly.overlap) == (
        "code",
        "Europe/Amsterdam",
        {"kind": "nightly"},
        "skip",
    )
    assert (
        nightly.next_tick_at.astimezone(sw.pgflow.core.ticks.zone("Europe/Amsterdam")).strftime("%m-%d %H:%M")
        == "01-01 00:00"
    )
    assert schedules.sync()["created"] == 0  # idempotent

    Schedule.objects.filter(pk=nightly.pk).update(name="renamed-in-an-old-release")
    schedules.sync()
    gone = Schedule.objects.get(pk=nightly.pk)
    assert not gone.enabled
    assert "removed from the code" in gone.disabled_reason
    assert Schedule.objects.get(workflow_class=sw.Report.workflow_path(), name="nightly").enabled


def test_migrate_syncs_the_declared_schedules():
    Schedule.objects.all().delete()
    call_command("migrate", verbosity=0)  # nothing to apply; its post_migrate signal still syncs
    assert set(Schedule.objects.filter(origin="code").values_list("workflow_class", "name")) >= {
        (sw.Report.workflow_path(), "nightly"),
        (sw.Report.workflow_path(), "hourly"),
    }


def test_a_changed_declaration_updates_the_row_and_recomputes_the_next_tick():
    schedules.sync(now=T0)
    code = Schedule.objects.filter(workflow_class=sw.Report.workflow_path())
    # The row as the previous release declared it: another rule, input and overlap.
    stale = T0 + timedelta(hours=3)
    code.filter(name="nightly").update(cron="0 3 * * *", input={"kind": "old"}, overlap="allow", next_tick_at=stale)
    code.filter(name="hourly").update(input={"kind": "old"}, next_tick_at=stale)  # same rule, new input
    assert schedules.sync(now=T0) == {"created": 0, "updated": 2, "disabled": 0}
    nightly, hourly = code.get(name="nightly"), code.get(name="hourly")
    assert (nightly.cron, nightly.input, nightly.overlap) == (sw.RARE, {"kind": "nightly"}, "skip")
    assert nightly.next_tick_at == sw.Report._pgflow_schedules[0].rule.next_after(T0) != stale
    assert hourly.input == {"kind": "hourly"}
    assert hourly.next_tick_at == stale  # an unchanged rule keeps its next tick
    assert schedules.sync(now=T0)["updated"] == 0


def test_declaring_a_removed_schedule_again_enables_it():
    schedules.sync()
    code = Schedule.objects.filter(workflow_class=sw.Report.workflow_path(), name="nightly")
    # What the sync of a release without the declaration left (its next tick long past by
    # now); this release declares it again: the ticks while it was gone are not caught up.
    code.update(enabled=False, disabled_reason="removed from the code (synced 2025-06-01 08:00 UTC)", next_tick_at=T0)
    assert schedules.sync()["updated"] == 1
    row = code.get()
    assert (row.enabled, row.disabled_reason) == (True, "")
    assert row.next_tick_at > pgflow.store.now()
    assert schedules.fire_due(now=row.next_tick_at + timedelta(seconds=1)) >= 1  # it ticks again
    assert row.ticks.filter(outcome="started").count() == 1


def test_catch_up_starts_at_most_100_ticks_a_pass_and_the_rest_at_the_next():
    row = make(every=timedelta(minutes=1), overlap="allow", catch_up=timedelta(days=1))
    back = T0 + timedelta(minutes=150, seconds=30)  # 151 ticks due, all within catch_up
    assert schedules.fire_due(now=back) == 1
    assert WorkflowRun.objects.count() == 100
    row.refresh_from_db()
    assert row.next_tick_at == T0 + timedelta(minutes=100)  # the rest stay due
    assert schedules.next_due() <= back  # so the worker looks again at once
    assert schedules.fire_due(now=back) == 1
    keys = list(WorkflowRun.objects.order_by("id").values_list("key", flat=True))
    assert keys == [schedules.run_key(row.pk, T0 + timedelta(minutes=m)) for m in range(151)]
    assert not row.ticks.filter(outcome="missed").exists()
    assert schedules.fire_due(now=back) == 0
    assert_exactly_once()


def test_a_due_tick_starts_one_run_with_its_key_and_stores_the_next_tick():
    row = make(input={"n": 1})
    assert schedules.fire_due(now=T0 - timedelta(seconds=1)) == 0
    assert schedules.fire_due(now=T0 + timedelta(seconds=2)) == 1
    assert schedules.fire_due(now=T0 + timedelta(seconds=3)) == 0  # the tick is gone
    run = WorkflowRun.objects.get()
    assert run.key == f"schedule:{row.pk}:2025-06-02T08:00:00+00:00"
    assert run.input == {"n": 1}
    row.refresh_from_db()
    assert (row.last_tick_at, row.next_tick_at, row.last_run_id) == (T0, T0 + timedelta(hours=1), run.pk)
    tick = row.ticks.get()
    assert (tick.outcome, tick.run_id, tick.tick_at) == ("started", run.pk, T0)


def test_overlap_skip_records_the_skipped_tick():
    row = make()  # overlap="skip" is the default
    schedules.fire_due(now=T0)
    schedules.fire_due(now=T0 + timedelta(hours=1))
    assert WorkflowRun.objects.count() == 1
    assert outcomes(row) == ["started", "skipped"]
    WorkflowRun.objects.get().cancel()
    schedules.fire_due(now=T0 + timedelta(hours=2))
    assert WorkflowRun.objects.count() == 2


def test_overlap_allow_starts_anyway():
    make(overlap="allow")
    schedules.fire_due(now=T0)
    schedules.fire_due(now=T0 + timedelta(hours=1))
    assert WorkflowRun.objects.open().count() == 2


def test_overlap_buffer_one_starts_the_held_tick_when_the_open_run_ends():
    row = make(overlap="buffer_one")
    schedules.fire_due(now=T0)
    schedules.fire_due(now=T0 + timedelta(hours=1))  # held
    schedules.fire_due(now=T0 + timedelta(hours=2))  # one is held already: skipped
    assert WorkflowRun.objects.count() == 1
    assert outcomes(row) == ["started", "buffered", "skipped"]
    WorkflowRun.objects.get().cancel()
    assert schedules.fire_due(now=T0 + timedelta(hours=2, minutes=5)) == 1
    second = WorkflowRun.objects.exclude(status="cancelled").get()
    assert second.key == schedules.run_key(row.pk, T0 + timedelta(hours=1))
    row.refresh_from_db()
    assert row.buffered_tick_at is None and row.last_run_id == second.pk


def test_overlap_cancel_previous_cancels_the_open_run_then_starts():
    row = make(overlap="cancel_previous")
    schedules.fire_due(now=T0)
    first = WorkflowRun.objects.get()
    schedules.fire_due(now=T0 + timedelta(hours=1))
    first.refresh_from_db()
    assert first.status == "cancelled"
    assert first.events.filter(event="cancelled", actor=f"schedule:{row.pk}").exists()
    assert WorkflowRun.objects.open().count() == 1
    assert outcomes(row) == ["started", "cancelled_previous", "started"]


def test_downtime_with_catch_up_starts_each_recent_tick_once_oldest_first():
    row = make(overlap="allow", catch_up=timedelta(hours=2))
    back = T0 + timedelta(hours=5, minutes=10)  # the workers were away five hours
    schedules.fire_due(now=back)
    schedules.fire_due(now=back + timedelta(seconds=5))
    keys = list(WorkflowRun.objects.order_by("id").values_list("key", flat=True))
    assert keys == [schedules.run_key(row.pk, T0 + timedelta(hours=h)) for h in (4, 5)]
    missed = row.ticks.get(outcome="missed")
    assert missed.details["count"] == 4 and missed.tick_at == T0
    row.refresh_from_db()
    assert row.next_tick_at == T0 + timedelta(hours=6)


def test_ticks_a_few_seconds_late_all_start_without_catch_up():
    # A busy worker comes round 2.5 s late to a 1 s schedule: every due tick is on time.
    row = make(every=timedelta(seconds=1), overlap="allow", catch_up=None)
    assert schedules.fire_due(now=T0 + timedelta(seconds=2.5)) == 1
    assert outcomes(row) == ["started", "started", "started"]
    assert WorkflowRun.objects.count() == 3
    row.refresh_from_db()
    assert row.next_tick_at == T0 + timedelta(seconds=3)


def test_a_schedule_whose_start_is_refused_is_a_skipped_tick_and_the_others_fire(settings):
    held = sw.OnePerAccount.start(input={"account": "acme"})  # holds the singleton key
    singleton = make(sw.OnePerAccount, name="singleton", overlap="allow", input={"account": "acme"})
    too_big = make(name="too-big", overlap="allow", input={"blob": "x" * 2000})
    # Saved when the limit was higher; the limit is lowered later (or a row predates the check).
    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "MAX_INPUT_BYTES": 1000}
    healthy = make(name="healthy", overlap="allow")

    for hour in (0, 1):  # the refused schedules stay refused; the healthy one keeps ticking
        assert schedules.fire_due(now=T0 + timedelta(hours=hour, seconds=2)) == 3

    assert outcomes(healthy) == ["started", "started"]
    assert healthy.ticks.filter(run__isnull=False).count() == 2
    for row, words in ((singleton, "SingletonConflict"), (too_big, "MAX_INPUT_BYTES")):
        row.refresh_from_db()
        assert outcomes(row) == ["skipped", "skipped"]
        assert all(
            reason.startswith("the start was refused: ") and words in reason
            for reason in row.ticks.values_list("details__reason", flat=True)
        )
        assert row.next_tick_at == T0 + timedelta(hours=2) and row.last_tick_at == T0 + timedelta(hours=1)
    assert (
        list(WorkflowRun.objects.exclude(pk=held.pk).values_list("workflow_class", flat=True))
        == [sw.Quick.workflow_path()] * 2
    )


def test_a_schedule_that_cannot_fire_at_all_is_recorded_and_leaves_the_rotation():
    broken = make(name="broken")
    Schedule.objects.filter(pk=broken.pk).update(timezone="Mars/Base")  # a row edited past the checks
    healthy = make(name="healthy")
    assert schedules.fire_due(now=T0 + timedelta(seconds=2)) == 2
    assert outcomes(healthy) == ["started"]
    broken.refresh_from_db()
    (tick,) = broken.ticks.all()
    assert tick.outcome == "skipped" and "the tick failed: DefinitionError: timezone" in tick.details["reason"]
    assert broken.next_tick_at is None  # out of rotation until the row is fixed, not first in line
    assert schedules.fire_due(now=T0 + timedelta(seconds=3)) == 0


def test_downtime_without_catch_up_starts_none():
    row = make(catch_up=None)
    schedules.fire_due(now=T0 + timedelta(hours=3, minutes=10))
    assert WorkflowRun.objects.count() == 0
    assert row.ticks.get().details["count"] == 4


def test_dst_days_with_a_fixed_clock_start_one_run_a_day():
    row = make(
        cron="0 2 * * *",
        every=None,
        timezone="Europe/Amsterdam",
        overlap="allow",
        at=datetime(2025, 3, 29, 12, tzinfo=UTC),
    )
    for start in (datetime(2025, 3, 29, 12, tzinfo=UTC), datetime(2025, 10, 25, 12, tzinfo=UTC)):
        Schedule.objects.filter(pk=row.pk).update(next_tick_at=row.rule().next_after(start))
        clock = start
        while clock < start + timedelta(days=2):  # a worker looking every 10 minutes for two days
            clock += timedelta(minutes=10)
            schedules.fire_due(now=clock)
    ticks_started = sorted(row.ticks.filter(outcome="started").values_list("tick_at", flat=True))
    in_amsterdam = [t.astimezone(pgflow.core.ticks.zone("Europe/Amsterdam")) for t in ticks_started]
    assert [t.strftime("%m-%d %H:%M") for t in in_amsterdam] == [
        "03-30 03:00",
        "03-31 02:00",
        "10-26 02:00",
        "10-27 02:00",
    ]


def test_pause_resume_and_start_now():
    row = make()
    schedules.set_paused(row.pk, True, now=T0 - timedelta(minutes=1))
    assert schedules.fire_due(now=T0 + timedelta(minutes=1)) == 0
    schedules.set_paused(row.pk, False, now=T0 + timedelta(hours=3, minutes=1))
    row.refresh_from_db()
    assert row.next_tick_at == T0 + timedelta(hours=4)  # no catching up on a pause
    run = schedules.start_now(row.pk, actor="tester")
    assert run.key.startswith(f"schedule:{row.pk}:now:")
    assert outcomes(row) == ["manual"]
    assert schedules.start_now(row.pk).pk != run.pk  # each its own key


def test_testing_fires_the_next_tick_without_waiting():
    run = fire_schedule(sw.Report, "nightly")
    assert run is not None and run.input == {"kind": "nightly"}
    row = Schedule.objects.get(workflow_class=sw.Report.workflow_path(), name="nightly")
    assert run.key == schedules.run_key(row.pk, row.last_tick_at)
    assert fire_schedule(row) is None  # overlap skip: the first run is still open
    assert fire_schedule(sw.Report, "hourly") is not None


def test_a_bad_rule_in_a_row_is_refused_when_saved():
    with pytest.raises(pgflow.DefinitionError, match="cron 'every day' is not a valid cron expression"):
        make(cron="every day", every=None)


def test_a_start_stopped_by_a_lock_timeout_keeps_the_tick_due_then_fires_it(caplog):
    # A lock or statement timeout, or a cancel, stops the start: that is no refusal of the
    # tick's. It used to be recorded as a skipped tick and the next tick moved on, so the
    # tick never ran.
    from django.db import connection

    from tests.connections import other_connection

    row = make(name="stopped")
    with other_connection() as locker:
        locker.execute("LOCK TABLE pgflow_run IN SHARE ROW EXCLUSIVE MODE")  # no run may be inserted
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        try:
            assert schedules.fire_due(now=T0 + timedelta(seconds=2)) == 1
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
            locker.rollback()
    row.refresh_from_db()
    assert outcomes(row) == [] and row.next_tick_at == T0  # still due: nothing recorded, nothing moved
    (line,) = [r for r in caplog.records if getattr(r, "action", None) == "schedule_stopped"]
    assert "lock timeout" in line.getMessage()
    assert schedules.fire_due(now=T0 + timedelta(seconds=3)) == 1
    row.refresh_from_db()
    assert outcomes(row) == ["started"] and row.next_tick_at == T0 + timedelta(hours=1)
    assert WorkflowRun.objects.get().key == f"schedule:{row.pk}:2025-06-02T08:00:00+00:00"
    assert_exactly_once()


@pytest.mark.django_db(transaction=True)
def test_the_schedule_thread_waits_a_moment_for_a_tick_it_cannot_fire_now(monkeypatch):
    # A due schedule another worker holds (firing it), or whose start was stopped, is still
    # due after a pass: the thread looked again at once, and again, for as long as it stayed so.
    import threading

    from tests.connections import other_connection

    row = make(name="held")
    passes = []
    fire_due = schedules.fire_due
    monkeypatch.setattr(schedules, "fire_due", lambda **kw: passes.append(1) or fire_due(**kw))
    monkeypatch.setattr(schedules, "sync", lambda: None)  # the row above is the only schedule
    stopping = threading.Event()
    with other_connection() as holder:
        holder.execute("SELECT 1 FROM pgflow_schedule WHERE id = %s FOR UPDATE", [row.pk])  # as a firing worker
        thread = threading.Thread(target=schedules.tick_loop, args=(stopping,))
        thread.start()
        time.sleep(0.5)
        stopping.set()
        thread.join(5)
        holder.rollback()
    assert len(passes) == 1, f"{len(passes)} passes in 0.5 s"
    assert not WorkflowRun.objects.exists()


def test_saving_a_form_loaded_before_a_tick_fired_keeps_what_the_tick_wrote():
    # The admin's form holds the row as it was loaded: saving it wrote back the next tick the
    # tick had just moved on (so it fired again) and forgot the run it started (so overlap
    # no longer saw that run open).
    row = make(name="edited", overlap="skip")
    loaded = Schedule.objects.get(pk=row.pk)
    (run,) = schedules.fire(row.pk, now=T0 + timedelta(seconds=2))
    loaded.input = {"n": 2}  # an edit that leaves the rule alone
    schedules.save(loaded, now=T0 + timedelta(seconds=3))
    assert (loaded.last_run_id, loaded.last_tick_at, loaded.next_tick_at) == (run.pk, T0, T0 + timedelta(hours=1))
    assert schedules.fire_due(now=T0 + timedelta(seconds=4)) == 0  # the tick does not fire again
    loaded.every = timedelta(hours=2)  # a new rule: a next tick of its own, the open run still known
    schedules.save(loaded, now=T0 + timedelta(seconds=5))
    row.refresh_from_db()
    assert (row.input, row.last_run_id, row.next_tick_at) == ({"n": 2}, run.pk, T0 + timedelta(hours=2))
    assert schedules.fire_due(now=T0 + timedelta(hours=2, seconds=1)) == 1
    assert outcomes(row) == ["started", "skipped"]  # the first run is still open: overlap skip
    assert WorkflowRun.objects.count() == 1
