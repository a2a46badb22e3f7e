"""Exception policies and error capture through the engine, on a real PostgreSQL."""

from __future__ import annotations

import logging

import pytest

from pgflow.testing import run_workflow
from tests import fidelity_workflows as fw
from tests import policy_workflows as pw

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def reporter(settings):
    pw.REPORTED.clear()
    settings.PGFLOW = {**settings.PGFLOW, "ERROR_REPORTER": "tests.policy_workflows.collect"}
    return pw.REPORTED


@pytest.mark.parametrize(
    ("raised", "run_status", "outcomes", "reported"),
    [
        ("declined", "cancelled", ["cancelled"], []),  # class specific policy, report="never"
        ("lookup", "finished", ["skipped", "completed"], ["KeyError: 'sku-9'"]),  # KeyError is a LookupError
        ("other", "paused", ["paused"], ["ValueError: bad value"]),  # class blanket policy
        # step policy first: 2 reattempts, then the terminal pause, reported only then
        ("connection", "paused", ["reattempted", "reattempted", "paused"], ["ConnectionError: gateway down"]),
    ],
)
def test_resolution_order_and_report_modes(raised, run_status, outcomes, reported, reporter):
    run = run_workflow(pw.Policies.start(input={"raise": raised}))
    assert run.status == run_status
    assert list(run.steps.values_list("outcome", flat=True)) == outcomes
    assert [message for message, _ in reporter] == reported
    failed = run.steps.filter(status="failed").first()
    assert failed is not None
    assert failed.error_class.rsplit(".", 1)[-1] in {"PaymentDeclined", "KeyError", "ValueError", "ConnectionError"}


def test_the_reporter_hears_the_context():
    run = run_workflow(pw.Policies.start(input={"raise": "other"}))
    ((message, context),) = pw.REPORTED
    assert context == {
        "run_id": run.pk,
        "workflow_class": "tests.policy_workflows.Policies",
        "step": "act",
        "attempt": 1,
        "action": "paused",
    }


def test_a_reporter_that_raises_is_logged_and_the_run_still_moves(settings, caplog):
    settings.PGFLOW = {**settings.PGFLOW, "ERROR_REPORTER": "tests.policy_workflows.explode"}
    with caplog.at_level(logging.ERROR, logger="pgflow"):
        run = run_workflow(pw.Policies.start(input={"raise": "other"}))
    assert run.status == "paused"
    assert "ERROR_REPORTER raised while reporting an error of run" in caplog.text


def test_without_a_reporter_errors_go_to_the_pgflow_logger(settings, caplog):
    settings.PGFLOW = {k: v for k, v in settings.PGFLOW.items() if k != "ERROR_REPORTER"}
    with caplog.at_level(logging.ERROR, logger="pgflow"):
        run_workflow(pw.Policies.start(input={"raise": "other"}))
    assert "step act of run" in caplog.text
    assert "ValueError: bad value" in caplog.text


@pytest.mark.parametrize(
    ("how", "run_status", "outcomes", "reported"),
    [
        ("skip", "finished", ["skipped"], ["ValueError: attempt 1 failed"]),
        (
            "reattempt",
            "paused",
            ["reattempted", "paused"],
            ["ValueError: attempt 1 failed", "ValueError: attempt 2 failed"],
        ),
        ("none", "paused", ["paused"], ["ValueError: attempt 1 failed"]),
        ("raise", "paused", ["paused"], ["ValueError: attempt 1 failed", "LookupError: handler broke"]),
    ],
)
def test_handler_paths(how, run_status, outcomes, reported):
    run = run_workflow(pw.Handled.start(input={"handler": how}))
    assert run.status == run_status
    assert list(run.steps.values_list("outcome", flat=True)) == outcomes
    assert [message for message, _ in pw.REPORTED] == reported


def test_a_20000_character_message_is_cut_to_10000():
    run = run_workflow(pw.Chained.start(input={"kind": "long"}))
    step = run.steps.get()
    assert len(step.error_message) == 10_000
    assert step.error_message.endswith("…")
    assert step.error_message.startswith("xxxx")


def test_a_cyclic_cause_chain_stops_where_it_repeats():
    step = run_workflow(pw.Chained.start(input={"kind": "cycle"})).steps.get()
    assert step.error_causes == [{"class": "KeyError", "message": "'second'"}]


def test_a_deep_cause_chain_is_cut_at_five():
    step = run_workflow(pw.Chained.start(input={"kind": "deep"})).steps.get()
    assert [cause["message"] for cause in step.error_causes] == ["level 1", "level 2", "level 3", "level 4", "level 5"]
    assert step.error_class == "RuntimeError"


@pytest.mark.parametrize(("suppress", "causes"), [(False, [{"class": "KeyError", "message": "'missing'"}]), (True, [])])
def test_context_is_followed_unless_suppressed(suppress, causes):
    step = run_workflow(pw.Chained.start(input={"kind": "context", "suppress": suppress})).steps.get()
    assert step.error_causes == causes


def test_backtrace_is_cut_to_the_setting(settings):
    settings.PGFLOW = {**settings.PGFLOW, "ERROR_BACKTRACE_LINES": 1}
    step = run_workflow(pw.Chained.start(input={"kind": "long"})).steps.get()
    assert "policy_workflows.py" in step.error_backtrace
    assert "pgflow/runtime" not in step.error_backtrace
    assert "pgflow/store.py" not in step.error_backtrace


def test_a_later_success_leaves_the_failed_attempts_history():
    run = run_workflow(pw.Reattempted.start())
    assert run.status == "finished"
    rows = list(run.steps.values_list("attempt", "status", "error_message"))
    assert rows == [(1, "failed", "attempt 1"), (2, "failed", "attempt 2"), (3, "completed", None)]
    assert run.last_error() is None


def test_the_runs_current_error_is_the_last_attempts_and_resume_clears_it():
    run = run_workflow(pw.Policies.start(input={"raise": "other"}))
    assert run.last_error()["error_message"] == "bad value"
    run.resume()
    assert run.last_error() is None
    assert run.steps.first().error_message == "bad value"


# -- flow control and the user's namespace ---------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "run_status", "outcomes"),
    [
        ("skip", "finished", ["skipped", "completed"]),
        ("pause", "paused", ["paused"]),
        ("cancel", "cancelled", ["cancelled"]),
        ("finish", "finished", ["finished"]),
        ("reattempt", "finished", ["reattempted", "completed", "completed"]),
    ],
)
def test_a_verb_inside_except_exception_still_ends_the_step(verb, run_status, outcomes):
    fw.SWALLOWED.clear()
    run = run_workflow(fw.Guarded.start(input={"verb": verb}))
    assert fw.SWALLOWED == []
    assert run.status == run_status
    assert list(run.steps.order_by("id").values_list("outcome", flat=True)) == outcomes
    assert "kept running" not in run.steps.values_list("output", flat=True)


def test_a_verb_inside_except_exception_in_a_policy_handler_still_decides():
    fw.SWALLOWED.clear()
    run = run_workflow(fw.GuardedHandler.start())
    assert fw.SWALLOWED == []
    assert run.status == "finished"
    assert list(run.steps.order_by("id").values_list("step_name", "status", "outcome")) == [
        ("fail", "failed", "skipped"),
        ("after", "completed", "completed"),
    ]


@pytest.mark.parametrize(
    ("given", "run_status", "outputs"),
    [
        ({}, "finished", {"maybe": "the user's invoke", "last": "the user's decide"}),
        ({"skip": True}, "finished", {"last": "the user's decide"}),
        ({"cancel": True}, "cancelled", {}),
    ],
)
def test_helpers_named_like_the_engines_methods_are_the_users(given, run_status, outputs):
    run = run_workflow(fw.OwnHelpers.start(input=given))
    assert run.status == run_status
    assert dict(run.steps.filter(status="completed").values_list("step_name", "output")) == outputs
    assert not run.steps.filter(status="failed").exists()


def test_a_verb_called_in_a_cancel_if_condition_applies():
    run = run_workflow(fw.VerbInCondition.start(input={"gone": True}))
    assert run.status == "cancelled"
    assert list(run.steps.values_list("outcome", flat=True)) == ["cancelled"]
    assert run_workflow(fw.VerbInCondition.start()).status == "finished"


@pytest.mark.parametrize(
    ("raised", "run_status", "outcomes"),
    [
        ("declined", "cancelled", ["cancelled"]),  # "PaymentDeclined", a bare name
        ("integrity", "finished", ["skipped", "completed"]),  # "django.db.IntegrityError", a re-export
        ("busy", "finished", ["skipped", "completed"]),  # a tag class through multiple inheritance
        ("other", "paused", ["paused"]),  # nothing matches: the default
    ],
)
def test_matchers_by_bare_name_re_export_and_tag_class(raised, run_status, outcomes):
    run = run_workflow(fw.NamedMatchers.start(input={"raise": raised}))
    assert run.status == run_status
    assert list(run.steps.order_by("id").values_list("outcome", flat=True)) == outcomes


def test_an_error_raised_inside_django_shows_the_bodys_line():
    run = run_workflow(fw.Validates.start(input={"email": "not an address"}))
    step = run.steps.get()
    assert step.error_class == "django.core.exceptions.ValidationError"
    frames = [line for line in step.error_backtrace.splitlines() if line.startswith('  File "')]
    assert len(frames) == 1 and frames[0].endswith(", in check_email")
    assert 'validate_email(self.input["email"])  # the line error_backtrace must show' in step.error_backtrace
    assert "site-packages" not in step.error_backtrace and "pgflow/runtime" not in step.error_backtrace


def test_backtrace_cleaner_setting_names_another_rule(settings):
    settings.PGFLOW = {**settings.PGFLOW, "BACKTRACE_CLEANER": "tests.fidelity_workflows.innermost_only"}
    run = run_workflow(fw.Validates.start(input={"email": "not an address"}))
    frames = [line for line in run.steps.get().error_backtrace.splitlines() if line.startswith('  File "')]
    assert len(frames) == 1 and "site-packages" in frames[0]  # Django's innermost frame, as the rule says
