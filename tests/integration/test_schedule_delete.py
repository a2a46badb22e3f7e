"""Deleting a schedule while its tick fires, forced: the tick holds the schedule's row lock
in the middle of its start while the admin's delete runs, then finishes."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from pgflow import schedules
from pgflow.models import Schedule, ScheduleTick, WorkflowRun
from tests import schedule_workflows as sw
from tests.dashboard_support import make_user

pytestmark = pytest.mark.django_db(transaction=True)


def waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(cursor.fetchone()[0])


def in_thread(target, results: dict, name: str) -> threading.Thread:
    def run() -> None:
        try:
            results[name] = target()
        except Exception as exc:  # noqa: BLE001 - the test reads what happened
            results[name] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def test_deleting_a_schedule_while_its_tick_fires_deletes_it_and_its_ticks():
    user = make_user("deleter", perms=("view_schedule", "change_schedule", "delete_schedule"))
    row = schedules.save(Schedule(workflow_class=sw.SlowToStart.workflow_path(), name="slow", every=timedelta(hours=1)))
    # Only this tick fires: the schedules of classes other tests declared (yearly ticks,
    # synced again after each flush) would fire with it in the hour before theirs.
    Schedule.objects.exclude(pk=row.pk).delete()
    sw.STARTING.clear()
    sw.RELEASE.clear()
    results: dict = {}
    firing = in_thread(lambda: schedules.fire_due(now=row.next_tick_at + timedelta(seconds=1)), results, "fire")
    try:
        assert sw.STARTING.wait(30), "the tick never reached its start"
        client = Client(raise_request_exception=False)
        client.force_login(user)
        url = reverse("admin:pgflow_schedule_delete", args=[row.pk])
        deleting = in_thread(lambda: client.post(url, {"post": "yes"}), results, "delete")
        deadline = time.monotonic() + 30
        while waiting_on_a_lock() == 0:  # the delete waits for the tick's lock
            assert time.monotonic() < deadline, f"the delete never waited on the tick: {results}"
            time.sleep(0.02)
    finally:
        sw.RELEASE.set()  # the tick goes on: it starts its run, records its tick and commits
    firing.join(30)
    deleting.join(30)
    assert results["fire"] == 1
    response = results["delete"]
    assert not isinstance(response, Exception), response
    assert response.status_code == 302, response.content.decode()[:2000]
    assert not Schedule.objects.filter(pk=row.pk).exists()
    assert not ScheduleTick.objects.filter(schedule_id=row.pk).exists()
    assert WorkflowRun.objects.filter(key=schedules.run_key(row.pk, row.next_tick_at)).count() == 1


def test_the_bulk_delete_action_waits_for_a_firing_tick_too():
    user = make_user("deleter", perms=("view_schedule", "change_schedule", "delete_schedule"))
    row = schedules.save(Schedule(workflow_class=sw.SlowToStart.workflow_path(), name="slow", every=timedelta(hours=1)))
    # Only this tick fires: the schedules of classes other tests declared (yearly ticks,
    # synced again after each flush) would fire with it in the hour before theirs.
    Schedule.objects.exclude(pk=row.pk).delete()
    other = schedules.save(Schedule(workflow_class=sw.Quick.workflow_path(), name="quick", every=timedelta(hours=1)))
    sw.STARTING.clear()
    sw.RELEASE.clear()
    results: dict = {}
    firing = in_thread(lambda: schedules.fire(row.pk, now=row.next_tick_at + timedelta(seconds=1)), results, "fire")
    try:
        assert sw.STARTING.wait(30), "the tick never reached its start"
        client = Client(raise_request_exception=False)
        client.force_login(user)
        changelist = reverse("admin:pgflow_schedule_changelist")
        form = {"action": "delete_selected", "_selected_action": [row.pk, other.pk], "post": "yes"}
        deleting = in_thread(lambda: client.post(changelist, form), results, "delete")
        deadline = time.monotonic() + 30
        while waiting_on_a_lock() == 0:
            assert time.monotonic() < deadline, f"the delete never waited on the tick: {results}"
            time.sleep(0.02)
    finally:
        sw.RELEASE.set()
    firing.join(30)
    deleting.join(30)
    assert len(results["fire"]) == 1
    assert results["delete"].status_code == 302, results["delete"].content.decode()[:2000]
    assert not Schedule.objects.filter(pk__in=[row.pk, other.pk]).exists()
    assert not ScheduleTick.objects.filter(schedule_id__in=[row.pk, other.pk]).exists()
