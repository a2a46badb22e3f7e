"""Four links between runs (a re-run's original, a child's parent, a schedule's last run and a
tick's run) are not foreign keys (migration 0020): retention nulls those naming a run it
deletes, as it does a batch member's child run (still a key), and a writer holds the run it
links to, waiting for a retention's delete as a key's check would and told when the run is gone.
Nor are a run's own rows (attempts, events, signals, batches; migration 0022): their writers
hold the run's lock, which waits for a retention's delete in the same way."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import IntegrityError, close_old_connections, connection

from pgflow import db, store
from pgflow.models import BatchMember, Schedule, ScheduleTick, WorkflowRun
from pgflow.store import retention
from pgflow.testing import run_workflow
from tests import composition_workflows as cw
from tests.connections import other_connection
from tests.invariants import assert_exactly_once, link_violations

pytestmark = pytest.mark.django_db


def aged(*runs: WorkflowRun) -> None:
    WorkflowRun.objects.filter(pk__in=[run.pk for run in runs]).update(finished_at=store.now() - timedelta(days=40))


def test_retention_nulls_every_link_to_a_run_it_deletes_and_keeps_the_others():
    original = run_workflow(cw.Ledger.start(input={"n": 1, "amount": 2}))
    rerun = run_workflow(original.rerun_from("receipt"))
    old_parent = run_workflow(cw.Parent.start(input={"n": 1}))
    (kept_child,) = WorkflowRun.objects.filter(parent=old_parent)
    parent = run_workflow(cw.Parent.start(input={"n": 1}))
    (old_child,) = WorkflowRun.objects.filter(parent=parent)
    at = store.now()
    schedule = Schedule.objects.create(
        workflow_class="tests.composition_workflows.Ledger",
        name="nightly ledger",
        cron="0 3 * * *",
        created_at=at,
        updated_at=at,
        last_run=original,
    )
    tick = ScheduleTick.objects.create(
        schedule=schedule, tick_at=at, outcome=ScheduleTick.Outcome.CANCELLED_PREVIOUS, run=original, started_at=at
    )
    kept_tick = ScheduleTick.objects.create(
        schedule=schedule, tick_at=at, outcome=ScheduleTick.Outcome.MANUAL, run=rerun, started_at=at
    )
    aged(original, old_parent, old_child)

    assert store.purge_runs(store.now() - timedelta(days=30), batch=10, rounds=5) == 3

    assert not WorkflowRun.objects.filter(pk__in=[original.pk, old_parent.pk, old_child.pk]).exists()
    rerun.refresh_from_db()
    kept_child.refresh_from_db()
    schedule.refresh_from_db()
    tick.refresh_from_db()
    kept_tick.refresh_from_db()
    assert (rerun.rerun_of_id, kept_child.parent_id, schedule.last_run_id, tick.run_id) == (None, None, None, None)
    assert BatchMember.objects.get(batch__run=parent).child_id is None
    assert kept_tick.run_id == rerun.pk
    assert link_violations() == []
    assert_exactly_once()


def test_a_link_left_naming_a_gone_run_is_a_violation():
    original = run_workflow(cw.Ledger.start(input={"n": 1, "amount": 2}))
    rerun = run_workflow(original.rerun_from("receipt"))
    with connection.cursor() as cursor:  # what retention would leave without its UPDATEs
        cursor.execute("UPDATE pgflow_run SET rerun_of_id = %s WHERE id = %s", [10**9, rerun.pk])
    assert link_violations() == [f"pgflow_run {rerun.pk}: rerun_of_id names run {10**9}, which is gone"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("ending", ["COMMIT", "ROLLBACK"])
def test_a_link_waits_for_a_delete_of_its_run_and_is_refused_when_it_commits(ending):
    run = run_workflow(cw.Ledger.start(input={"n": 1, "amount": 2}))
    outcome: list[object] = []

    def link() -> None:
        try:
            with db.atomic():
                store.hold_run(run.pk, by="the test's link")
            outcome.append("held")
        except IntegrityError as error:
            outcome.append(str(error))
        finally:
            close_old_connections()

    with other_connection() as purging:
        # retention's own purge of the run, its statements as it runs them, not yet committed
        for statement in retention._PURGE:
            purging.execute(statement, {"ids": [run.pk]})
        linking = threading.Thread(target=link)
        linking.start()
        linking.join(1.0)
        assert linking.is_alive() and outcome == []  # waiting, as the key's check waited
        purging.execute(ending)
        linking.join(10)
    assert outcome == (
        [f"the test's link links to run {run.pk}, which retention deleted meanwhile; nothing was linked"]
        if ending == "COMMIT"
        else ["held"]
    )


def test_only_a_batch_members_child_is_a_foreign_key_to_a_run():
    # Each key pointing at pgflow_run is checked for every run retention deletes, and each
    # key of a table's own for every row it inserts.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' "
            "AND confrelid = 'pgflow_run'::regclass ORDER BY 1"
        )
        keys = [row[0] for row in cursor.fetchall()]
    assert keys == ["pgflow_batch_member"]


def test_a_row_of_a_runs_own_left_naming_a_gone_run_is_a_violation():
    run = run_workflow(cw.Ledger.start(input={"n": 1, "amount": 2}))
    with connection.cursor() as cursor:  # what a writer that held no run lock could leave
        cursor.execute("UPDATE pgflow_event SET run_id = %s WHERE run_id = %s", [10**9, run.pk])
    found = link_violations()
    assert found and all("pgflow_event " in line and f"names run {10**9}, which is gone" in line for line in found)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("ending", ["COMMIT", "ROLLBACK"])
def test_a_write_to_a_run_waits_for_a_delete_of_it_and_writes_nothing_when_it_commits(ending):
    """A re-run writes an event on its original, a run that may be old: its run lock waits for
    retention's delete, and finds the run gone, where the event's key's check used to."""
    original = run_workflow(cw.Ledger.start(input={"n": 1, "amount": 2}))
    outcome: list[object] = []

    def rerun() -> None:
        try:
            outcome.append(original.rerun_from("receipt").pk)
        except WorkflowRun.DoesNotExist:
            outcome.append("gone")
        finally:
            close_old_connections()

    others = set(WorkflowRun.objects.exclude(pk=original.pk).values_list("pk", flat=True))
    with other_connection() as purging:
        # retention's batch: its runs locked, then its purge's statements, not yet committed
        purging.execute("SELECT id FROM pgflow_run WHERE id = %s FOR UPDATE", [original.pk])
        for statement in retention._PURGE:
            purging.execute(statement, {"ids": [original.pk]})
        writing = threading.Thread(target=rerun)
        writing.start()
        writing.join(1.0)
        assert writing.is_alive() and outcome == []  # waiting for the run's lock
        purging.execute(ending)
        writing.join(10)
    if ending == "COMMIT":
        assert outcome == ["gone"]
        assert set(WorkflowRun.objects.values_list("pk", flat=True)) == others  # no re-run was made either
    else:
        assert outcome and outcome[0] != "gone"
        assert WorkflowRun.objects.filter(rerun_of=original).count() == 1
    assert link_violations() == []
