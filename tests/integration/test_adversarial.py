"""The adversarial review's attacks on the real store, committer and runner, forced deterministically.

Each test reproduces one way the review broke a guarantee (issue 16); docs/reliability.md
lists them.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

import pgflow
from pgflow import InputTooLarge, store
from pgflow.core import errors as error_capture
from pgflow.core.flow import Outcome
from pgflow.exceptions import StepTimeout
from pgflow.models import Event, Step, WorkflowRun
from pgflow.runtime import sweep
from pgflow.runtime.committer import Committer
from pgflow.runtime.runner import Runner
from pgflow.testing import run_workflow
from tests import adversarial_workflows as aw
from tests import workflows as wf
from tests.connections import other_connection

pytestmark = pytest.mark.django_db(transaction=True)


def claim_all(limit=100):
    return {c.run_id: c for c in store.claim(worker="t", queues=["workflows"], limit=limit)}


def events(run):
    return list(Event.objects.filter(run_id=run.pk).order_by("id").values_list("event", flat=True))


def assert_every_closed_attempt_has_an_event():
    closed = Step.objects.exclude(status__in=["scheduled", "waiting", "in_progress"])
    for attempt in closed:
        assert Event.objects.filter(step=attempt).exists(), (attempt.step_name, attempt.status, attempt.outcome)


@pytest.fixture
def second_connection():
    """A second session, as a webhook holding a run's row lock in its own transaction."""
    conn = other_connection()
    yield conn
    conn.rollback()
    conn.close()


def hold_run_lock(conn, run_id):
    conn.execute("SELECT 1 FROM pgflow_run WHERE id = %s FOR UPDATE", [run_id])


# --- 1. a timed-out attempt is applied once ---------------------------------------------------


def test_a_completion_and_its_timeout_in_one_group_commit_apply_once():
    run = aw.ReturnsAtItsTimeout.start()
    (held,) = claim_all().values()
    timeout = error_capture.capture(StepTimeout("ran past 0.2s"), backtrace_lines=5)
    items = [
        store.Finished(claim=held, outcome=Outcome(kind="complete"), output={"done": True}),
        store.Finished(claim=held, outcome=Outcome(kind="reattempt"), error=timeout),
    ]
    # Today both applied (or the second broke pgflow_step_one_open and failed the whole batch).
    assert store.finish_many(items) == [True, False]
    assert events(run) == ["started", "step_completed"]
    assert list(Step.objects.filter(run=run).order_by("id").values_list("step_name", "status")) == [
        ("slow", "completed"),
        ("after", "scheduled"),
    ]


def test_the_runner_hands_over_one_outcome_when_the_body_returns_just_as_its_timeout_fires():
    """The race the review saw in 4 of 300 runs, forced: the timeout fires while the body
    runs, the body then returns, and both outcomes would reach the same group commit."""
    handed: list[store.Finished] = []
    runner = Runner(finish=lambda item: handed.append(item) or True)
    aw.release.clear()
    aw.entered.clear()
    run = aw.ReturnsAtItsTimeout.start()
    (held,) = claim_all().values()
    body = threading.Thread(target=runner.execute, args=(held,))
    body.start()
    assert aw.entered.wait(10)
    runner.overdue(held.started_at.replace(year=held.started_at.year + 1))
    runner.time_out(held.token)  # the StepTimeout is handed over first
    aw.release.set()  # then the body returns
    body.join(10)
    assert store.finish_many(handed) == [True] * len(handed)  # one group commit takes whatever was handed
    assert len(handed) == 1
    assert events(run) == ["started", "step_failed", "reattempted"]
    assert_every_closed_attempt_has_an_event()


def test_an_attempt_closed_because_its_run_stopped_has_an_event():
    run = wf.ThreeSteps.start()
    (held,) = claim_all().values()
    WorkflowRun.objects.filter(pk=run.pk).update(status="paused")  # as the double outcome left it
    assert store.prepare(held) is None
    assert Step.objects.get(pk=held.step_id).status == "cancelled"
    assert_every_closed_attempt_has_an_event()


# --- 2. one bad row never fails the other runs' outcomes -------------------------------------


def test_a_batch_with_an_unstorable_output_applies_the_others_and_records_the_bad_ones_error():
    healthy = [aw.Quick.start() for _ in range(3)]
    poison = aw.Quick.start()
    held = claim_all()
    committer = Committer()
    try:
        items = [
            store.Finished(claim=held[run.pk], outcome=Outcome(kind="complete"), output={"n": run.pk})
            for run in healthy
        ]
        # Bypasses the runner's check on purpose: a value PostgreSQL refuses reaching the batch.
        items.insert(
            1,
            store.Finished(
                claim=held[poison.pk], outcome=Outcome(kind="complete"), output={"name": "report-\udcff.csv"}
            ),
        )
        batch = [(item, Future()) for item in items]
        committer._apply(batch)  # one group commit of the four, as the committer's loop makes it
        results = [future.result(5) for _, future in batch]
    finally:
        committer.stop()
    assert results == [True, False, True, True]
    for run in healthy:
        assert Step.objects.get(run=run, step_name="one").status == "completed"
    poisoned = WorkflowRun.objects.get(pk=poison.pk)
    failed = Step.objects.get(run=poison, step_name="one")
    assert poisoned.status == "paused"
    assert (failed.status, failed.outcome) == ("failed", "paused")
    assert failed.error_class in {"django.db.utils.DataError", "UnicodeEncodeError"}, failed.error_class
    assert "may crash the worker" not in poisoned.paused_reason


def test_an_error_message_with_a_nul_and_a_lone_surrogate_is_recorded_readably():
    run = wf.ThreeSteps.start()
    (held,) = claim_all().values()
    error = error_capture.capture(ValueError("bad \x00 name report-\udcff.csv"), backtrace_lines=5)
    assert store.finish_many([store.Finished(claim=held, outcome=Outcome(kind="pause"), error=error)]) == [True]
    failed = Step.objects.get(pk=held.step_id)
    assert failed.error_message == "bad \\x00 name report-\\udcff.csv"
    assert "report-\\udcff.csv" in WorkflowRun.objects.get(pk=run.pk).paused_reason


def test_a_step_returning_a_lone_surrogate_fails_through_its_policy_naming_it():
    run = run_workflow(aw.FileName.start(input={"poison": True}))
    failed = Step.objects.get(run=run, step_name="list_dir")
    assert (run.status, failed.error_class) == ("paused", "ValueError")
    assert "lone surrogate" in failed.error_message


# --- 3. bad input is a clear error ------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: wf.ThreeSteps.start(input={"x": "\ud800"}),
        lambda: wf.ThreeSteps.start(input={"\udcff": 1}),
        lambda: wf.ThreeSteps.start(key="order-\udcff"),
        lambda: pgflow.signal(wf.WaitsForPayment.start(), "go", {"x": "\ud800"}),
        lambda: pgflow.signal(wf.WaitsForPayment.start(), "go-\udcff"),
    ],
)
def test_a_lone_surrogate_is_a_value_error_naming_it_and_nothing_is_stored(call):
    before = (WorkflowRun.objects.count(), pgflow.models.Signal.objects.count())
    with pytest.raises(ValueError, match="lone surrogate") as raised:
        call()
    assert not isinstance(raised.value, UnicodeEncodeError)
    runs, signals = before
    assert pgflow.models.Signal.objects.count() == signals
    assert WorkflowRun.objects.count() - runs in (0, 1)  # the signal tests started their target run


def test_a_signal_payload_has_a_size_limit_like_an_input(settings):
    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "MAX_INPUT_BYTES": 1000}
    run = wf.WaitsForPayment.start()
    with pytest.raises(InputTooLarge, match="signal payload is .* bytes as JSON; the limit is 1000"):
        pgflow.signal(run, "payment", {"blob": "x" * 2000})
    assert not run.signal_set.exists()
    pgflow.signal(run, "payment", {"blob": "x" * 100})


# --- 4. a run another transaction holds does not stall the others ----------------------------


def test_the_group_commit_applies_what_it_can_lock_and_leaves_a_held_run_for_later(second_connection):
    held_run, *others = [wf.ThreeSteps.start() for _ in range(4)]
    held = claim_all()
    hold_run_lock(second_connection, held_run.pk)
    items = [
        store.Finished(claim=held[run.pk], outcome=Outcome(kind="complete"), output={"n": 1})
        for run in (held_run, *others)
    ]
    answer: list = []
    worker = threading.Thread(target=lambda: answer.append(store.finish_many(items)), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(5)
    took = time.monotonic() - started
    second_connection.rollback()  # let go, whatever happened
    worker.join(10)
    assert took < 2, f"finish_many waited {took:.1f}s on another transaction's lock"
    assert answer == [[None, True, True, True]]
    for run in others:
        assert WorkflowRun.objects.get(pk=run.pk).current_step == "two"
    assert store.finish_many(items[:1]) == [True]  # applied once its run is free


def test_the_committer_retries_an_outcome_whose_run_was_held(second_connection):
    run = wf.ThreeSteps.start()
    (held,) = claim_all().values()
    hold_run_lock(second_connection, run.pk)
    committer = Committer()
    try:
        future = committer.submit_later(store.Finished(claim=held, outcome=Outcome(kind="complete"), output=1))
        time.sleep(0.3)
        assert not future.done()
        wf.ThreeSteps.start()
        (other_claim,) = claim_all().values()
        assert committer.submit(store.Finished(claim=other_claim, outcome=Outcome(kind="complete"))) is True
        second_connection.rollback()
        assert future.result(5) is True
    finally:
        committer.stop()
    assert WorkflowRun.objects.get(pk=run.pk).current_step == "two"


# --- 6. a changed definition ------------------------------------------------------------------


def deploy(order, *, waits=()):
    """The class at one path with steps ``order`` (``waits``: those that wait for a signal "go"):
    a deploy, as the registry sees it (a class created again under a path replaces the old one)."""

    def make(name):
        if name in waits:

            def waiting(self, signal):
                return name

            waiting.__name__ = name
            return pgflow.step(wait_for="go")(waiting)

        def body(self):
            return name

        body.__name__ = name
        return pgflow.step(body)

    attrs = {"__module__": __name__, "__qualname__": "Changing", **{name: make(name) for name in order}}
    return type("Changing", (pgflow.Workflow,), attrs)


def completed(run):
    return list(Step.objects.filter(run=run, status="completed").order_by("id").values_list("step_name", flat=True))


def test_a_reordered_definition_never_skips_a_step_and_says_so():
    run = deploy("abc").start()
    (held,) = claim_all().values()
    store.finish(held, Outcome(kind="complete"), output="a")
    run.pause(actor="ops")  # paused at b
    deploy("acb")  # deployed meanwhile
    run.resume(actor="ops")
    run = run_workflow(run)
    # Today: b ran, then the run finished without c and nothing said so.
    assert (run.status, completed(run)) == ("finished", ["a", "c", "b"])
    (changed,) = Event.objects.filter(run=run, event="definition_changed")
    assert changed.details["next_step"] == "c" and changed.details["not_run"] == ["c", "b"]


def test_a_step_inserted_before_the_current_one_runs_by_the_runs_history():
    run = deploy("abc").start()
    (held,) = claim_all().values()
    store.finish(held, Outcome(kind="complete"), output="a")  # b is scheduled
    deploy("axbc")  # x inserted before b while b is due
    run = run_workflow(run)
    assert (run.status, completed(run)) == ("finished", ["a", "b", "x", "c"])
    assert Event.objects.filter(run=run, event="definition_changed", details__next_step="x").exists()


def test_a_signal_wait_whose_step_turned_plain_is_woken_by_the_sweep():
    run = run_workflow(deploy("ab", waits="b").start())
    assert Step.objects.get(run=run, step_name="b").status == "waiting"
    deploy("ab")  # b no longer waits for a signal
    assert sweep.run()["stale_waits"] == 1
    woken = Step.objects.get(run=run, step_name="b")
    assert woken.status == "scheduled"
    run = run_workflow(run)
    assert (run.status, completed(run)) == ("finished", ["a", "b"])
    assert Event.objects.filter(run=run, event="definition_changed", step=woken).exists()


def test_a_signal_to_a_wait_whose_step_turned_plain_wakes_it():
    run = run_workflow(deploy("ab", waits="b").start())
    deploy("ab")
    pgflow.signal(run, "go")
    assert Step.objects.get(run=run, step_name="b").status == "scheduled"


# --- 3. the admin answers bad input with a clear error, never a 500 ----------------------------

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ('{"name": "report-\\udcff.csv"}', "lone surrogate"),
        ('{"a": "x\\u0000y"}', "NUL character"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_the_signal_form_refuses_an_unstorable_payload_naming_why(login, operator, payload, says):
    from tests.dashboard_support import control_url

    run = run_workflow(wf.WaitsForPayment.start())
    response = login(operator).post(control_url(run), {"action": "signal", "name": "payment", "payload": payload})
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not run.signal_set.exists()


@pytest.mark.parametrize("query", ["workflow_class=%00", "error_class=%00", "q=%00", "workflow_class=%ED%A0%80"])
def test_the_run_list_answers_a_nul_in_a_filter_with_no_runs_not_a_500(login, viewer, query):
    from tests.dashboard_support import changelist_url

    wf.ThreeSteps.start()
    response = login(viewer).get(f"{changelist_url()}?{query}")
    assert response.status_code == 200
    if not query.startswith("q="):  # the admin drops a search of a lone NUL itself
        assert response.context["cl"].result_count == 0


# --- smaller items ----------------------------------------------------------------------------


def test_fan_out_members_that_never_ran_because_their_run_was_cancelled_count_as_skipped():
    from types import SimpleNamespace

    from pgflow import fanout
    from pgflow.models import Batch, BatchMember
    from tests import fanout_workflows as fw
    from tests.integration.test_fanout import run_due_step, tasks

    run = fw.Fan.start(input=tasks(*[("tests.fanout_tasks.double", [n]) for n in range(3)]))
    assert run_due_step(run) == "parked"
    batch = Batch.objects.get(run=run)
    run.cancel(actor="ops")
    for member in BatchMember.objects.filter(batch=batch):  # as django-q2 runs each task, then its hook
        result = fanout.run_member(str(batch.pk), member.position, member.func, *member.args)
        fanout.member_hook(
            SimpleNamespace(
                name=fanout.task_name(batch.pk, member.position),
                success=True,
                result=result,
                attempt_count=1,
                id=f"t{member.position}",
            )
        )
    assert set(BatchMember.objects.filter(batch=batch).values_list("status", flat=True)) == {"skipped"}
    batch.refresh_from_db()
    assert (batch.succeeded, batch.failed) == (0, 0)


def test_an_attempt_never_finishes_before_it_started_when_a_cancel_races_a_claim():
    from datetime import timedelta

    run = wf.ThreeSteps.start()
    # The claimer's clock ahead of the canceller's by a second, or a cancel that read the
    # clock just before the claim committed: the same inversion.
    (held,) = store.claim(worker="t", queues=["workflows"], limit=1, at=store.now() + timedelta(seconds=1))
    run.cancel(actor="ops")
    attempt = Step.objects.get(pk=held.step_id)
    assert attempt.finished_at >= attempt.started_at
    other = wf.ThreeSteps.start()
    (held,) = store.claim(worker="t", queues=["workflows"], limit=1, at=store.now() + timedelta(seconds=1))
    assert store.finish_many([store.Finished(claim=held, outcome=Outcome(kind="complete"))]) == [True]
    attempt = Step.objects.get(pk=held.step_id)
    assert attempt.finished_at >= attempt.started_at, other
