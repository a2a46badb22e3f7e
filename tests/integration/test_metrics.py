"""The web process's ``/metrics`` over HTTP (the real view, through Django's test client): its
counters read as differences around each test, the cluster's gauges against the rows they
count, and ``METRICS_CACHE`` as a scrape sees it."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import Client

import pgflow
from pgflow import store
from pgflow.models import Step, Worker
from pgflow.testing import run_workflow
from tests import workflows as wf
from tests.rollback import RolledBack

pytest.importorskip("prometheus_client")

pytestmark = pytest.mark.django_db(transaction=True)  # counters count on commit

THREE = "tests.workflows.ThreeSteps"
PAYMENT = "tests.workflows.WaitsForPayment"


def scrape() -> dict[tuple[str, frozenset], float]:
    from prometheus_client.parser import text_string_to_metric_families

    answer = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    assert answer.status_code == 200, answer.content
    values = {}
    for family in text_string_to_metric_families(answer.content.decode()):
        for sample in family.samples:
            values[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return values


def total(values: dict, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(value for (sample, found), value in values.items() if sample == name and wanted <= found)


def gauges(values: dict) -> dict:
    return {
        key: value
        for key, value in values.items()
        if key[0].startswith(("pgflow_steps_", "pgflow_workers_", "pgflow_runs_paused", "pgflow_waits_"))
    }


@pytest.fixture
def fresh(settings):
    """Gauges read at each scrape, not a scrape cached by a test before this one."""
    settings.PGFLOW = {**settings.PGFLOW, "METRICS_CACHE": timedelta(0)}
    return settings


def test_runs_started_counts_each_committed_start_once_and_no_rolled_back_one(fresh):
    before = total(scrape(), "pgflow_runs_started_total", workflow_class=THREE)
    for _ in range(3):
        wf.ThreeSteps.start()
    with pytest.raises(RolledBack), transaction.atomic():
        assert wf.ThreeSteps.start().pk is not None
        raise RolledBack
    wf.ThreeSteps.start(key="once")
    wf.ThreeSteps.start(key="once")  # the same key: the first run again, nothing started
    assert total(scrape(), "pgflow_runs_started_total", workflow_class=THREE) - before == 4


def test_signals_received_counts_each_delivered_signal_by_class_and_name(fresh):
    run = run_workflow(wf.WaitsForPayment.start())
    other = run_workflow(wf.WaitsForPayment.start())
    before = scrape()
    pgflow.signal(run, "payment", {"amount": 1})
    pgflow.signal(other, "payment", {"amount": 2})
    pgflow.signal(other, "refund")  # stored for later: counted as delivered
    with pytest.raises(ValueError):
        pgflow.signal(run, "")  # refused: nothing stored, nothing counted
    after = scrape()

    def grew(signal: str) -> float:
        name = "pgflow_signals_received_total"
        return total(after, name, workflow_class=PAYMENT, signal=signal) - total(
            before, name, workflow_class=PAYMENT, signal=signal
        )

    assert (grew("payment"), grew("refund")) == (2, 1)


def test_the_gauges_count_the_rows_they_name(fresh):
    due = [wf.ThreeSteps.start() for _ in range(3)]
    Step.objects.filter(run=due[0]).update(scheduled_at=store.now() - timedelta(seconds=600))
    wf.Delayed.start()  # scheduled an hour ahead: not due
    paused = wf.ThreeSteps.start()
    paused.pause()
    past = run_workflow(wf.WaitsForPayment.start())
    run_workflow(wf.WaitsForPayment.start())  # waiting, its deadline an hour away
    Step.objects.filter(run=past, status="waiting").update(deadline_at=store.now() - timedelta(seconds=1))
    now = store.now()
    Worker.objects.create(
        name="w-live",
        host="h",
        pid=1,
        queues=["workflows", "other"],
        concurrency=1,
        version="t",
        started_at=now,
        heartbeat_at=now,
    )
    Worker.objects.create(
        name="w-gone",
        host="h",
        pid=2,
        queues=["workflows"],
        concurrency=1,
        version="t",
        started_at=now - timedelta(days=1),
        heartbeat_at=now - timedelta(days=1),
    )
    values = scrape()
    assert total(values, "pgflow_steps_due", queue="workflows") == 3
    assert total(values, "pgflow_steps_due_oldest_age_seconds", queue="workflows") >= 600
    assert total(values, "pgflow_runs_paused", workflow_class=THREE) == 1
    assert total(values, "pgflow_waits_past_deadline") == 1
    assert total(values, "pgflow_workers_live", queue="workflows") == 1
    assert total(values, "pgflow_workers_live", queue="other") == 1
    assert total(values, "pgflow_steps_due", queue="other") == 0


def test_metrics_cache_reuses_the_gauges_within_its_time_and_reads_them_afresh_after(settings):
    settings.PGFLOW = {**settings.PGFLOW, "METRICS_CACHE": timedelta(0)}
    wf.ThreeSteps.start()
    first = gauges(scrape())
    assert total(first, "pgflow_steps_due", queue="workflows") == 1
    settings.PGFLOW = {**settings.PGFLOW, "METRICS_CACHE": timedelta(seconds=3)}
    started = time.monotonic()
    wf.ThreeSteps.start()
    cached = gauges(scrape())
    if time.monotonic() - started < 3:  # a scrape inside the cache time (a slow machine may miss it)
        assert cached == first
    time.sleep(max(0.0, 3.1 - (time.monotonic() - started)))
    after = gauges(scrape())
    assert total(after, "pgflow_steps_due", queue="workflows") == 2
