"""History in day partitions on a real PostgreSQL (pgflow.store.history): the sweep files each
ended run into the partitions of its day, open and paused runs stay in the live ones, and
retention drops a day whole once it is past RETENTION."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from pgflow import store
from pgflow.models import Event, Gate, Step, WorkflowRun
from pgflow.runtime import sweep
from pgflow.store import history
from pgflow.testing import run_workflow
from tests import flowcontrol_workflows as fc
from tests import workflows as wf
from tests.connections import other_connection
from tests.invariants import assert_exactly_once

pytestmark = pytest.mark.django_db

SETTLED = history.SETTLE + timedelta(seconds=1)


def where(model: type[Step] | type[Event], run: WorkflowRun) -> set[str]:
    """The partitions holding ``run``'s rows of ``model``'s table."""
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT tableoid::regclass::text FROM {table} WHERE run_id = %s", [run.pk])  # noqa: S608
        return {row[0] for row in cursor.fetchall()}


def exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return cursor.fetchone()[0]


def day_of(run: WorkflowRun):
    return run.finished_at.astimezone(UTC).date()


def days_made(at: datetime, *also: datetime) -> datetime:
    """``at``, once the partitions of its day, the days either side and the days of ``also``
    exist. An attach gives way within ``history.LOCK_TIMEOUT`` to whatever holds the live
    partition's lock, an autovacuum of it included, and leaves the day to the next sweep: a
    test that files now makes its days first, as a run of sweeps would."""
    wanted = {(at + timedelta(days=n)).astimezone(UTC).date() for n in (-1, 0, 1)}
    wanted |= {moment.astimezone(UTC).date() for moment in also}
    history.make_days(wanted - set(history.days()), wait=60)
    assert not (missing := wanted - set(history.days())), f"the partitions of {sorted(missing)} not made in 60 s"
    return at


def test_an_ended_run_is_filed_into_its_days_partitions_and_reads_as_before():
    run = run_workflow(wf.ThreeSteps.start())
    cancelled = wf.Delayed.start()
    cancelled.cancel()
    steps = list(run.steps.values())
    events = list(run.events.values())
    assert where(Step, run) == {"pgflow_step_live"} and where(Event, run) == {"pgflow_event_live"}

    assert sweep.run(at=days_made(store.now() + SETTLED))["filed_runs"] == 2

    run.refresh_from_db()
    day = day_of(run)
    assert where(Step, run) == {history.partition("pgflow_step", day)}
    assert where(Event, run) == {history.partition("pgflow_event", day)}
    assert where(Step, cancelled) == {
        history.partition("pgflow_step", day_of(WorkflowRun.objects.get(pk=cancelled.pk)))
    }
    # Every reader through the ORM sees the same rows, filed or not (but the day they were filed).
    assert [{**row, "history_day": None} for row in run.steps.values()] == steps
    assert [{**row, "history_day": None} for row in run.events.values()] == events
    assert {row["history_day"] for row in run.steps.values()} == {day}
    assert run.outputs == {"one": {"n": 1}, "two": {"n": 2}, "three": {"n": 3}}
    assert assert_exactly_once([run.pk, cancelled.pk]) == 2


def test_open_and_paused_runs_and_a_run_ended_just_now_stay_live():
    waiting = wf.Delayed.start()
    paused = wf.Delayed.start()
    paused.pause()
    just_ended = run_workflow(wf.ThreeSteps.start())
    assert sweep.run()["filed_runs"] == 0  # just_ended's end is younger than SETTLE
    for run in (waiting, paused, just_ended):
        assert where(Step, run) == {"pgflow_step_live"}
    assert sweep.run(at=days_made(store.now() + SETTLED))["filed_runs"] == 1
    assert where(Step, waiting) == where(Step, paused) == {"pgflow_step_live"}
    assert where(Step, just_ended) != {"pgflow_step_live"}
    # The filing goes on from where it stood: nothing is filed twice.
    assert sweep.run(at=days_made(store.now() + SETTLED))["filed_runs"] == 0


def test_a_filed_run_can_be_re_run_from_its_copied_outputs():
    run = run_workflow(wf.ThreeSteps.start())
    sweep.run(at=days_made(store.now() + SETTLED))
    assert where(Step, run) != {"pgflow_step_live"}
    again = run_workflow(run.rerun_from("three"))
    assert again.status == "finished"
    assert again.outputs == run.outputs
    assert where(Step, again) == {"pgflow_step_live"}
    # The original's rerun_as event came after its filing: it stays live, with the run.
    assert "pgflow_event_live" in where(Event, run)
    assert assert_exactly_once([run.pk, again.pk]) == 2


def test_retention_drops_a_day_past_it_whole_and_keeps_open_and_paused_runs(settings):
    settings.PGFLOW = {**settings.PGFLOW, "RETENTION": timedelta(days=30)}
    old = [run_workflow(wf.ThreeSteps.start()) for _ in range(3)]
    recent = run_workflow(wf.ThreeSteps.start())
    waiting = wf.Delayed.start()
    paused = wf.Delayed.start()
    paused.pause()
    long_ago = store.now() - timedelta(days=40)
    WorkflowRun.objects.filter(pk__in=[r.pk for r in old]).update(finished_at=long_ago)
    WorkflowRun.objects.filter(pk__in=[waiting.pk, paused.pk]).update(created_at=long_ago)
    Step.objects.filter(run_id__in=[waiting.pk, paused.pk]).update(created_at=long_ago)
    day = long_ago.astimezone(UTC).date()

    history.file_ended(at=days_made(store.now(), long_ago))
    assert where(Step, old[0]) == {history.partition("pgflow_step", day)}
    assert exists(history.partition("pgflow_step", day)) and exists(history.partition("pgflow_event", day))

    assert sweep.run()["purged_runs"] == 3
    assert not exists(history.partition("pgflow_step", day))
    assert not exists(history.partition("pgflow_event", day))
    assert day not in history.days() and day not in history.days("pgflow_event")
    assert set(WorkflowRun.objects.values_list("pk", flat=True)) == {recent.pk, waiting.pk, paused.pk}
    assert not Step.objects.filter(run_id__in=[r.pk for r in old]).exists()
    assert not Event.objects.filter(run_id__in=[r.pk for r in old]).exists()
    assert Step.objects.filter(run=waiting).exists() and Step.objects.filter(run=paused).exists()
    assert WorkflowRun.objects.get(pk=paused.pk).status == "paused"
    assert assert_exactly_once() == 3


def test_a_day_keeps_its_partitions_while_a_run_that_ended_in_it_is_not_purged(settings):
    run = run_workflow(wf.ThreeSteps.start())
    long_ago = store.now() - timedelta(days=40)
    WorkflowRun.objects.filter(pk=run.pk).update(finished_at=long_ago)
    history.file_ended(at=days_made(store.now(), long_ago))
    day = long_ago.astimezone(UTC).date()
    # Its run not purged (an archive that could not write it, a lock): the day stays.
    assert history.drop_expired(store.now()) == []
    assert exists(history.partition("pgflow_step", day))
    assert Step.objects.filter(run=run).count() == 3


def test_retention_of_a_run_never_filed_deletes_its_live_rows(settings):
    settings.PGFLOW = {**settings.PGFLOW, "RETENTION": timedelta(days=1)}
    run = run_workflow(wf.ThreeSteps.start())
    WorkflowRun.objects.filter(pk=run.pk).update(finished_at=store.now() - timedelta(days=2))
    assert store.purge_runs(store.now() - timedelta(days=1), batch=10, rounds=1) == 1
    assert not Step.objects.filter(run_id=run.pk).exists() and not Event.objects.filter(run_id=run.pk).exists()


def test_filing_frees_the_places_its_runs_attempts_held():
    held = [fc.PerTenant.start(input={"tenant": "t"}) for _ in range(2)]
    assert sorted(c.run_id for c in store.claim(worker="w", queues=["limits"], limit=4)) == sorted(r.pk for r in held)
    for run in held:
        run.cancel()  # ended: the gate learns it at the next claim through it, or from the filing
    assert sweep.run(at=days_made(store.now() + SETTLED))["filed_runs"] == 2
    assert all(not gate.holders for gate in Gate.objects.all())
    later = [fc.PerTenant.start(input={"tenant": "t"}) for _ in range(2)]
    claimed = store.claim(worker="w", queues=["limits"], limit=4)
    assert sorted(c.run_id for c in claimed) == sorted(r.pk for r in later), "the key kept both its places"


def test_the_partitions_of_today_and_tomorrow_are_made_ahead():
    sweep.run()
    today = store.now().astimezone(UTC).date()
    assert {today, today + timedelta(days=1)} <= set(history.days())
    assert history.days() == history.days("pgflow_event")
    # Each with the indexes history is read by.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s", [history.partition("pgflow_step", today)]
        )
        names = {row[0] for row in cursor.fetchall()}
    assert names == {f"{history.partition('pgflow_step', today)}_{suffix}" for suffix in history.INDEXES["pgflow_step"]}
    # The one the parent has too is the day's own, attached to it (none built during the attach).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.inhrelid::regclass::text, x.indisvalid FROM pg_inherits AS i JOIN pg_index AS x "
            "ON x.indexrelid = i.inhparent WHERE i.inhparent = 'pgflow_step_waiting'::regclass"
        )
        attached = dict(cursor.fetchall())
    assert set(attached) == {f"{history.partition('pgflow_step', day)}_waiting" for day in history.days()} | {
        "pgflow_step_live_waiting"
    }
    assert all(attached.values()), "the parent's index is valid"


def test_the_waits_are_read_by_the_index_of_the_attempts_that_waited():
    """The approval waits and the alerts' waiting histogram, with a filed day present: by
    pgflow_step_waiting's partitions, not by a scan of every attempt of their window."""
    from pgflow.observability import alerts
    from pgflow_dashboard import approvalwaits
    from pgflow_dashboard.window import WorkflowWindow

    run_workflow(wf.ThreeSteps.start())
    sweep.run(at=days_made(store.now() + SETTLED))
    # And attempts that never waited in the live partition, as there are many in a real one
    # (a handful plans any scan: reading each of them by its run's index costs as little).
    open_run = wf.Delayed.start()
    at = store.now()
    Step.objects.bulk_create(
        Step(
            run_id=open_run.pk,
            step_name="one",
            attempt=n,
            status="completed",
            queue="workflows",
            created_at=at,
            scheduled_at=at,
            started_at=at,
            finished_at=at,
        )
        for n in range(2, 502)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgflow_step_live")
    now = store.now()
    with captured() as statements:
        approvalwaits.approval_waits(WorkflowWindow.parse("24h", retention=None, now=now))
        alerts._waiting_histogram({"window": 3600, "workflow_class": None, "step": None}, now)
    assert len(statements) == 2
    for sql, params in statements:
        with connection.cursor() as cursor:
            # Few runs: reading each one's attempts by run_id in a nested loop would cost as
            # little, so joined by hash, as many runs would plan it; and no seq scan.
            cursor.execute(
                "SET LOCAL enable_seqscan = off; SET LOCAL enable_nestloop = off; SET LOCAL enable_mergejoin = off"
            )
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "Seq Scan on pgflow_step" not in plan, plan
        # Every index read of an attempts partition ("Bitmap Index Scan on <index>", "Index
        # Scan using <index> on <partition>") reads its partition's index of the waits.
        reads = [line for line in plan.splitlines() if re.search(r"Index (Only )?Scan (on|using) pgflow_step", line)]
        assert reads and all(re.search(r"(on|using) pgflow_step_\w*waiting", line) for line in reads), plan


def test_the_clock_unfiles_history_so_an_advance_past_retention_purges_it_all(pgflow_clock):
    run = run_workflow(wf.ThreeSteps.start())
    sweep.run(at=days_made(store.now() + SETTLED))
    assert where(Step, run) != {"pgflow_step_live"}
    pgflow_clock.advance(days=31)  # RETENTION: 30 days
    assert not WorkflowRun.objects.filter(pk=run.pk).exists()
    assert not Step.objects.filter(run_id=run.pk).exists() and not Event.objects.filter(run_id=run.pk).exists()


def test_the_lookups_of_open_work_plan_the_live_partition_alone():
    """The sweep's leases and deadlines, the dashboard's stuck lists and queue page, the
    /metrics gauges, the alerts' open-work measures and the signal and approval lookups:
    open attempts are never filed, so none of them may plan a day of history."""
    from django.contrib.auth.models import User

    from pgflow import deciding, signals
    from pgflow.fanout import repairs
    from pgflow.observability import alerts, metrics
    from pgflow_dashboard import insights, queuepage

    run = run_workflow(wf.ThreeSteps.start())
    sweep.run(at=days_made(store.now() + SETTLED))
    day = history.partition("pgflow_step", day_of(WorkflowRun.objects.get(pk=run.pk)))
    assert where(Step, run) == {day}
    wf.Delayed.start()  # and an open run, so the lookups have something to find
    staff = User.objects.create_user("ops", is_staff=True)
    now = store.now()
    with captured() as statements:
        sweep._expired_leases(now)
        sweep._past_deadline(now)
        insights.stuck(now)
        queuepage.queues(now)
        metrics.cluster_gauges(now)
        alerts._steps_overdue({"after": 0, "count": 0}, now)
        alerts._waits_past_deadline({"count": 0}, now)
        alerts._queue_without_worker({"after": 0}, now)
        alerts._approvals_waiting({"after": 0, "count": 0}, now)
        signals.repair_waits(at=now)
        repairs.repair_lost(at=now)
        deciding.waiting_for(staff)
    read = [(sql, params) for sql, params in statements if "pgflow_step" in sql]
    assert len(read) >= 12
    for sql, params in read:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert day not in plan, f"{sql}\n{plan}"


@contextmanager
def captured() -> Iterator[list[tuple[str, object]]]:
    """The statements run inside the block, with their parameters."""
    statements: list[tuple[str, object]] = []

    def capture(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        yield statements


@pytest.mark.django_db(transaction=True)
def test_a_partition_whose_locks_a_transaction_holds_waits_for_a_later_sweep(caplog):
    # A transaction that has read the live partition (a body's, a dashboard's) holds its lock
    # until it ends: the attach gives way instead of queueing every claim behind it.
    day = store.now().astimezone(UTC).date() + timedelta(days=40)
    names = [history.partition(table, day) for table in history.TABLES]
    try:
        with other_connection() as other:
            other.execute("SELECT count(*) FROM pgflow_step_live")
            assert history.make_days([day]) == []
            assert not any(exists(name) for name in names)  # neither table's: one transaction
            assert f"the partitions of {day} wait for the next sweep" in caplog.text
            # The log names who holds the lock, for an operator to find.
            assert f"held by pid {other.info.backend_pid} client backend, idle in transaction" in caplog.text
            # While it waits, its claims and transitions go on.
            run = run_workflow(wf.ThreeSteps.start())
            assert run.status == "finished"
        assert history.make_days([day]) == [day]
        assert all(exists(name) for name in names)
    finally:
        with connection.cursor() as cursor:
            for name in names:
                cursor.execute(f"DROP TABLE IF EXISTS {name}")


@pytest.mark.django_db(transaction=True)
def test_a_day_past_retention_whose_parent_is_held_is_dropped_at_a_later_sweep(caplog):
    day = store.now().astimezone(UTC).date() - timedelta(days=400)
    assert history.make_days([day]) == [day]
    cutoff = store.now() - timedelta(days=300)
    with other_connection() as other:
        other.execute("SELECT count(*) FROM pgflow_step")  # through the parent: the run page's read
        assert history.drop_expired(cutoff) == []
        assert exists(history.partition("pgflow_step", day))
        assert "wait for the next sweep to drop them" in caplog.text
        assert f"held by pid {other.info.backend_pid} client backend" in caplog.text
    assert history.drop_expired(cutoff) == [day]
    assert not exists(history.partition("pgflow_step", day)) and not exists(history.partition("pgflow_event", day))


# A live partition's autovacuum, made to start within a second and to crawl (a 100 ms pause
# after every page), so that the attach meets it.
SLOW_AUTOVACUUM = {
    "autovacuum_vacuum_threshold": 0,
    "autovacuum_vacuum_scale_factor": 0,
    "autovacuum_vacuum_cost_delay": 100,
    "autovacuum_vacuum_cost_limit": 1,
}


@pytest.mark.django_db(transaction=True)
def test_an_attach_outwaits_an_autovacuum_of_the_live_partition(caplog):
    """PostgreSQL cancels an autovacuum that has blocked a lock request for deadlock_timeout:
    an attach that finds one holding the live partition waits that long, and is made, where
    giving way at every sweep would leave a busy installation without tomorrow's partitions."""
    day = store.now().astimezone(UTC).date() + timedelta(days=50)
    names = [history.partition(table, day) for table in history.TABLES]
    with other_connection() as admin:
        admin.autocommit = True
        try:
            slow = ", ".join(f"{name} = {value}" for name, value in SLOW_AUTOVACUUM.items())
            admin.execute(f"ALTER TABLE pgflow_step_live SET ({slow})")
            admin.execute("ALTER SYSTEM SET autovacuum_naptime = 1")
            admin.execute("SELECT pg_reload_conf()")
            for _ in range(3):
                run_workflow(wf.ThreeSteps.start())  # each attempt's updates leave dead rows
            deadline = time.monotonic() + 60
            vacuuming = "SELECT pid FROM pg_stat_activity WHERE query LIKE 'autovacuum: VACUUM %%pgflow_step_live%%'"
            while not (pids := admin.execute(vacuuming).fetchall()):
                assert time.monotonic() < deadline, "no autovacuum of pgflow_step_live began in 60 s"
                time.sleep(0.1)
            assert history.make_days([day]) == [day]
            assert all(exists(name) for name in names)
            assert "wait for the next sweep" not in caplog.text
            assert pids[0] not in admin.execute(vacuuming).fetchall()  # cancelled, to start again later
        finally:
            admin.execute(f"ALTER TABLE pgflow_step_live RESET ({', '.join(SLOW_AUTOVACUUM)})")
            admin.execute("ALTER SYSTEM RESET autovacuum_naptime")
            admin.execute("SELECT pg_reload_conf()")
            for name in names:
                admin.execute(f"DROP TABLE IF EXISTS {name}")
