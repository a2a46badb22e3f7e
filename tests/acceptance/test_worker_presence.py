"""A real worker process records itself in a Worker row, heartbeats it, and removes it on a clean stop."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from pgflow.models import Worker
from pgflow.runtime import presence, sweep
from pgflow_dashboard import insights
from tests import workflows as wf
from tests.acceptance.conftest import wait_until


def test_a_worker_records_itself_heartbeats_and_leaves_on_sigterm(start_worker):
    run = wf.ThreeSteps.start()
    worker = start_worker("--queues", "workflows,mail", "--concurrency", "3", "--name", "w-presence", lease=1.5)
    wait_until(lambda: Worker.objects.filter(name="w-presence").exists(), timeout=60, what="the Worker row")
    row = Worker.objects.get(name="w-presence")
    assert (row.queues, row.concurrency, row.pid) == (["workflows", "mail"], 3, worker.proc.pid)
    assert row.version and row.host
    first_beat = row.heartbeat_at
    wait_until(
        lambda: Worker.objects.filter(name="w-presence", heartbeat_at__gt=first_beat, steps_run__gte=3).exists(),
        timeout=30,
        what="a heartbeat counting the three steps run",
    )
    run.refresh_from_db()
    assert run.status == "finished"
    assert list(Worker.objects.live(timezone.now()).values_list("name", flat=True)) == ["w-presence"]
    assert insights.queues_without_worker(timezone.now(), limit=10)["count"] == 0
    assert worker.terminate() == 0
    assert not Worker.objects.filter(name="w-presence").exists()


def test_queues_with_due_steps_and_no_live_worker_are_stuck(transactional_db):
    wf.ThenWait.start()  # its first step is due now on the default queue
    now = timezone.now()
    assert [row["queue"] for row in insights.stuck(now)["no_worker"]["rows"]] == ["workflows"]
    presence.register(name="elsewhere", queues=["mail"], concurrency=1, at=now)
    assert insights.stuck(now)["no_worker"]["count"] == 1
    presence.register(name="here", queues=["workflows"], concurrency=1, at=now)
    assert insights.stuck(now)["no_worker"]["count"] == 0
    # A worker whose heartbeat is older than the lease is gone: the queue is unserved again.
    later = now + timedelta(minutes=5)
    assert insights.stuck(later)["no_worker"]["rows"][0]["queue"] == "workflows"
    # ... and the sweep forgets it after FORGET_AFTER.
    sweep.run(at=now + presence.FORGET_AFTER - timedelta(seconds=1))
    assert Worker.objects.count() == 2
    counts = sweep.run(at=now + presence.FORGET_AFTER + timedelta(seconds=1))
    assert counts["forgotten_workers"] == 2
    assert not Worker.objects.exists()
