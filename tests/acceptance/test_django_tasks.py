"""Django's task framework on pgflow: tasks defined with Django's own ``@task``
(tests/django_tasks.py), enqueued through ``TASKS["default"]`` = ``pgflow.tasks.PgflowBackend``,
run by a real ``pgflow_worker`` process and read back with ``get_result``, here and from another
process. The backend-generic cases of django-tasks-db's suite are among them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.utils import timezone

from pgflow.models import WorkflowRun
from pgflow.tasks import PgflowBackend, options
from pgflow.tasks.compat import (
    SOURCE,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task,
    task_backends,
    task_enqueued,
)
from tests import django_tasks as t
from tests.invariants import assert_exactly_once
from tests.rollback import RolledBack

from .conftest import ROOT, wait_until

pytestmark = pytest.mark.timeout(180)


def finished(result, timeout: float = 60):
    def done() -> bool:
        result.refresh()
        return result.is_finished

    wait_until(done, timeout=timeout, what=f"task {result.task.name} #{result.id} to finish")
    return result


def lines(marks: Path) -> list[str]:
    """What the task bodies marked (tests/django_tasks.py's signal receivers' lines left out)."""
    return [line for line in marks.read_text().splitlines() if not line.startswith("signal")]


def read_in_another_process(result_id: str, task_path: str) -> dict:
    # manage.py shell -c: a fresh process, no state shared with this one but the database.
    code = (
        "import json\n"
        "from django.utils.module_loading import import_string\n"
        f"r = import_string({task_path!r}).get_result({result_id!r})\n"
        "ok = str(r.status) == 'SUCCESSFUL'\n"
        "print(json.dumps({'status': str(r.status), 'value': r.return_value if ok else None, "
        "'args': r.args, 'kwargs': r.kwargs, 'attempts': r.attempts, 'workers': r.worker_ids, "
        "'errors': [e.exception_class_path for e in r.errors]}))\n"
    )
    env = {**os.environ, "PGFLOW_TEST_DB_NAME": connection.settings_dict["NAME"]}
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_backend_says_what_it_supports():
    backend = task_backends["default"]
    assert isinstance(backend, PgflowBackend)
    assert (backend.supports_defer, backend.supports_async_task) == (True, True)
    assert (backend.supports_get_result, backend.supports_priority) == (True, True)


def test_rolled_back_enqueue_leaves_nothing_and_committed_one_runs(start_worker, marks):
    sent: list = []

    def on_enqueued(sender, task_result, **kwargs):
        sent.append(task_result.id)

    task_enqueued.connect(on_enqueued)
    try:
        with pytest.raises(RolledBack), transaction.atomic():
            assert t.add.enqueue(1, 2).id
            raise RolledBack
        with transaction.atomic():
            result = t.add.enqueue(2, b=3)
            assert sent == []  # task_enqueued waits for the commit
        assert sent == [result.id]
    finally:
        task_enqueued.disconnect(on_enqueued)
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.attempts) == ([2], {"b": 3}, 0)
    assert result.enqueued_at is not None and result.started_at is None and result.finished_at is None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    assert result.id == str(WorkflowRun.objects.get().pk)  # the rolled-back one never existed

    worker = start_worker()
    finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.started_at >= result.enqueued_at and result.finished_at >= result.started_at
    assert result.last_attempted_at == result.started_at
    assert len(result.worker_ids) == 1 and result.worker_ids[0]
    assert lines(marks) == ["add 2 3"]
    assert t.add.get_result(result.id) == result

    seen = read_in_another_process(result.id, "tests.django_tasks.add")
    assert seen == {
        "status": "SUCCESSFUL",
        "value": 5,
        "args": [2],
        "kwargs": {"b": 3},
        "attempts": 1,
        "workers": result.worker_ids,
        "errors": [],
    }
    assert worker.terminate() == 0
    assert_exactly_once()


def test_a_failing_task_is_retried_with_backoff_until_it_succeeds_or_gives_up(start_worker, marks):
    succeeds = t.flaky.enqueue(succeed_on=3)
    gives_up = t.flaky.enqueue(succeed_on=9)
    start_worker()
    finished(succeeds)
    finished(gives_up)

    assert succeeds.status == TaskResultStatus.SUCCESSFUL
    assert succeeds.return_value == 3  # TaskContext.attempt is the attempt number
    assert succeeds.attempts == 3
    assert [e.exception_class for e in succeeds.errors] == [ConnectionError, ConnectionError]
    assert succeeds.errors[0].traceback.endswith("ConnectionError: attempt 1 failed\n")

    assert gives_up.status == TaskResultStatus.FAILED  # max_attempts=3 spent
    assert gives_up.attempts == 3
    assert len(gives_up.errors) == 3
    with pytest.raises(ValueError, match="Task failed"):
        gives_up.return_value  # noqa: B018
    assert gives_up.finished_at is not None
    assert WorkflowRun.objects.get(pk=gives_up.id).status == "cancelled"
    assert sorted(lines(marks)) == sorted([f"flaky attempt {n}" for n in (1, 2, 3)] * 2)
    # The backoff (0.2s x attempts so far) spaced the attempts out.
    assert gives_up.last_attempted_at - gives_up.started_at >= timedelta(seconds=0.2 + 0.4)
    assert (
        read_in_another_process(gives_up.id, "tests.django_tasks.flaky")["errors"] == ["builtins.ConnectionError"] * 3
    )
    assert_exactly_once()


def test_a_failing_task_reads_failed_with_its_traceback(start_worker):
    result = t.failing.enqueue()
    start_worker()
    finished(result)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is ValueError
    assert result.errors[0].traceback.endswith("ValueError: This task failed due to ValueError\n")
    assert result.started_at <= result.finished_at


def test_an_idempotent_key_enqueues_once(start_worker, marks):
    first = t.receipt.enqueue(7)
    again = t.receipt.enqueue(7)
    other = t.receipt.enqueue(8)
    assert again.id == first.id and other.id != first.id
    start_worker()
    finished(first)
    finished(other)
    after = t.receipt.enqueue(7)  # the finished run of the key, as it stands
    assert after.id == first.id and after.status == TaskResultStatus.SUCCESSFUL and after.return_value == 7
    assert sorted(lines(marks)) == ["receipt 7", "receipt 8"]


def test_takes_context_and_signals(start_worker):
    result = t.context_of.enqueue()
    start_worker()
    finished(result)
    assert result.return_value == {"id": result.id, "attempt": 1, "status": "RUNNING"}


def test_priority_and_run_after(start_worker, marks):
    later = timezone.now() + timedelta(seconds=3)
    deferred = t.plain.using(run_after=later).enqueue(0)
    low = t.plain.using(priority=-50).enqueue(1)
    high = t.plain.using(priority=50).enqueue(2)
    urgent = t.urgent.enqueue(3)
    assert t.plain.get_result(high.id).task.priority == 50
    assert t.plain.get_result(deferred.id).task.run_after == later
    start_worker("--concurrency", "1", "--queues", "workflows,urgent")
    for result in (deferred, low, high, urgent):
        finished(result)
    plain_order = [line for line in lines(marks) if line.startswith("plain")]
    assert plain_order.index("plain 2") < plain_order.index("plain 1")  # one slot: the higher priority first
    assert deferred.started_at >= later
    assert urgent.return_value == 3


def test_validation_uses_djangos_errors():
    with pytest.raises(InvalidTask, match="Queue 'nowhere' is not valid"):
        t.plain.using(queue_name="nowhere")
    with pytest.raises(InvalidTask, match="priority must be a whole number between -100 and 100"):
        t.plain.using(priority=500)
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        t.plain.using(run_after=timezone.now().replace(tzinfo=None))
    with pytest.raises(InvalidTask, match="accepted: max_attempts, backoff, timeout, key"):
        options(max_attempt=3)
    with pytest.raises(InvalidTask, match="max_attempts must be a positive whole number"):
        options(max_attempts=0)
    with pytest.raises(InvalidTask, match="backoff must be a callable"):
        options(backoff=5)


def undecorated(n: int) -> int:
    return n


def test_task_keywords_are_checked_at_decoration():
    try:
        made = task(max_attempts=2)(undecorated)
    except TypeError:  # Django 6.0's @task passes no extra keywords: options() is the way there
        pytest.skip("this Django's @task takes no backend keywords")
    assert made.max_attempts == 2
    with pytest.raises(InvalidTask, match="unknown pgflow task option.*'retries'.*accepted: max_attempts"):
        task(retries=2)(undecorated)


def test_complex_return_values(start_worker):
    value = t.complex_value.enqueue("x")
    not_json = t.not_json.enqueue()
    doubled = t.async_double.enqueue(21)
    start_worker()
    for result in (value, not_json, doubled):
        finished(result)
    assert value.return_value == {"name": "x", "pair": [1, 2], "nested": [{"x": None, "y": 1.5}], "ok": True}
    assert not_json.status == TaskResultStatus.FAILED
    assert not_json.errors[0].exception_class is TypeError
    assert "is not JSON serializable" in not_json.errors[0].traceback
    assert doubled.return_value == 42


@pytest.mark.django_db
def test_a_missing_result_and_another_tasks_result():
    backend = task_backends["default"]
    for missing in ("999999999", "123abc", "not-an-id"):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(missing)
    result = t.add.enqueue(1, 1)
    with pytest.raises(TaskResultMismatch):
        t.plain.get_result(result.id)
    assert t.add.get_result(result.id).id == result.id


def test_djangos_signals_are_sent_in_the_worker(start_worker, marks):
    # tests/django_tasks.py's receivers write what they hear to the marks file, in the worker.
    # task_finished says FAILED with the error that failed the task, and a value the run
    # cannot store fails the task before task_finished could say it succeeded.
    result = t.add.enqueue(4, 4)
    failed = t.failing.enqueue()
    unstorable = t.not_storable.enqueue()
    start_worker()
    for each in (result, failed, unstorable):
        finished(each)
    heard = [line for line in marks.read_text().splitlines() if line.startswith("signal")]
    assert sorted(heard) == sorted(
        [
            f"signal started add {result.id} RUNNING []",
            f"signal finished add {result.id} SUCCESSFUL []",
            f"signal started failing {failed.id} RUNNING []",
            f"signal finished failing {failed.id} FAILED [builtins.ValueError]",
            f"signal started not_storable {unstorable.id} RUNNING []",
            f"signal finished not_storable {unstorable.id} FAILED [builtins.ValueError]",
        ]
    )
    assert "ValueError: the return value of task tests.django_tasks.not_storable must be JSON-serialisable" in (
        unstorable.errors[0].traceback
    )


def test_the_dashboard_lists_tasks_by_name(start_worker, client, django_user_model):
    result = t.add.enqueue(1, 2)
    start_worker()
    finished(result)
    admin = django_user_model.objects.create_superuser("boss", "boss@example.com", "pw")
    client.force_login(admin)
    page = client.get("/admin/pgflow/workflowrun/")
    assert page.status_code == 200
    # The run list's workflow column names the task, with its path as the title.
    assert '<td class="field-workflow"><span title="tests.django_tasks.add">add</span></td>' in page.content.decode()
    run_page = client.get(f"/admin/pgflow/workflowrun/{result.id}/change/")
    assert run_page.status_code == 200 and "tests.django_tasks.add" in run_page.content.decode()


def test_operator_controls_work_on_tasks(start_worker, tmp_path):
    # A paused run whose attempt failed reads FAILED; the operator's resume re-attempts it, same id.
    flag = tmp_path / "flag"
    result = t.needs_flag.enqueue(str(flag))
    waiting = t.plain.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(9)
    start_worker()
    wait_until(lambda: WorkflowRun.objects.get(pk=result.id).status == "paused", timeout=60, what="the pause")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.errors[0].exception_class is LookupError
    flag.touch()
    WorkflowRun.objects.get(pk=result.id).resume(actor="operator")
    finished(result)
    assert (result.status, result.return_value, result.attempts) == (TaskResultStatus.SUCCESSFUL, "done", 2)

    run = WorkflowRun.objects.get(pk=waiting.id)
    run.pause(actor="operator")
    waiting.refresh()
    assert waiting.status == TaskResultStatus.READY  # paused by an operator: it runs once resumed
    run.cancel(actor="operator")
    waiting.refresh()
    assert waiting.status == TaskResultStatus.FAILED and waiting.finished_at is not None and waiting.errors == []
    assert_exactly_once()


def test_a_task_past_its_timeout_fails(start_worker):
    result = t.too_slow.enqueue()
    running = t.slow.enqueue(2)
    start_worker()
    wait_until(lambda: t.slow.get_result(running.id).status == TaskResultStatus.RUNNING, timeout=30, what="RUNNING")
    finished(result)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class_path == "pgflow.exceptions.StepTimeout"
    finished(running)


@pytest.mark.django_db
def test_backend_options_are_defaults_and_checked(settings):
    from django.core.exceptions import ImproperlyConfigured

    default = settings.TASKS["default"]
    settings.TASKS = {"default": {**default, "OPTIONS": {"max_attempts": 4}}}
    assert task(undecorated).max_attempts == 4
    settings.TASKS = {"default": {**default, "OPTIONS": {"retries": 4}}}
    with pytest.raises(ImproperlyConfigured, match="unknown pgflow task option.*'retries'.*accepted: max_attempts"):
        task_backends["default"]


def test_a_fan_out_takes_pgflow_tasks_as_child_runs(start_worker):
    run = t.TaskFanOut.start(input={"numbers": [1, 2, 3]})
    failing = t.TaskFanOut.start(input={"numbers": [5], "fail": True})
    start_worker()
    wait_until(
        lambda: (
            set(WorkflowRun.objects.filter(pk__in=[run.pk, failing.pk]).values_list("status", flat=True))
            <= {"finished", "cancelled"}
        ),
        timeout=60,
        what="the fan-outs to end",
    )
    run.refresh_from_db()
    assert run.status == "finished" and run.outputs["total"] == [2, 3, 4]
    children = list(WorkflowRun.objects.filter(parent=run).order_by("id"))
    assert [c.workflow_class for c in children] == ["tests.django_tasks.add"] * 3
    results = [t.add.get_result(str(c.pk)) for c in children]
    assert sorted(r.return_value for r in results) == [2, 3, 4] and results[0].kwargs == {"b": 1}
    failing.refresh_from_db()
    assert failing.status == "cancelled"  # a member task gave up: on_batch_failure="cancel"
    assert_exactly_once()


@pytest.mark.django_db
def test_a_fan_out_refuses_a_task_whose_backend_keeps_no_results(settings):
    from pgflow.fanout.builder import BatchBuilder

    immediate = f"{SOURCE}.backends.immediate.ImmediateBackend"  # django.tasks or django_tasks
    settings.TASKS = {**settings.TASKS, "other": {"BACKEND": immediate}}
    other = task(backend="other")(undecorated)
    with pytest.raises(TypeError, match=r"its backend 'other' \(ImmediateBackend\) cannot read a result back"):
        BatchBuilder().add(other, 1)


@pytest.mark.django_db
def test_using_leaves_the_tasks_class_as_declared():
    from pgflow import registry

    declared = registry.resolve("tests.django_tasks.urgent")
    moved = t.urgent.using(priority=-5, queue_name="default").enqueue(1)
    assert registry.resolve("tests.django_tasks.urgent") is declared
    assert (declared.queue, declared.priority) == ("urgent", 10)
    first = WorkflowRun.objects.get(pk=moved.id).steps.get()
    assert (first.queue, first.priority) == ("workflows", -5)  # Django's "default" is PGFLOW["QUEUE"]
    assert t.urgent.get_result(moved.id).task == t.urgent.using(priority=-5, queue_name="default")


def test_system_exit_and_keyboard_interrupt_fail_the_task_not_the_worker(start_worker):
    exits, interrupted, after = t.exits.enqueue(), t.interrupted.enqueue(), t.add.enqueue(1, 1)
    worker = start_worker("--concurrency", "1")
    for result in (exits, interrupted, after):
        finished(result)
    assert exits.status == TaskResultStatus.FAILED and exits.errors[0].exception_class is SystemExit
    # Its policy applies as to any error: attempted max_attempts times, then given up (cancelled).
    assert len(exits.errors) == 2 and WorkflowRun.objects.get(pk=exits.id).status == "cancelled"
    assert interrupted.status == TaskResultStatus.FAILED and interrupted.errors[0].exception_class is KeyboardInterrupt
    assert after.return_value == 2  # the same worker ran on
    assert worker.proc.poll() is None


def test_async_enqueue_get_and_refresh(start_worker):
    async def enqueue():
        return await t.async_double.aenqueue(4)

    result = asyncio.run(enqueue())
    assert result.status == TaskResultStatus.READY
    start_worker()

    async def finished_async():
        for _ in range(600):
            await result.arefresh()
            if result.is_finished:
                return await t.async_double.aget_result(result.id)
            await asyncio.sleep(0.1)
        raise AssertionError("the async task did not finish")

    try:
        assert asyncio.run(finished_async()).return_value == 8
        assert result.status == TaskResultStatus.SUCCESSFUL
    finally:
        # sync_to_async ran the reads on asgiref's own thread: close its connection there, so
        # the test database can be dropped.
        asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())


@pytest.mark.django_db
def test_a_result_read_right_after_enqueue_equals_the_enqueued_one():
    result = t.add.using(priority=3).enqueue(1, b=2)
    assert task_backends["default"].get_result(result.id) == result


def test_a_schedule_starts_a_task(start_worker):
    from pgflow import registry
    from pgflow.testing import fire_schedule

    run = fire_schedule(registry.resolve("tests.django_tasks.scheduled_add"), "nightly")
    assert run is not None and run.key.startswith("schedule:")
    start_worker()
    result = finished(t.scheduled_add.get_result(str(run.pk)))
    assert (result.return_value, result.args, result.kwargs) == (42, [20], {"b": 22})


def test_a_schedule_input_must_be_the_tasks_call():
    from pgflow import Schedule

    with pytest.raises(InvalidTask, match=r"Schedule 'x''s input is the task's call: \{'args'"):
        options(schedules=[Schedule(name="x", every=timedelta(hours=1), input={"order": 1})])


def _tool_value(answer) -> dict:
    return answer.structured_content or json.loads(answer.content[0].text)


def test_mcp_tools_read_a_task_run(start_worker, django_user_model):
    # Through the MCP SDK's own client, against `manage.py pgflow_mcp` on stdio.
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    result = t.add.enqueue(20, 22)
    start_worker()
    finished(result)
    django_user_model.objects.create_superuser("agent", "agent@example.com", "pw")
    server = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "pgflow_mcp", "--user", "agent"],
        cwd=str(ROOT),
        env={**os.environ, "PGFLOW_TEST_DB_NAME": connection.settings_dict["NAME"]},
    )

    async def ask() -> tuple[dict, dict]:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            run = await session.call_tool("get_run", {"run_id": int(result.id)})
            found = await session.call_tool("search_runs", {"query": "status:finished"})
            assert not run.is_error and not found.is_error, (run.content, found.content)
            return _tool_value(run), _tool_value(found)

    run, found = asyncio.run(ask())
    assert "tests.django_tasks.add" in json.dumps(run) and '"task"' in json.dumps(run)
    assert "tests.django_tasks.add" in json.dumps(found)


@pytest.mark.django_db
def test_validate_on_enqueue(settings):
    # django-tasks-db's case: a task made valid, enqueued once its queue is no longer the backend's.
    moved = t.plain.using(queue_name="urgent")
    settings.TASKS = {**settings.TASKS, "default": {**settings.TASKS["default"], "QUEUES": ["default"]}}
    with pytest.raises(InvalidTask, match="Queue 'urgent' is not valid for backend"):
        moved.enqueue(1)

    async def aenqueue():
        return await moved.aenqueue(1)

    with pytest.raises(InvalidTask, match="Queue 'urgent' is not valid for backend"):
        asyncio.run(aenqueue())
    assert not WorkflowRun.objects.exists()


def test_a_complex_exception(start_worker):
    result = t.complex_exception.enqueue()
    start_worker()
    finished(result)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in result.errors[0].traceback
    assert result.errors[0].traceback.endswith("ValueError: This task failed\n")
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
