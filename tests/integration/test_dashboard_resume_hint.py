"""The run page warns that Resume re-runs a failed signal step with the signal it consumed."""

from __future__ import annotations

import pytest

import pgflow
from pgflow import step
from pgflow.testing import run_workflow
from tests.dashboard_support import run_url

pytest_plugins = ["tests.dashboard_fixtures"]
pytestmark = pytest.mark.django_db(transaction=True)


class Payment(pgflow.Workflow):
    @step(wait_for="paid")
    def charge(self, signal):
        return {"amount": int(signal.payload["amount"])}  # "lots" fails

    @step
    def explode(self):
        raise ValueError("no signal here")


def test_a_step_that_failed_on_its_signal_hints_before_resume(login, operator):
    run = run_workflow(Payment.start(), signals={"paid": {"amount": "lots"}})
    assert run.status == "paused"
    text = login(operator).get(run_url(run)).content.decode()
    assert (
        "Resume runs step charge again with the signal it already consumed. If that signal&#x27;s payload "
        "caused the failure, deploy a step that handles it before resuming, or Skip the step."
    ) in text
    # The hint is true: resuming runs the same signal again, and fails again.
    run.resume()
    run = run_workflow(run)
    assert run.status == "paused"
    assert list(run.steps.values_list("signal__payload", flat=True)) == [{"amount": "lots"}] * 2


def test_a_step_that_failed_without_a_signal_has_no_hint(login, operator):
    run = run_workflow(Payment.start(), signals={"paid": {"amount": 5}})
    assert run.status == "paused"  # explode failed
    assert "pgflow-resume-hint" not in login(operator).get(run_url(run)).content.decode()
