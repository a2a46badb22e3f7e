"""A fan-out over tasks of another django.tasks backend: django-tasks-db (``TASKS["db"]``), run by
its own ``manage.py db_worker`` process, beside a real ``pgflow_worker``. Each member is enqueued
on django-tasks-db in the transaction that opens the batch, and counted when its task finishes:
by Django's ``task_finished`` signal in the db_worker's process, or by the sweep's ``get_result``
when that signal was missed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from pgflow.fanout import repair_lost
from pgflow.models import Batch, BatchMember, WorkflowRun
from pgflow.tasks.compat import task_backends
from tests import django_tasks as t
from tests.invariants import assert_exactly_once

from .conftest import ROOT, wait_until

pytest.importorskip("django_tasks_db", reason="django-tasks-db is in the dev extras")
pytestmark = pytest.mark.timeout(180)

DB_WORKER = ["manage.py", "db_worker", "--backend", "db", "--interval", "0.1", "--no-reload", "--no-startup-delay"]
# A db_worker whose process never hears task_finished: pgflow's receiver disconnected first.
DEAF = (
    "from django.core.management import call_command\n"
    "from pgflow.tasks.compat import task_finished\n"
    "assert task_finished.disconnect(dispatch_uid='pgflow.fanout.djangotasks')\n"
    "call_command('db_worker', '--backend', 'db', '--batch', '--no-reload', '--no-startup-delay')\n"
)


@pytest.fixture
def start_db_worker(transactional_db: None, tmp_path: Path, marks: Path) -> Iterator[Callable[..., subprocess.Popen]]:
    started: list[subprocess.Popen] = []

    def start(*command: str) -> subprocess.Popen:
        env = {
            **os.environ,
            "PGFLOW_TEST_DB_NAME": connection.settings_dict["NAME"],
            "PGFLOW_TEST_MARKS": str(marks),
            "PYTHONUNBUFFERED": "1",
        }
        with (tmp_path / f"db-worker-{len(started)}.log").open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, *(command or DB_WORKER)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


ENDED = {"finished", "cancelled"}


def ended(*runs: WorkflowRun, timeout: float = 90) -> None:
    ids = [run.pk for run in runs]
    wait_until(
        lambda: set(WorkflowRun.objects.filter(pk__in=ids).values_list("status", flat=True)) <= ENDED,
        timeout=timeout,
        what=f"runs {ids} to end",
    )
    for run in runs:
        run.refresh_from_db()


def db_results(run: WorkflowRun) -> list:
    members = BatchMember.objects.filter(batch__run=run).order_by("position")
    return [task_backends["db"].get_result(m.task_id) for m in members]


def test_a_fan_out_over_django_tasks_db_tasks_finishes(start_worker, start_db_worker, marks, client, django_user_model):
    run = t.DbTaskFanOut.start(input={"numbers": [1, 2, 3]})
    start_worker()
    start_db_worker()
    ended(run)

    assert run.status == "finished" and run.outputs["total"] == "done"
    members = list(BatchMember.objects.filter(batch__run=run).order_by("position"))
    assert [(m.func, m.status) for m in members] == [("tests.django_tasks.db_add", "succeeded")] * 3
    results = db_results(run)
    assert [str(r.status) for r in results] == ["SUCCESSFUL"] * 3
    assert [r.return_value for r in results] == [2, 3, 4] and results[0].kwargs == {"b": 1}
    assert [str(r.id) for r in results] == [m.task_id for m in members]  # the member records its task
    # Counted by the signal in the db_worker, not the sweep: FAN_OUT_GRACE (5 minutes) has not passed.
    assert all(m.finished_at - m.enqueued_at < timedelta(minutes=1) for m in members)
    assert sorted(line for line in marks.read_text().splitlines() if line.startswith("db_add")) == [
        "db_add 1 1",
        "db_add 2 1",
        "db_add 3 1",
    ]
    from django_tasks_db.models import DBTaskResult  # lazy: its app is installed only with the dev extras

    assert DBTaskResult.objects.count() == 3
    # The run page shows each member's task id, with no link to django-q2's admin (not its task).
    client.force_login(django_user_model.objects.create_superuser("boss", "boss@example.com", "pw"))
    page = client.get(f"/admin/pgflow/workflowrun/{run.pk}/change/").content.decode()
    assert all(f"<code>{m.task_id}</code>" in page for m in members)
    assert not any(f"django_q/success/{m.task_id}" in page for m in members)
    assert_exactly_once()


def test_a_failing_django_tasks_db_member_fails_the_fan_out(start_worker, start_db_worker):
    failing = t.DbTaskFanOut.start(input={"numbers": [5], "fail": True})
    start_worker()
    start_db_worker()
    ended(failing)

    assert failing.status == "cancelled"  # on_batch_failure="cancel", as for a django-q2 member
    batch = Batch.objects.get(run=failing)
    assert (batch.total, batch.succeeded, batch.failed) == (2, 1, 1)
    failed = BatchMember.objects.get(batch=batch, status="failed")
    assert failed.func == "tests.django_tasks.db_failing"
    assert failed.error.startswith("ValueError: This db task failed due to ValueError : Traceback")
    finished_event = failing.events.get(event="fan_out_finished")
    assert finished_event.details["failures"][0]["error"] == "ValueError: This db task failed due to ValueError"
    assert_exactly_once()


# The worker's settings: the example project's, and the same without django-q2, which a
# project whose fan-outs hand out django.tasks tasks only need not install. (There the example
# shop's django-q2 fan-out fails the checks, which are not what this tests: skipped.)
@pytest.mark.parametrize(
    ("settings_module", "args"),
    [("example_project.settings", ()), ("tests.no_django_q_settings", ("--skip-checks",))],
)
def test_a_finish_no_signal_reported_is_counted_by_the_sweep(start_worker, start_db_worker, settings_module, args):
    run = t.DbTaskFanOut.start(input={"numbers": [1, 2]})
    start_worker(*args, env={"DJANGO_SETTINGS_MODULE": settings_module})
    wait_until(lambda: BatchMember.objects.filter(batch__run=run).count() == 2, timeout=60, what="the batch")
    deaf = start_db_worker("manage.py", "shell", "-c", DEAF)
    assert deaf.wait(90) == 0  # ran both tasks, then exited (--batch), without counting them

    assert [str(r.status) for r in db_results(run)] == ["SUCCESSFUL"] * 2
    assert set(BatchMember.objects.filter(batch__run=run).values_list("status", flat=True)) == {"pending"}
    run.refresh_from_db()
    assert run.status == "running"
    # The sweep reads get_result of members open longer than FAN_OUT_GRACE (5 minutes): not yet.
    assert repair_lost(at=timezone.now()) == 0
    # Six minutes pass (as the rows tell it); the worker's own sweep counts both, then runs on.
    BatchMember.objects.filter(batch__run=run).update(enqueued_at=timezone.now() - timedelta(minutes=6))
    ended(run)
    assert run.status == "finished" and run.outputs["total"] == "done"
    assert list(BatchMember.objects.filter(batch__run=run).values_list("status", flat=True)) == ["succeeded"] * 2
    assert repair_lost(at=timezone.now()) == 0  # counted once
    assert_exactly_once()


def undecorated(n: int) -> int:
    return n


@pytest.mark.django_db
def test_a_task_its_backend_refuses_or_cannot_read_back_is_refused_at_add(settings):
    from pgflow.fanout.builder import BatchBuilder
    from pgflow.tasks.compat import SOURCE, task

    immediate = f"{SOURCE}.backends.immediate.ImmediateBackend"  # django.tasks or django_tasks
    settings.TASKS = {**settings.TASKS, "other": {"BACKEND": immediate}}
    with pytest.raises(TypeError, match=r"backend 'other' \(ImmediateBackend\) cannot read a result back"):
        BatchBuilder().add(task(backend="other")(undecorated), 1)
    with pytest.raises(TypeError, match="does not import back as this task"):
        BatchBuilder().add(task(backend="db")(undecorated), 1)
    with pytest.raises(TypeError, match="its args and kwargs must be JSON"):
        BatchBuilder().add(t.db_add, object(), 1)


@pytest.mark.django_db
def test_pgflow_testing_runs_the_members_inline():
    from pgflow.testing import run_workflow

    done = run_workflow(t.DbTaskFanOut.start(input={"numbers": [1, 2]}))
    assert done.status == "finished" and done.outputs["total"] == "done"
    failed = run_workflow(t.DbTaskFanOut.start(input={"numbers": [1], "fail": True}))
    assert failed.status == "cancelled"
    error = BatchMember.objects.get(batch__run=failed, status="failed").error
    assert error.startswith("This db task failed due to ValueError : Traceback")
