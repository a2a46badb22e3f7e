"""Fan-out on a real PostgreSQL: batches run by a real ``manage.py qcluster`` (ORM broker on the
test database), failures under each on_batch_failure, the single winner, the sweep's repairs,
and members run inline by pgflow.testing."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ, Task
from django_q.monitor import save_task

from pgflow import fanout, store
from pgflow.models import Batch, BatchMember, Event, Step, WorkflowRun
from pgflow.runtime.runner import Runner
from pgflow.testing import run_workflow
from tests import fanout_workflows as fw
from tests import fidelity_workflows
from tests.acceptance.conftest import marks, start_worker, wait_until  # noqa: F401 - fixtures
from tests.invariants import assert_exactly_once

ROOT = Path(__file__).resolve().parents[2]
GRACE = timedelta(minutes=5)  # FAN_OUT_GRACE's default, which these tests keep


class QCluster:
    """A ``manage.py qcluster`` subprocess on the test database."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        # Its worker, pusher and monitor processes share the session it leads.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def start_qcluster(transactional_db: None, tmp_path: Path) -> Iterator[Callable[..., QCluster]]:
    started: list[QCluster] = []

    def start(workers: int = 2) -> QCluster:
        log = tmp_path / f"qcluster-{len(started)}.log"
        env = {
            **os.environ,
            "PGFLOW_TEST_DB_NAME": connection.settings_dict["NAME"],
            "Q_WORKERS": str(workers),
            "PYTHONUNBUFFERED": "1",
        }
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "qcluster"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        cluster = QCluster(proc, log)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.stop()


def save_result(batch_id: object, position: int, *, success: bool, result: object, task_id: str) -> None:
    """What django-q2's monitor does with a member attempt's result: ``save_task`` saves (or,
    for a task seen before, updates and counts) the ``Task`` row, and django-q2's post_save
    signal calls the member's hook with it."""
    at = timezone.now()
    save_task(
        {
            "id": task_id,
            "name": fanout.task_name(batch_id, position),
            "func": fanout.RUNNER,
            "hook": fanout.HOOK,
            "args": (str(batch_id), position),
            "kwargs": {},
            "started": at,
            "stopped": at,
            "result": result,
            "group": str(batch_id),
            "success": success,
            "sync": True,
        },  # sync: the monitor would close this test's connection otherwise
        get_broker(),
    )


def run_due_step(run: WorkflowRun, *, worker: str = "tests") -> str:
    """Claim the run's scheduled attempt and run it here, as a pgflow worker would."""
    step = Step.objects.get(run=run, status="scheduled")
    held = store.claim_step(step.pk, worker=worker)
    assert held is not None
    return Runner().execute(held).outcome


def fan_step(run: WorkflowRun, attempt: int = 1) -> Step:
    return Step.objects.get(run=run, step_name="fan", attempt=attempt)


def events(run: WorkflowRun) -> list[str]:
    return list(Event.objects.filter(run=run).order_by("created_at", "id").values_list("event", flat=True))


def details(run: WorkflowRun, name: str) -> list[dict]:
    return list(Event.objects.filter(run=run, event=name).order_by("id").values_list("details", flat=True))


def resolved(run: WorkflowRun) -> Callable[[], bool]:
    return lambda: not Step.objects.filter(run=run, step_name="fan", status="waiting").exists()


def tasks(*specs: tuple[str, list]) -> dict:
    return {"tasks": [[func, args] for func, args in specs]}


# --- with a real qcluster ---------------------------------------------------------------------


def test_a_batch_of_50_runs_on_django_q2_and_the_workflow_moves_on(start_qcluster, start_worker):  # noqa: F811
    run = fw.Fan.start(input=tasks(*[("tests.fanout_tasks.double", [n]) for n in range(50)]))
    start_qcluster(workers=4)
    worker = start_worker("--concurrency", "2")
    wait_until(
        lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished",
        timeout=60,
        what="the run to finish after its 50 tasks",
    )
    assert worker.terminate() == 0

    batch = Batch.objects.get(run=run)
    step = fan_step(run)
    assert (step.status, step.outcome, step.batch_id) == ("completed", "completed", batch.pk)
    assert step.output is None  # the body returned nothing; the counts stay on the batch
    assert (batch.status, batch.total, batch.succeeded, batch.failed) == ("finished", 50, 50, 0)
    assert batch.description == f"tests.fanout_workflows.Fan#fan run {run.pk}"
    assert batch.properties == {"run_id": run.pk, "step_id": step.pk, "step_name": "fan", "attempt": 1}
    members = BatchMember.objects.filter(batch=batch)
    assert set(members.values_list("status", flat=True)) == {"succeeded"}
    assert members.filter(task_id__isnull=True).count() == 0
    # django-q2 ran each task once, in the batch's group, with results the next step can read
    results = Task.objects.filter(group=str(batch.pk))
    assert results.count() == 50
    assert sorted(results.values_list("result", flat=True)) == sorted(n * 2 for n in range(50))
    assert set(results.values_list("attempt_count", flat=True)) == {1}
    assert Step.objects.get(run=run, step_name="after").output == {"fan": step.output}
    assert events(run) == [
        "started",
        "fan_out_opened",
        "fan_out_finished",
        "step_completed",
        "step_completed",
        "finished",
    ]
    assert details(run, "fan_out_opened") == [{"batch_id": str(batch.pk), "size": 50}]
    assert details(run, "fan_out_finished") == [{"batch_id": str(batch.pk), "total": 50, "succeeded": 50, "failed": 0}]
    assert not OrmQ.objects.exists(), "every task was acknowledged"
    assert_exactly_once()


@pytest.mark.parametrize(
    ("workflow", "step_outcome", "run_status"),
    [(fw.Fan, "paused", "paused"), (fw.FanCancel, "cancelled", "cancelled"), (fw.FanSkip, "skipped", "finished")],
    ids=["pause", "cancel", "skip"],
)
def test_one_member_failing_for_good_applies_on_batch_failure(start_qcluster, workflow, step_outcome, run_status):
    run = workflow.start(
        input=tasks(
            ("tests.fanout_tasks.double", [1]),
            ("tests.fanout_tasks.fail", ["vendor down"]),
            ("tests.fanout_tasks.double", [3]),
        )
    )
    start_qcluster()
    assert run_due_step(run) == "parked"
    step = fan_step(run)
    assert step.status == "waiting"
    wait_until(resolved(run), timeout=30, what="the batch to finish")

    if step_outcome == "skipped":  # the run moved on to the next step
        assert run_due_step(run) == "completed"
    run.refresh_from_db()
    step.refresh_from_db()
    batch = Batch.objects.get(pk=step.batch_id)
    assert run.status == run_status
    assert (step.status, step.outcome) == ("failed", step_outcome)
    assert step.error_class == "pgflow.exceptions.FanOutFailed"
    assert step.error_message == f"1 of 3 jobs failed (batch {batch.pk})"
    assert (batch.succeeded, batch.failed) == (2, 1)
    failed = BatchMember.objects.get(batch=batch, status="failed")
    assert (failed.position, failed.func) == (1, "tests.fanout_tasks.fail")
    assert failed.error.startswith("vendor down : Traceback")
    (finished,) = details(run, "fan_out_finished")
    assert finished == {
        "batch_id": str(batch.pk),
        "total": 3,
        "succeeded": 2,
        "failed": 1,
        "failures": [{"position": 1, "func": "tests.fanout_tasks.fail", "error": "vendor down"}],
    }
    assert details(run, "step_failed") == [{"error_class": "pgflow.exceptions.FanOutFailed", "action": step_outcome}]
    if run_status == "paused":
        assert run.paused_reason == (
            f"step fan #1 failed: pgflow.exceptions.FanOutFailed: 1 of 3 jobs failed (batch {batch.pk})"
        )
    if run_status == "finished":
        assert Step.objects.get(run=run, step_name="after").output == {"fan": None}
    assert_exactly_once()


def test_two_tasks_ending_at_the_same_instant_resolve_the_step_once(start_qcluster):
    # Two workers run the two tasks side by side and both end at the same wall-clock instant.
    # (One cluster's monitor then counts them one after the other; members counted in truly
    # concurrent transactions are the next test's, in many threads.)
    at = time.time() + 3
    run = fw.Fan.start(input=tasks(("tests.fanout_tasks.sleep_until", [at]), ("tests.fanout_tasks.sleep_until", [at])))
    start_qcluster(workers=2)
    run_due_step(run)
    wait_until(resolved(run), timeout=30, what="the batch to finish")
    batch = Batch.objects.get(run=run)
    assert (batch.succeeded, batch.failed, batch.status) == (2, 0, "finished")
    first, second = Task.objects.filter(group=str(batch.pk)).values_list("stopped", flat=True)
    assert abs(first - second) < timedelta(seconds=0.5)
    assert len(details(run, "fan_out_finished")) == 1
    assert fan_step(run).status == "completed"
    assert Step.objects.filter(run=run, step_name="after").count() == 1
    assert_exactly_once()


def test_members_of_a_run_cancelled_before_django_q2_ran_them_do_not_run(start_qcluster, tmp_path):
    ran = tmp_path / "ran"
    run = fw.Fan.start(input=tasks(*[("tests.fanout_tasks.mark", [str(ran), f"m{n}"]) for n in range(3)]))
    assert run_due_step(run) == "parked"
    batch = Batch.objects.get(run=run)
    run.cancel(actor="ops")  # the three tasks are queued in django-q2, no cluster has taken them yet
    start_qcluster(workers=2)
    wait_until(
        lambda: Task.objects.filter(group=str(batch.pk)).count() == 3,
        timeout=30,
        what="django-q2 to take the three tasks",
    )
    assert not ran.exists(), "a member of a cancelled run ran"
    results = Task.objects.filter(group=str(batch.pk))
    assert {task.func for task in results} == {fanout.RUNNER}
    assert {str(task.result["pgflow"]) for task in results} == {
        "not run: the step no longer waits on this batch (cancelled, paused or skipped)"
    }
    assert WorkflowRun.objects.get(pk=run.pk).status == "cancelled"
    assert "fan_out_finished" not in events(run)
    assert_exactly_once()


def test_a_member_whose_worker_was_killed_counts_as_failed_after_the_sweep(start_qcluster):
    run = fw.Fan.start(input=tasks(("tests.fanout_tasks.double", [1]), ("tests.fanout_tasks.die", [])))
    cluster = start_qcluster(workers=1)
    run_due_step(run)
    batch = Batch.objects.get(run=run)
    # Generous limits: on a loaded two-core machine the killed worker's replacement is slow to start.
    wait_until(
        lambda: BatchMember.objects.filter(batch=batch, status="succeeded").exists(),
        timeout=90,
        what="the first member to succeed",
    )
    wait_until(lambda: "reincarnated worker" in cluster.output(), timeout=90, what="the killed worker to be replaced")
    cluster.stop()  # or its ORM broker would deliver the killing task again after `retry`
    assert fanout.repair_lost(at=store.now()) == 0, "nothing is stuck yet"
    assert fan_step(run).status == "waiting"

    window = fanout.stuck_after(GRACE)
    assert window == GRACE + timedelta(seconds=max(Conf.TIMEOUT, Conf.RETRY))
    assert fanout.repair_lost(at=store.now() + window + timedelta(seconds=1)) == 1
    dead = BatchMember.objects.get(batch=batch, position=1)
    assert dead.status == "failed"
    assert "no result from django-q2" in dead.error
    assert "its worker was killed, or no qcluster consumes the queue" in dead.error
    step = fan_step(run)
    assert (step.status, step.outcome, step.error_message) == (
        "failed",
        "paused",
        f"1 of 2 jobs failed (batch {batch.pk})",
    )
    assert WorkflowRun.objects.get(pk=run.pk).status == "paused"
    assert_exactly_once()


# --- the batch's life in this process -----------------------------------------------------------


@pytest.mark.django_db
def test_an_empty_batch_completes_the_step_at_once():
    run = fw.Fan.start(input={"tasks": []})
    assert run_due_step(run) == "completed"
    batch = Batch.objects.get(run=run)
    assert (batch.status, batch.total, batch.succeeded, batch.failed) == ("finished", 0, 0, 0)
    assert batch.finished_at is not None
    step = fan_step(run)
    assert (step.status, step.batch_id) == ("completed", batch.pk)
    assert step.output is None
    assert events(run) == ["started", "fan_out_opened", "fan_out_finished", "step_completed"]
    assert Step.objects.get(run=run, step_name="after").status == "scheduled"


@pytest.mark.django_db(transaction=True)
def test_the_batch_opens_in_one_transaction_and_tasks_are_enqueued_after_commit():
    run = fw.FanCallables.start()
    assert run_due_step(run) == "parked"
    step = fan_step(run)
    batch = Batch.objects.get(run=run)
    assert (step.status, step.batch_id, batch.step_id, batch.total) == ("waiting", batch.pk, step.pk, 3)
    assert step.waiting_since is not None
    members = list(BatchMember.objects.filter(batch=batch).order_by("position"))
    assert [(m.func, m.args, m.kwargs) for m in members] == [
        ("tests.fanout_tasks.double", [1], {}),
        ("tests.fanout_tasks.Tasks.tripled", [2], {}),
        ("tests.fanout_tasks.Tasks.halved", [], {"n": 3}),
    ]
    assert all(m.task_id and m.enqueued_at for m in members)
    queued = sorted(OrmQ.objects.all(), key=lambda q: q.task["name"])
    assert [q.task["name"] for q in queued] == [fanout.task_name(batch.pk, n) for n in range(3)]
    assert {q.task["hook"] for q in queued} == {"pgflow.fanout.member_hook"}
    assert {q.task["group"] for q in queued} == {str(batch.pk)}
    assert [q.task["id"] for q in queued] == [m.task_id for m in members]
    assert events(run) == ["started", "fan_out_opened"]


@pytest.mark.django_db
def test_a_flow_control_verb_or_an_error_in_the_body_ends_the_step_before_any_batch():
    skipped = fw.FanBody.start(input={"verb": "skip"})
    assert run_due_step(skipped) == "skipped"
    assert fan_step(skipped).status == "skipped"

    failed = fw.FanBody.start(input={"raise": "value", "raise_on": [1]})
    assert run_due_step(failed) == "paused"
    step = fan_step(failed)
    assert (step.status, step.error_class, step.error_message) == ("failed", "ValueError", "body failed on attempt 1")
    assert WorkflowRun.objects.get(pk=failed.pk).status == "paused"
    assert not Batch.objects.exists()
    assert not BatchMember.objects.exists()


@pytest.mark.django_db
def test_a_reattempted_fan_out_opens_its_batch_on_the_attempt_that_returns():
    run = fw.FanBody.start(input={"raise": "connection", "raise_on": [1], **tasks(("tests.fanout_tasks.double", [5]))})
    assert run_due_step(run) == "reattempted"
    assert not Batch.objects.exists()
    assert run_due_step(run) == "parked"
    batch = Batch.objects.get(run=run)
    assert batch.step_id == fan_step(run, attempt=2).pk
    assert batch.total == 2  # the body's own add and the input's


@pytest.mark.django_db
def test_a_run_paused_while_the_body_ran_opens_no_batch_until_resumed():
    run = fw.FanBody.start(input={"pause_during": True})
    assert run_due_step(run) == "paused"
    assert not Batch.objects.exists()
    first = fan_step(run)
    assert (first.status, first.outcome) == ("cancelled", "paused")
    run.resume()
    run = run_workflow(run)
    assert run.status == "finished"
    assert Batch.objects.get(run=run).step_id == fan_step(run, attempt=2).pk
    assert events(run) == [
        "started",
        "paused",
        "resumed",
        "fan_out_opened",
        "fan_out_finished",
        "step_completed",
        "step_completed",
        "finished",
    ]


@pytest.mark.django_db
def test_a_resumed_fan_out_runs_its_body_again_with_a_fresh_batch(tmp_path):
    flag = tmp_path / "ready"
    mark_file = tmp_path / "marks"
    run = fw.Fan.start(
        input=tasks(
            ("tests.fanout_tasks.mark", [str(mark_file), "ran"]), ("tests.fanout_tasks.fail_unless_exists", [str(flag)])
        )
    )
    run = run_workflow(run)
    assert run.status == "paused"
    first = fan_step(run, attempt=1)
    assert (first.status, first.outcome) == ("failed", "paused")
    flag.touch()
    run.resume()
    run = run_workflow(run)
    assert run.status == "finished"
    second = fan_step(run, attempt=2)
    assert second.status == "completed"
    assert first.batch_id != second.batch_id
    assert [b.failed for b in Batch.objects.filter(run=run).order_by("created_at")] == [1, 0]
    assert mark_file.read_text().split() == ["ran", "ran"]  # member tasks run again: they must be idempotent
    assert events(run).count("fan_out_opened") == 2


@pytest.mark.django_db(transaction=True)
def test_run_workflow_runs_members_inline_and_enqueues_nothing(tmp_path):
    mark_file = tmp_path / "marks"
    run = fw.Fan.start(input=tasks(*[("tests.fanout_tasks.mark", [str(mark_file), str(n)]) for n in range(3)]))
    run = run_workflow(run)
    assert run.status == "finished"
    assert mark_file.read_text().split() == ["0", "1", "2"]
    assert not OrmQ.objects.exists()
    batch = Batch.objects.get(run=run)
    assert (batch.succeeded, batch.failed) == (3, 0)
    # a batch run inline is never taken for a lost one
    assert fanout.repair_lost(at=store.now() + timedelta(days=1)) == 0


@pytest.mark.django_db(transaction=True)
def test_members_finishing_together_in_many_threads_make_exactly_one_winner(monkeypatch):
    size = 12
    winners: list[int] = []
    resolve = fanout.resolve_step
    monkeypatch.setattr(  # where member_finished looks it up
        fanout.djangoq, "resolve_step", lambda step_id, at=None: winners.append(step_id) or resolve(step_id, at=at)
    )
    for _ in range(3):
        run = fw.Fan.start(input=tasks(*[("tests.fanout_tasks.double", [n]) for n in range(size)]))
        run_due_step(run, worker=fanout.INLINE_WORKER)  # members left pending, for the threads to count
        batch = Batch.objects.get(run=run)
        barrier = threading.Barrier(size)
        counted: list[bool] = []

        def finish(position: int, batch_id=batch.pk, barrier=barrier, counted=counted) -> None:
            try:
                barrier.wait()
                counted.append(fanout.member_finished(batch_id, position, succeeded=True))
            finally:
                connection.close()

        threads = [threading.Thread(target=finish, args=(n,)) for n in range(size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert counted == [True] * size
        batch.refresh_from_db()
        assert (batch.succeeded, batch.status) == (size, "finished")
        assert winners.count(fan_step(run).pk) == 1, "one member won the batch"
        assert len(details(run, "fan_out_finished")) == 1
        assert events(run).count("step_completed") == 1
        assert Step.objects.filter(run=run, step_name="after").count() == 1
    assert_exactly_once()


# --- the sweep and late results -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_lost_batch_callback_is_repaired_by_the_sweep_after_the_grace(monkeypatch):
    # django-q2's sync mode runs each task, saves its result and calls the hook in this process;
    # the winner "dies" before it resolves the step.
    monkeypatch.setattr(Conf, "SYNC", True)
    with monkeypatch.context() as crash:
        crash.setattr(
            fanout.djangoq, "resolve_step", lambda step_id, at=None: (_ for _ in ()).throw(SystemError("died"))
        )
        run = fw.Fan.start(input=tasks(("tests.fanout_tasks.double", [1]), ("tests.fanout_tasks.double", [2])))
        assert run_due_step(run) == "parked"
    batch = Batch.objects.get(run=run)
    assert (batch.status, batch.succeeded) == ("finished", 2)
    assert fan_step(run).status == "waiting"

    assert fanout.repair_lost(at=batch.finished_at + GRACE - timedelta(seconds=1)) == 0, "within the grace"
    assert fan_step(run).status == "waiting"
    assert fanout.repair_lost(at=batch.finished_at + GRACE + timedelta(seconds=1)) == 1
    assert fan_step(run).status == "completed"
    assert Step.objects.get(run=run, step_name="after").status == "scheduled"
    assert len(details(run, "fan_out_finished")) == 1
    assert fanout.repair_lost(at=batch.finished_at + GRACE + timedelta(seconds=2)) == 0
    assert_exactly_once()


@pytest.mark.django_db(transaction=True)
def test_a_lost_member_hook_is_counted_from_django_q2s_saved_result(monkeypatch):
    monkeypatch.setattr(Conf, "SYNC", True)
    with monkeypatch.context() as lost:
        lost.setattr(fanout, "member_hook", lambda task: None)  # django-q2 imports the hook by path
        run = fw.Fan.start(input=tasks(("tests.fanout_tasks.double", [1]), ("tests.fanout_tasks.double", [2])))
        run_due_step(run)
    batch = Batch.objects.get(run=run)
    assert Task.objects.filter(group=str(batch.pk), success=True).count() == 2
    assert (batch.succeeded, fan_step(run).status) == (0, "waiting")
    enqueued = BatchMember.objects.filter(batch=batch).latest("enqueued_at").enqueued_at
    assert fanout.repair_lost(at=enqueued + GRACE + timedelta(seconds=1)) == 2
    batch.refresh_from_db()
    assert (batch.succeeded, batch.status) == (2, "finished")
    assert fan_step(run).status == "completed"


@pytest.mark.django_db(transaction=True)
def test_a_failing_member_in_sync_mode_counts_as_failed(monkeypatch):
    monkeypatch.setattr(Conf, "SYNC", True)
    run = fw.Fan.start(input=tasks(("tests.fanout_tasks.double", [1]), ("tests.fanout_tasks.fail", ["no"])))
    run_due_step(run)
    step = fan_step(run)
    batch = Batch.objects.get(run=run)
    assert (step.status, step.outcome, step.error_message) == (
        "failed",
        "paused",
        f"1 of 2 jobs failed (batch {batch.pk})",
    )
    assert BatchMember.objects.get(batch=batch, position=1).error.startswith(
        "failed in django-q2's sync mode: RuntimeError: no : Traceback"
    )
    assert details(run, "fan_out_finished")[0]["failures"] == [
        {"position": 1, "func": "tests.fanout_tasks.fail", "error": "failed in django-q2's sync mode: RuntimeError: no"}
    ]


@pytest.mark.django_db
def test_a_vanished_batch_pauses_its_step_and_late_results_are_ignored(caplog):
    run = fw.FanSkip.start(input=tasks(("tests.fanout_tasks.double", [1])))
    run_due_step(run)
    batch_id = Batch.objects.get(run=run).pk
    Batch.objects.filter(pk=batch_id).delete()
    assert fan_step(run).batch_id is None

    assert fanout.repair_lost(at=store.now()) == 1
    step = fan_step(run)
    assert (step.status, step.outcome, step.error_class) == ("failed", "paused", "pgflow.exceptions.FanOutFailed")
    assert step.error_message == (
        f"batch {batch_id} no longer exists (deleted before the step resolved); its outcome is unknown"
    )
    assert WorkflowRun.objects.get(pk=run.pk).status == "paused"
    assert details(run, "fan_out_finished") == [{"batch_id": str(batch_id), "vanished": True}]

    with caplog.at_level(logging.INFO, logger="pgflow"):
        save_result(batch_id, 0, success=True, result=2, task_id="x" * 32)
    assert "late result of batch" in caplog.text
    assert fanout.repair_lost(at=store.now()) == 0


@pytest.mark.django_db
def test_a_late_result_for_a_step_no_longer_waiting_is_logged_not_applied(caplog):
    run = fw.Fan.start(input=tasks(("tests.fanout_tasks.double", [1])))
    run_due_step(run)
    batch = Batch.objects.get(run=run)
    run.cancel()
    with caplog.at_level(logging.INFO, logger="pgflow"):
        assert fanout.member_finished(batch.pk, 0, succeeded=True) is True  # counted: the batch finishes
        assert fanout.member_finished(batch.pk, 0, succeeded=False, error="again") is False
    assert "the step is cancelled, not waiting on its batch" in caplog.text
    assert "late result of batch" in caplog.text
    batch.refresh_from_db()
    assert (batch.status, batch.succeeded, batch.failed) == ("finished", 1, 0)
    assert WorkflowRun.objects.get(pk=run.pk).status == "cancelled"
    assert "fan_out_finished" not in events(run)
    assert fanout.repair_lost(at=store.now() + GRACE * 2) == 0


@pytest.mark.django_db
def test_the_hook_counts_a_failure_only_once_django_q2_gives_up(monkeypatch):
    # Conf holds Q_CLUSTER's settings, read once at import: patching it is setting them.
    monkeypatch.setattr(Conf, "ACK_FAILURES", False)
    monkeypatch.setattr(Conf, "MAX_ATTEMPTS", 3)
    run = fw.Fan.start(input=tasks(("tests.fanout_tasks.fail", ["flaky"])))
    run_due_step(run)
    batch = Batch.objects.get(run=run)

    def attempt(number: int) -> None:
        save_result(batch.pk, 0, success=False, result="flaky : Traceback ...", task_id="a" * 32)
        assert Task.objects.get(id="a" * 32).attempt_count == number  # django-q2 counted the attempt

    attempt(1)
    attempt(2)
    assert BatchMember.objects.get(batch=batch).status == "pending", "django-q2 runs it again"
    attempt(3)
    assert BatchMember.objects.get(batch=batch).status == "failed"
    assert fan_step(run).outcome == "paused"

    assert fanout.failure_is_final(1) is False
    monkeypatch.setattr(Conf, "ACK_FAILURES", True)
    assert fanout.failure_is_final(1) is True  # acknowledged: never delivered again
    monkeypatch.setattr(Conf, "ACK_FAILURES", False)
    monkeypatch.setattr(Conf, "MAX_ATTEMPTS", 0)
    assert fanout.failure_is_final(99) is False  # retried for ever by the ORM broker
    # Neither Redis nor its client is installed on the test machines, so the Redis broker is
    # configured, not run: with no ORM (nor another redelivering broker), django-q2 uses Redis.
    monkeypatch.setattr(Conf, "ORM", None)
    assert fanout.failure_is_final(1) is True  # Redis pops a task for good


@pytest.mark.django_db
def test_a_member_never_handed_to_django_q2_counts_as_failed_once_stuck():
    # A `db` test never commits, so the enqueue after commit never happens: as if the process
    # that opened the batch died right after the commit.
    run = fw.Fan.start(input=tasks(("tests.fanout_tasks.double", [1])))
    run_due_step(run)
    batch = Batch.objects.get(run=run)
    assert BatchMember.objects.get(batch=batch).enqueued_at is None
    assert fanout.repair_lost(at=batch.created_at + GRACE) == 0
    assert fanout.repair_lost(at=batch.created_at + fanout.stuck_after(GRACE) + timedelta(seconds=1)) == 1
    member = BatchMember.objects.get(batch=batch)
    assert member.error == (
        "was never handed to django-q2: the process that opened the batch stopped before enqueueing it"
    )
    assert fan_step(run).error_message == f"1 of 1 jobs failed (batch {batch.pk})"


@pytest.mark.django_db
@pytest.mark.parametrize(("returns", "numbers"), [({"sent": 3}, [1, 2, 3]), ("queued", []), (None, [4])])
def test_a_fan_outs_output_is_what_its_body_returned(returns, numbers):
    run = run_workflow(fidelity_workflows.FanOutOutput.start(input={"returns": returns, "numbers": numbers}))
    assert run.status == "finished"
    step = Step.objects.get(run=run, step_name="notify")
    assert (step.status, step.output) == ("completed", returns)
    assert Step.objects.get(run=run, step_name="after").output == {"seen": returns}
    # the batch's counts stay on the batch and in its fan_out_finished event
    batch = Batch.objects.get(run=run)
    assert (batch.total, batch.succeeded, batch.failed) == (len(numbers), len(numbers), 0)
    finished = Event.objects.get(run=run, event="fan_out_finished").details
    assert {key: finished[key] for key in ("batch_id", "total", "succeeded", "failed")} == {
        "batch_id": str(batch.pk),
        "total": len(numbers),
        "succeeded": len(numbers),
        "failed": 0,
    }


@pytest.mark.django_db
def test_a_fan_out_returning_what_json_cannot_hold_fails_before_any_batch():
    run = run_workflow(fidelity_workflows.FanOutOutput.start(input={"numbers": [1]}))
    assert run.status == "finished"  # sanity: the workflow runs
    bad = fidelity_workflows.FanOutOutput.start(input={"numbers": [1], "returns": "set"})
    run = run_workflow(bad)
    assert run.status == "paused"
    step = Step.objects.get(run=run, step_name="notify")
    assert step.status == "failed"
    assert "the output of fan_out 'notify'" in step.error_message
    assert not Batch.objects.filter(run=run).exists()


@pytest.mark.django_db
def test_a_member_whose_function_no_longer_imports_fails_naming_its_path(tmp_path, monkeypatch):
    # A task that imported when the batch opened, and is gone when its member runs (a deploy
    # in between removed it).
    (tmp_path / "fid_deployed_tasks.py").write_text("def notify(n):\n    return n\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = fw.Fan.start(input=tasks(("fid_deployed_tasks.notify", [1]), ("tests.fanout_tasks.double", [2])))
    assert run_due_step(run) == "parked"
    (tmp_path / "fid_deployed_tasks.py").unlink()
    monkeypatch.delitem(sys.modules, "fid_deployed_tasks")

    run = run_workflow(run)
    assert run.status == "paused"
    failed = BatchMember.objects.get(batch__run=run, position=0)
    assert failed.status == "failed"
    assert failed.error.startswith("the fan_out task 'fid_deployed_tasks.notify' no longer imports")
    assert "NoneType" not in failed.error
    # what django-q2's worker runs for a member says the same
    batch = Batch.objects.get(run=run)
    Step.objects.filter(pk=fan_step(run).pk).update(status="waiting", batch=batch)
    with pytest.raises(ImportError, match="'fid_deployed_tasks.notify' no longer imports"):
        fanout.run_member(str(batch.pk), 0, "fid_deployed_tasks.notify", 1)
