"""Runs seen from their subject: ``pgflow.runs_for(obj)`` and ``pgflow.RunsRelation`` (the
example shop's ``Order.workflow_runs``), on the real PostgreSQL."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.db.models import Count
from django.test.utils import CaptureQueriesContext

import pgflow
from example_project.shop.models import Order
from pgflow.models import WorkflowRun
from pgflow.testing import run_workflow
from tests import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


def order(customer: str = "ada") -> Order:
    return Order.objects.create(customer=customer, email=f"{customer}@example.com", total_cents=1200)


def test_runs_for_is_the_runs_whose_subject_is_the_object():
    ada, bob = order("ada"), order("bob")
    user = User.objects.create_user("carol")  # another model whose pk is the same number
    User.objects.filter(pk=user.pk).update(id=ada.pk)
    user = User.objects.get(pk=ada.pk)
    first = wf.ThreeSteps.start(subject=ada)
    second = wf.Delayed.start(subject=ada)
    wf.ThreeSteps.start(subject=bob)
    wf.ThreeSteps.start(subject=user)
    wf.ThreeSteps.start()

    runs = pgflow.runs_for(ada)
    assert list(runs) == [second, first]  # newest first
    assert runs.filter(workflow_class=wf.ThreeSteps.workflow_path()).get() == first
    assert pgflow.runs_for(user).count() == 1
    assert pgflow.runs_for(order("dora")).count() == 0


def test_runs_for_refuses_what_cannot_be_a_subject():
    with pytest.raises(TypeError, match="runs_for\\(\\) takes a saved model instance, got int"):
        pgflow.runs_for(7)
    with pytest.raises(ValueError, match="this Order has no primary key"):
        pgflow.runs_for(Order(customer="x"))


def test_the_relation_has_the_usual_queryset_api():
    ada, bob = order("ada"), order("bob")
    finished = run_workflow(wf.ThreeSteps.start(subject=ada))
    waiting = wf.Delayed.start(subject=ada)
    wf.Delayed.start(subject=bob)

    assert ada.workflow_runs.count() == 2
    assert set(ada.workflow_runs.all()) == {finished, waiting}
    assert list(ada.workflow_runs.filter(status="finished")) == [finished]
    assert list(ada.workflow_runs.open()) == [waiting]  # the run queryset's own methods too
    # The join from the order's bigint id to the run's text subject_id, both ways.
    assert list(Order.objects.filter(workflow_runs__status="finished")) == [ada]
    counted = Order.objects.annotate(runs=Count("workflow_runs")).order_by("pk")
    assert [(o.customer, o.runs) for o in counted] == [("ada", 2), ("bob", 1)]


def test_prefetch_reads_a_page_of_orders_runs_in_one_query():
    orders = [order(name) for name in ("ada", "bob", "cy")]
    for index, each in enumerate(orders):
        for _ in range(index + 1):
            wf.Delayed.start(subject=each)
    wf.Delayed.start(subject=User.objects.create_user("ada"))  # a user with ada's id is not ada
    with CaptureQueriesContext(connection) as queries:
        fetched = list(Order.objects.order_by("pk").prefetch_related("workflow_runs"))
        counts = [len(each.workflow_runs.all()) for each in fetched]
    assert counts == [1, 2, 3]
    assert len(queries) == 2  # the orders, then all their runs
    for each in fetched:
        assert {run.subject_id for run in each.workflow_runs.all()} == {str(each.pk)}


def test_deleting_the_subject_keeps_its_runs():
    ada = order()
    ada_id = ada.pk
    run = run_workflow(wf.ThreeSteps.start(subject=ada))
    ada.delete()
    run = WorkflowRun.objects.get(pk=run.pk)
    assert run.status == "finished" and run.subject is None and run.subject_id == str(ada_id)


def test_the_relation_writes_nothing():
    ada, bob = order("ada"), order("bob")
    run = wf.Delayed.start(subject=bob)
    for write in (
        lambda: ada.workflow_runs.add(run),
        lambda: ada.workflow_runs.create(workflow_class="x"),
        lambda: ada.workflow_runs.clear(),
        lambda: ada.workflow_runs.set([run]),
    ):
        with pytest.raises(TypeError, match="shop.Order.workflow_runs is read-only"):
            write()
    assert WorkflowRun.objects.get(pk=run.pk).subject_id == str(bob.pk)


def test_declaring_the_relation_needs_no_migration():
    out = StringIO()
    call_command("makemigrations", "shop", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()
    field = Order._meta.get_field("workflow_runs")
    assert isinstance(field, pgflow.RunsRelation) and not field.concrete
    assert "workflow_runs" not in [f.name for f in Order._meta.local_fields]
