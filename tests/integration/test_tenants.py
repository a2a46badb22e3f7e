"""Tenants: PGFLOW["TENANT"]'s key stored on the run, inherited by children and re-runs, and
PGFLOW["TENANT_CONTEXT"] entered around each body, condition and wait of a run that has one.
(tests/acceptance/test_django_tenants.py does the same with django-tenants' schemas.)"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pgflow
from pgflow import schedules
from pgflow.exceptions import DefinitionError
from pgflow.models import Schedule, Step, WorkflowRun
from pgflow.testing import fire_schedule, run_workflow
from tests import tenant_workflows as tw

pytestmark = pytest.mark.django_db(transaction=True)

TENANTS = {"TENANT": "tests.tenant_workflows.current_tenant", "TENANT_CONTEXT": "tests.tenant_workflows.entered"}


@pytest.fixture
def tenanted(settings):
    settings.PGFLOW = {**settings.PGFLOW, **TENANTS}
    tw.ENTERED.clear()
    tw.NOTES.clear()


def test_start_stores_the_current_tenant_in_its_one_statement(tenanted):
    with tw.as_tenant("acme"), CaptureQueriesContext(connection) as queries:
        run = tw.Seen.start()
    assert len(queries) == 1, [q["sql"] for q in queries]  # the plain start: still one statement
    assert run.tenant == "acme"
    assert WorkflowRun.objects.get(pk=run.pk).tenant == "acme"
    with tw.as_tenant("globex"):
        keyed = tw.Seen.start(key="order-1")  # the general path
    assert WorkflowRun.objects.get(pk=keyed.pk).tenant == "globex"
    assert WorkflowRun.objects.get(pk=tw.Seen.start().pk).tenant is None  # no tenant current


def test_without_the_setting_a_run_has_no_tenant():
    with tw.as_tenant("acme"):
        run = tw.Seen.start()
    assert WorkflowRun.objects.get(pk=run.pk).tenant is None


def test_every_body_condition_and_wait_runs_in_the_runs_tenant(tenanted):
    with tw.as_tenant("acme"):
        run = tw.Seen.start()
    with tw.as_tenant("globex"):  # whatever is current where the worker runs it
        run = run_workflow(run)
    assert run.status == "finished"
    assert run.outputs == {"first": {"tenant": "acme"}, "second": {"tenant": "acme"}}
    assert tw.NOTES and set(tw.NOTES) == {"cancel_if:acme", "skip_if:acme", "wait:acme"}
    assert set(tw.ENTERED) == {"acme"}


def test_an_async_body_runs_in_the_runs_tenant(tenanted):
    with tw.as_tenant("acme"):
        run = tw.SeenAsync.start()
    assert run_workflow(run).outputs == {"only": {"tenant": "acme"}}


def test_a_run_without_a_tenant_enters_no_context(tenanted):
    run = run_workflow(tw.Seen.start())
    assert run.outputs == {"first": {"tenant": None}, "second": {"tenant": None}}
    assert tw.ENTERED == []


def test_child_runs_and_reruns_keep_the_tenant(tenanted):
    with tw.as_tenant("acme"):
        parent = tw.Spreads.start()
    with tw.as_tenant("globex"):
        parent = run_workflow(parent)
        children = list(WorkflowRun.objects.filter(parent=parent))
        assert len(children) == 2 and {child.tenant for child in children} == {"acme"}
        assert parent.outputs["spread"] == {"tenant": "acme"}  # a fan_out body too
        for child in children:
            assert run_workflow(child).outputs["first"] == {"tenant": "acme"}
        rerun = WorkflowRun.objects.get(pk=children[0].pk).rerun_from("second")
    assert rerun.tenant == "acme" and WorkflowRun.objects.get(pk=rerun.pk).tenant == "acme"
    assert run_workflow(rerun).outputs["second"] == {"tenant": "acme"}


def test_a_limit_and_a_rate_by_tenant_take_the_runs_tenant(tenanted):
    with tw.as_tenant("acme"):
        run = tw.PerTenant.start()
    step = Step.objects.get(run=run)
    assert (step.gate, step.gate_max, step.rate_gate) == ("c:tenant:acme", 2, "r:tenant:acme")
    untenanted = Step.objects.get(run=tw.PerTenant.start())
    assert (untenanted.gate, untenanted.rate_gate, untenanted.gated) == ("", "", False)  # not limited
    with tw.as_tenant("acme"):
        own = Step.objects.get(run=tw.OwnTenantMethod.start())
    assert own.gate == "c:from-the-method"  # a class's own tenant() still names the key


@pytest.mark.parametrize(
    ("returned", "said"),
    [
        (5, "the tenant key PGFLOW['TENANT'] returned must be a string or None, got int 5"),
        ("", "the tenant key PGFLOW['TENANT'] returned must be a non-empty string"),
        ("x" * 101, "more than 100"),
    ],
)
def test_a_bad_tenant_key_refuses_the_start_naming_the_setting(settings, returned, said):
    settings.PGFLOW = {**settings.PGFLOW, "TENANT": lambda: returned}
    with pytest.raises((TypeError, ValueError), match=said.replace("[", r"\[").replace("]", r"\]")):
        tw.Seen.start()
    assert not WorkflowRun.objects.exists()


def test_a_schedule_declared_for_a_tenant_starts_its_runs_as_that_tenant(tenanted):
    acme = fire_schedule(tw.Nightly, "acme nightly")
    with tw.as_tenant("initech"):  # whatever is current where the worker fires it
        globex = fire_schedule(tw.Nightly, "globex nightly")
    shared = fire_schedule(tw.Nightly, "shared nightly")
    assert [WorkflowRun.objects.get(pk=run.pk).tenant for run in (acme, globex, shared)] == ["acme", "globex", None]
    assert Schedule.objects.get(name="globex nightly").tenant == "globex"
    now = schedules.start_now(Schedule.objects.get(name="acme nightly").pk)
    assert now.tenant == "acme"
    assert run_workflow(acme).outputs == {"only": {"tenant": "acme"}}


def test_a_schedules_tenant_must_be_a_tenant_key():
    with pytest.raises(DefinitionError, match="Schedule 'x': tenant must be None or a tenant key .* got ''"):
        pgflow.Schedule(name="x", every=timedelta(hours=1), tenant="")


def test_the_plain_start_keeps_within_the_parameters_psycopg_caches_with_its_tenant():
    # Past psycopg's MAX_CACHED_STATEMENT_PARAMS every start parsed its statement again.
    from psycopg._queries import MAX_CACHED_STATEMENT_PARAMS  # lazy: psycopg's own limit, read where it is asked

    from pgflow.store import starting

    assert "tenant" in {field.attname for field in starting._plain_start_statement().run.fields}
    seen = []

    def wrapper(execute, sql, params, many, context):
        seen.append(len(params))
        return execute(sql, params, many, context)

    with tw.as_tenant("acme"), connection.execute_wrapper(wrapper):
        tw.Seen.start()
    assert seen and seen[0] <= MAX_CACHED_STATEMENT_PARAMS, seen
