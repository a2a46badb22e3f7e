"""The example shop: its history generator and the demo's set-up."""

from __future__ import annotations

import inspect

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from example_project.shop import workflows as shop_workflows
from example_project.shop.history import generate
from pgflow import store
from pgflow.models import AccessToken, AlertRule, Batch, Schedule, Signal, Step, WorkflowRun
from pgflow_dashboard import timeline

pytestmark = pytest.mark.django_db


def test_the_history_has_the_shapes_the_engine_writes():
    assert generate(300, days=3, seed=4) == 300
    runs = WorkflowRun.objects.all()
    statuses = set(runs.values_list("status", flat=True))
    assert {"finished", "paused", "cancelled"} <= statuses
    now = store.now()
    for run in runs.filter(status="finished")[:50]:
        assert run.finished_at <= now
        assert run.events.first().event == "started"
        assert run.events.last().event == "finished"
        assert run.current_step is None
    for run in runs.filter(status="paused"):
        assert run.paused_reason
        assert run.events.filter(event="paused").exists()
    waited = Step.objects.filter(step_name="record_payment", status="completed").first()
    kinds = [
        s["kind"] for s in timeline.segments({f.name: getattr(waited, f.name) for f in Step._meta.fields}, now=now)
    ]
    assert kinds[:2] == ["waited", "waiting"]  # a signal step woken by its signal
    assert Signal.objects.filter(consumed_by__isnull=False).exists()
    assert Batch.objects.filter(failed__gt=0).exists()
    assert Step.objects.filter(outcome="reattempted", error_class__endswith="PaymentGatewayDown").exists()


def test_the_demo_sets_up_and_starts_runs_without_serving(capsys):
    call_command("pgflow_demo", "--no-serve", "--runs", "3", "--history", "0")
    out = capsys.readouterr().out
    assert "[pgflow demo] created the admin login admin" in out
    assert "started" in out
    assert get_user_model().objects.get(username="admin").check_password("pgflow-demo")
    assert WorkflowRun.objects.filter(workflow_class__endswith="OrderFulfilment").count() == 3
    # Every admin section has something in it, and the deliberate failures are announced.
    assert WorkflowRun.objects.filter(workflow_class__endswith=".Restock").count() == 1
    assert AlertRule.objects.filter(name="demo: any run paused").exists()
    assert Schedule.objects.filter(name="restock every 15 minutes").exists()
    assert AccessToken.objects.filter(name="demo agent").exists()
    assert "expect ERROR lines: the demo fails on purpose" in out
    assert "deliberate demo failure" in inspect.getsource(shop_workflows.OrderFulfilment.capture_funds)
