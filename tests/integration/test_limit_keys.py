"""A limit's or a singleton's key method that raises, or returns what PostgreSQL cannot
store: the step whose key it is is named, the previous step is never blamed."""

from __future__ import annotations

import logging

import pytest

from pgflow.models import Step, WorkflowRun
from pgflow.testing import run_workflow
from tests import flowcontrol_workflows as fc

pytestmark = pytest.mark.django_db(transaction=True)

OWN_KEY = f"c:{fc.OddKeys.workflow_path()}.second"


@pytest.mark.parametrize(
    ("tenant", "said"),
    [
        ("raise", "LookupError: no tenant for this run"),
        ("nul", r"step 'second': concurrency key 'tenant' returned 'acme\x00evil': it holds a NUL"),
    ],
)
def test_a_failing_limit_key_limits_under_the_steps_own_key_and_blames_no_step(tenant, said, caplog):
    run = fc.OddKeys.start(input={"tenant": tenant})
    with caplog.at_level(logging.ERROR, logger="pgflow"):
        run = run_workflow(run)
    assert run.status == "finished"
    attempts = list(Step.objects.filter(run=run).order_by("id").values_list("step_name", "status", "gate"))
    assert attempts == [("first", "completed", ""), ("second", "completed", OWN_KEY)]
    failed = [r for r in caplog.records if getattr(r, "action", "") == "limit_key_failed"]
    assert len(failed) == 1 and "step=second" in failed[0].getMessage() and said in failed[0].getMessage()


def test_a_limit_key_with_a_nul_on_the_first_step_still_starts_the_run():
    class FirstLimited(fc.OddKeys):
        @fc.step(concurrency=fc.pgflow.Limit(max=2, key="tenant"))
        def first(self):
            return "done"

    run = FirstLimited.start(input={"tenant": "nul"})
    assert Step.objects.get(run=run).gate == f"c:{FirstLimited.workflow_path()}.first"


@pytest.mark.parametrize(
    ("account", "error", "said"),
    [
        ("raise", LookupError, "no account for this run"),
        ("nul", ValueError, r"singleton key 'account' returned 'acme\\x00evil': it holds a NUL"),
    ],
)
def test_a_failing_singleton_key_refuses_the_start_and_leaves_nothing(account, error, said):
    with pytest.raises(error, match=said):
        fc.OddSingleton.start(input={"account": account})
    assert not WorkflowRun.objects.exists() and not Step.objects.exists()
