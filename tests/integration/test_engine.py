"""The engine on a real PostgreSQL: start, steps in order, flow control, policies' default,
timeouts, operator controls and their audit trail."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import transaction

import pgflow
from pgflow import store
from pgflow.models import Event, Step, WorkflowRun
from pgflow.runtime.runner import Runner
from pgflow.store import scheduling
from pgflow.testing import run_workflow
from tests import workflows as wf
from tests.rollback import RolledBack

pytestmark = pytest.mark.django_db


def events(run):
    return list(run.events.values_list("event", flat=True))


def test_start_creates_a_run_and_its_first_attempt():
    run = wf.ThreeSteps.start(input={"a": 1})
    assert run.status == "running"
    assert run.workflow_class == "tests.workflows.ThreeSteps"
    assert run.definition_digest == wf.ThreeSteps.definition_digest()
    assert run.current_step == "one"
    (step,) = run.steps
    assert (step.step_name, step.attempt, step.status, step.queue) == ("one", 1, "scheduled", "workflows")
    assert events(run) == ["started"]


def test_three_steps_run_in_order_and_pass_outputs():
    run = run_workflow(wf.ThreeSteps.start())
    assert run.status == "finished"
    assert run.finished_at is not None
    assert [(s.step_name, s.status, s.output) for s in run.steps] == [
        ("one", "completed", {"n": 1}),
        ("two", "completed", {"n": 2}),
        ("three", "completed", {"n": 3}),
    ]
    assert events(run) == ["started", "step_completed", "step_completed", "step_completed", "finished"]


def test_key_makes_start_idempotent():
    first = wf.ThreeSteps.start(key="order-1")
    again = wf.ThreeSteps.start(key="order-1")
    assert again.pk == first.pk
    assert WorkflowRun.objects.filter(key="order-1").count() == 1
    other_class = wf.Delayed.start(key="order-1")
    assert other_class.pk != first.pk


def test_a_rolled_back_start_leaves_nothing():
    with pytest.raises(RolledBack), transaction.atomic():
        assert wf.ThreeSteps.start().pk is not None
        raise RolledBack
    assert WorkflowRun.objects.count() == 0
    assert Step.objects.count() == 0
    assert Event.objects.count() == 0


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        (
            {"when": object()},
            TypeError,
            "input must be JSON-serialisable: Object of type object is not JSON serializable",
        ),
        ("text", TypeError, "input must be a dict"),
        ({"big": "x" * 2_000_000}, pgflow.InputTooLarge, "the limit is 1048576"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(given, error, message):
    with pytest.raises(error, match=message):
        wf.ThreeSteps.start(input=given)
    assert WorkflowRun.objects.count() == 0


def test_a_subject_must_be_a_saved_model():
    with pytest.raises(ValueError, match="saved model instance"):
        wf.ThreeSteps.start(subject=User(username="unsaved"))
    with pytest.raises(TypeError, match="subject must be a saved model instance or None, got str"):
        wf.ThreeSteps.start(subject="alice")
    user = User.objects.create(username="alice")
    run = wf.ThreeSteps.start(subject=user)
    assert WorkflowRun.objects.get(pk=run.pk).subject == user


def test_first_step_wait_is_honoured():
    before = store.now()
    run = wf.Delayed.start()
    step = run.steps.get()
    assert step.scheduled_at >= before + timedelta(seconds=3600)
    # not due: a claim takes nothing, and says when it comes due (the worker's wait)
    claimed = store.claim(worker="t", queues=["workflows"], limit=10)
    assert claimed == [] and claimed.next_due == step.scheduled_at
    run = run_workflow(run, skip_waits=False)
    assert run.status == "running"
    assert run_workflow(run).status == "finished"


@pytest.mark.parametrize(
    ("verb", "run_status", "first_status", "first_outcome", "steps"),
    [
        ("pause", "paused", "cancelled", "paused", ["decide"]),
        ("cancel", "cancelled", "cancelled", "cancelled", ["decide"]),
        ("skip", "finished", "skipped", "skipped", ["decide", "after"]),
        ("finish", "finished", "completed", "finished", ["decide"]),
    ],
)
def test_flow_control_verbs(verb, run_status, first_status, first_outcome, steps):
    run = run_workflow(wf.FlowVerbs.start(input={"verb": verb}))
    assert run.status == run_status
    first = run.steps.first()
    assert (first.status, first.outcome) == (first_status, first_outcome)
    assert [s.step_name for s in run.steps] == steps


def test_reattempt_schedules_a_fresh_attempt():
    run = run_workflow(wf.FlowVerbs.start(input={"verb": "reattempt"}))
    assert run.status == "finished"
    assert [(s.step_name, s.attempt, s.outcome) for s in run.steps] == [
        ("decide", 1, "reattempted"),
        ("decide", 2, "reattempted"),
        ("decide", 3, "completed"),
        ("after", 1, "completed"),
    ]
    assert events(run).count("reattempted") == 2


def test_cancel_if_and_skip_if_apply_before_the_body():
    cancelled = run_workflow(wf.Guarded.start(input={"cancel": True}))
    assert cancelled.status == "cancelled"
    assert [(s.step_name, s.status) for s in cancelled.steps] == [("maybe", "cancelled")]
    skipped = run_workflow(wf.Guarded.start(input={"skip": True}))
    assert skipped.status == "finished"
    assert [(s.step_name, s.status, s.output) for s in skipped.steps] == [
        ("maybe", "skipped", None),
        ("last", "completed", "last"),
    ]


def test_an_exception_pauses_the_run_with_the_error_recorded():
    run = run_workflow(wf.Failing.start())
    assert run.status == "paused"
    step = run.steps.get()
    assert (step.status, step.outcome, step.error_class, step.error_message) == (
        "failed",
        "paused",
        "RuntimeError",
        "boom",
    )
    assert 'raise RuntimeError("boom")' in step.error_backtrace
    assert "boom" in run.paused_reason
    assert events(run) == ["started", "step_failed", "paused"]


def test_reattempt_policy_counts_then_applies_the_terminal_action():
    run = run_workflow(wf.Retrying.start())
    assert run.status == "cancelled"
    assert [(s.attempt, s.outcome) for s in run.steps] == [(1, "reattempted"), (2, "reattempted"), (3, "cancelled")]


def test_timeout_fails_the_attempt_and_ignores_the_late_return():
    run = wf.TimesOut.start(input={"sleep": 0})
    held = store.claim(worker="t", queues=["workflows"], limit=1)[0]
    runner = Runner()
    prepared = store.prepare(held)
    runner._active[held.token] = prepared
    runner.time_out(held.token)  # as the heartbeat does once timeout_at passed
    step = Step.objects.get(pk=held.step_id)
    assert (step.status, step.error_class) == ("failed", "pgflow.exceptions.StepTimeout")
    assert "ran past its timeout of 0.5s" in step.error_message
    # the body returns late: nothing is applied
    assert store.finish(held, pgflow.core.flow.Outcome(kind="complete"), output="too late") is False
    step.refresh_from_db()
    assert step.output is None
    assert WorkflowRun.objects.get(pk=run.pk).status == "paused"


def test_operator_controls_are_recorded_with_their_actor():
    user = User.objects.create(username="ops")
    run = wf.Delayed.start()
    run.pause(actor=user)
    assert run.status == "paused"
    assert run.steps.get().outcome == "paused"
    with pytest.raises(pgflow.InvalidTransition, match="cannot pause a paused run"):
        run.pause()
    run.resume(actor=user)
    assert run.status == "running"
    assert [(s.attempt, s.status) for s in run.steps] == [(1, "cancelled"), (2, "scheduled")]
    run.skip_step(actor="cli")
    assert run.status == "finished"
    with pytest.raises(pgflow.InvalidTransition, match="cannot cancel a finished run"):
        run.cancel()
    assert [(e.event, e.actor) for e in run.events] == [
        ("started", "system"),
        ("paused", "user:ops"),
        ("resumed", "user:ops"),
        ("skipped", "cli"),
        ("finished", "system"),
    ]


def test_pausing_a_step_in_progress_lets_its_body_finish_then_parks():
    run = wf.ThreeSteps.start()
    held = store.claim(worker="t", queues=["workflows"], limit=1)[0]
    prepared = store.prepare(held)
    run.pause(actor="ops")
    assert store.finish(held, pgflow.core.flow.Outcome(kind="complete"), output={"n": 1})
    run.refresh_from_db()
    assert run.status == "paused"
    assert run.current_step == "two"
    assert [(s.step_name, s.status) for s in run.steps] == [("one", "completed")]
    assert prepared.step.step_name == "one"
    run.resume()
    assert run_workflow(run).status == "finished"


def test_cancel_closes_an_attempt_in_progress_and_its_late_completion_is_ignored():
    run = wf.ThreeSteps.start()
    held = store.claim(worker="t", queues=["workflows"], limit=1)[0]
    run.cancel()
    assert store.finish(held, pgflow.core.flow.Outcome(kind="complete")) is False
    assert [(s.step_name, s.status) for s in run.steps] == [("one", "cancelled")]


def test_a_workflow_path_that_no_longer_imports_pauses_the_run():
    run = wf.ThreeSteps.start()
    WorkflowRun.objects.filter(pk=run.pk).update(workflow_class="tests.gone.Missing")
    run = run_workflow(run)
    assert run.status == "paused"
    step = run.steps.get()
    assert step.error_class == "pgflow.exceptions.WorkflowNotFound"
    assert "tests.gone.Missing" in run.paused_reason


def test_a_failing_wait_pauses_the_run_naming_it_on_both_commit_paths():
    one = run_workflow(wf.BadWait.start())
    assert one.status == "paused"
    assert one.current_step == "second"
    assert "the wait of step 'second' failed: LookupError: no such customer timezone" in one.paused_reason
    assert list(one.steps.values_list("step_name", "status")) == [("first", "completed")]
    # the worker's group commit, with a healthy run in the same batch
    batch_bad, healthy = wf.BadWait.start(), wf.ThreeSteps.start()
    held = store.claim(worker="t", queues=["workflows"], limit=10)
    assert store.finish_many(
        [store.Finished(claim=c, outcome=pgflow.core.flow.Outcome(kind="complete")) for c in held]
    ) == [True, True]
    batch_bad.refresh_from_db()
    healthy.refresh_from_db()
    assert (batch_bad.status, batch_bad.current_step) == ("paused", "second")
    assert (healthy.status, healthy.current_step) == ("running", "two")
    with pytest.raises(scheduling.WaitFailed, match="the wait of step 'second' failed"):
        batch_bad.resume()


def test_a_failing_skip_if_pauses_the_run_with_the_error_recorded():
    run = run_workflow(wf.BadPredicate.start())
    assert run.status == "paused"
    step = run.steps.get()
    assert (step.status, step.error_class, step.error_message) == ("failed", "ZeroDivisionError", "predicate bug")
    assert run.paused_reason == "a cancel_if / skip_if of step 'guarded' failed: ZeroDivisionError: predicate bug"


def test_a_cancel_if_whose_query_fails_pauses_the_run_with_the_error_recorded():
    # The failed query aborts no transaction of pgflow's: the pause is recorded.
    run = run_workflow(wf.QueryingPredicate.start())
    assert run.status == "paused"
    step = run.steps.get()
    assert (step.status, step.error_class) == ("failed", "django.db.utils.ProgrammingError")
    assert 'relation "no_such_orders_table" does not exist' in step.error_message
    assert run.paused_reason.startswith("a cancel_if / skip_if of step 'guarded' failed: ProgrammingError: ")


def test_a_step_reached_while_paused_keeps_its_wait_on_resume():
    run = wf.WaitAfterPause.start()
    held = store.claim(worker="t", queues=["workflows"], limit=1)[0]
    store.prepare(held)
    run.pause(actor="ops")
    store.finish(held, pgflow.core.flow.Outcome(kind="complete"))
    run.refresh_from_db()
    assert (run.status, run.current_step) == ("paused", "later")
    before = store.now()
    run.resume()
    later = run.steps.get(step_name="later")
    assert later.scheduled_at >= before + timedelta(minutes=59)


def test_a_claim_says_when_the_attempts_it_left_come_due():
    first, second = wf.ThreeSteps.start(), wf.ThreeSteps.start()
    delayed = wf.Delayed.start().steps.get()
    claimed = store.claim(worker="t", queues=["workflows"], limit=1)
    assert [c.run_id for c in claimed] == [first.pk]
    assert claimed.next_due == second.steps.get().scheduled_at  # due now: the worker claims again at once
    claimed = store.claim(worker="t", queues=["workflows"], limit=5)
    assert [c.run_id for c in claimed] == [second.pk]
    assert claimed.next_due == delayed.scheduled_at  # not the one it just took
    assert store.claim(worker="t", queues=["mail"], limit=5).next_due is None  # nothing scheduled there
