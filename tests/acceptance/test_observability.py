"""Traces and metrics from real worker processes."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import Count
from django.test import Client

from pgflow.models import Step, WorkflowRun
from tests import workflows as wf
from tests.acceptance.conftest import wait_until
from tests.invariants import assert_exactly_once

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("prometheus_client")


def _spans(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_spans_of_a_three_step_run_share_the_trace_its_request_began(start_worker, tmp_path):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    # The web side: a request span (as an HTTP instrumentation opens) around start() and a signal.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    from opentelemetry import trace

    with tracer.start_as_current_span("POST /signup") as request_span:
        # pgflow reads the current span through the global API: install the provider only here.
        trace._TRACER_PROVIDER = provider  # type: ignore[attr-defined]
        trace._TRACER_PROVIDER_SET_ONCE._done = True  # type: ignore[attr-defined]
        try:
            run = wf.ThreeSteps.start()
            failing = wf.Retrying.start()
        finally:
            trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
            trace._TRACER_PROVIDER_SET_ONCE._done = False  # type: ignore[attr-defined]
    trace_id = f"{request_span.get_span_context().trace_id:032x}"
    run.refresh_from_db()
    assert run.traceparent and run.traceparent.split("-")[1] == trace_id

    spans_file = tmp_path / "spans.jsonl"
    start_worker(env={"DJANGO_SETTINGS_MODULE": "tests.acceptance.settings_otel", "PGFLOW_SPANS_FILE": str(spans_file)})
    wait_until(
        lambda: (
            WorkflowRun.objects.filter(pk=run.pk, status="finished").exists()
            and WorkflowRun.objects.filter(pk=failing.pk, status="cancelled").exists()
        ),
        timeout=60,
        what="both runs to end",
    )
    wait_until(lambda: len(_spans(spans_file)) >= 6, timeout=10, what="the worker's spans")
    spans = _spans(spans_file)
    mine = [span for span in spans if span["attributes"]["pgflow.run_id"] == run.pk]
    assert [span["name"] for span in sorted(mine, key=lambda s: s["start"])] == [
        "pgflow ThreeSteps.one",
        "pgflow ThreeSteps.two",
        "pgflow ThreeSteps.three",
    ]
    assert {span["trace_id"] for span in mine} == {trace_id}
    assert {span["parent_id"] for span in mine} == {f"{request_span.get_span_context().span_id:016x}"}
    for span in mine:
        attributes = span["attributes"]
        assert attributes["pgflow.workflow_class"] == "tests.workflows.ThreeSteps"
        assert attributes["pgflow.attempt"] == 1 and attributes["pgflow.queue"] == "workflows"
        assert attributes["pgflow.outcome"] == "completed"
        assert attributes["pgflow.worker"]
        assert {"pgflow.waited_seconds", "pgflow.queued_seconds", "pgflow.ran_seconds"} <= attributes.keys()
        assert [event["name"] for event in span["events"]] == ["due", "claimed"]
    # A body that raised: its exception is on its span, which says how the attempt ended.
    flaky = [span for span in spans if span["attributes"]["pgflow.run_id"] == failing.pk]
    assert [span["attributes"]["pgflow.outcome"] for span in flaky] == ["reattempted", "reattempted", "cancelled"]
    assert all(span["status"] == "ERROR" and "exception" in [e["name"] for e in span["events"]] for span in flaky)
    assert_exactly_once()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _scrape(url: str) -> dict[tuple[str, frozenset], float]:

    text = urllib.request.urlopen(url, timeout=10).read().decode()  # noqa: S310 - a local test server
    return _parse(text)


def _parse(text: str) -> dict[tuple[str, frozenset], float]:
    from prometheus_client.parser import text_string_to_metric_families

    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return values


def _total(values: dict, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(value for (sample, found), value in values.items() if sample == name and wanted <= found)


def test_metrics_of_two_workers_add_up_to_the_database_counts(start_worker, settings):
    # Gauges read now, not a scrape cached by a test before this one.
    settings.PGFLOW = {**settings.PGFLOW, "METRICS_CACHE": timedelta(0)}
    started_before = _total(
        _parse(Client(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()),
        "pgflow_runs_started_total",
        workflow_class="tests.workflows.ThreeSteps",
    )
    ports = [_free_port(), _free_port()]
    workers = [start_worker("--metrics-port", str(port), "--concurrency", "2") for port in ports]
    # Both listening before the work arrives, or the first could take all of it.
    wait_until(
        lambda: all("starting: queues=" in worker.output() for worker in workers), timeout=30, what="both workers"
    )
    for _ in range(20):
        wf.ThreeSteps.start()
    for _ in range(3):
        wf.Retrying.start()
    wait_until(
        lambda: WorkflowRun.objects.filter(status__in=["finished", "cancelled"]).count() == 23,
        timeout=120,
        what="23 runs to end",
    )
    scraped = [_scrape(f"http://127.0.0.1:{port}/metrics") for port in ports]
    assert all(_total(one, "pgflow_attempts_total") > 0 for one in scraped), "both workers ran attempts"
    database = Counter(
        (step.run.workflow_class, step.step_name, step.outcome) for step in Step.objects.select_related("run")
    )
    for (path, name, outcome), count in database.items():
        summed = sum(
            _total(one, "pgflow_attempts_total", workflow_class=path, step=name, outcome=outcome) for one in scraped
        )
        assert summed == count, (path, name, outcome)
    assert sum(_total(one, "pgflow_attempts_total") for one in scraped) == Step.objects.count() == 69
    for status in ("finished", "cancelled"):
        assert (
            sum(_total(one, "pgflow_runs_ended_total", status=status) for one in scraped)
            == WorkflowRun.objects.filter(status=status).count()
        )
    # Histograms: every ended attempt observed once per phase it went through.
    assert sum(_total(one, "pgflow_step_ran_seconds_count") for one in scraped) == 69
    assert sum(_total(one, "pgflow_step_queued_seconds_bucket", le="+Inf") for one in scraped) == 69
    # The web's /metrics: the runs this process started, and the cluster's gauges from the database.
    wf.Delayed.start()
    paused = wf.ThreeSteps.start()
    paused.pause()
    # A worker may hold its first attempt: the run stays paused once that attempt ends.
    wait_until(lambda: not paused.steps.filter(status="in_progress").exists(), timeout=30, what="its attempt")
    assert WorkflowRun.objects.get(pk=paused.pk).status == "paused", list(paused.events.values_list("event", "actor"))
    answer = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    assert answer.status_code == 200
    web = _parse(answer.content.decode())
    started = _total(web, "pgflow_runs_started_total", workflow_class="tests.workflows.ThreeSteps") - started_before
    assert started == 21  # this test's starts, each once
    assert _total(web, "pgflow_runs_paused", workflow_class="tests.workflows.ThreeSteps") == 1, dict(
        WorkflowRun.objects.filter(status="paused").values_list("workflow_class").annotate(Count("id"))
    )
    assert _total(web, "pgflow_workers_live", queue="workflows") == 2
    assert (
        _total(web, "pgflow_steps_due", queue="workflows")
        == Step.objects.filter(status="scheduled", scheduled_at__lte=paused.created_at).count()
    )
    assert "pgflow_attempts_total" not in answer.content.decode().split("pgflow_steps_due")[1]
    assert_exactly_once()


def test_metrics_refuse_an_address_not_allowed_and_accept_the_token(settings, db):
    settings.PGFLOW = {**settings.PGFLOW, "METRICS_TOKEN": "s3cret-s3cret-s3cret"}
    refused = Client(REMOTE_ADDR="10.1.2.3").get("/metrics")
    assert refused.status_code == 403 and b"METRICS_ALLOWED_IPS" in refused.content
    wrong = Client(REMOTE_ADDR="10.1.2.3").get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 403
    allowed = Client(REMOTE_ADDR="10.1.2.3").get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-s3cret-s3cret")
    assert allowed.status_code == 200 and b"pgflow_steps_due" in allowed.content


def test_a_bodys_own_spans_nest_under_its_attempt_and_a_parked_step_records_its_park_and_wake(start_worker, tmp_path):
    from tests import observability_workflows as ow

    spans_file = tmp_path / "spans.jsonl"
    run = ow.Traced.start()
    port = _free_port()
    start_worker(
        "--concurrency",
        "2",
        "--metrics-port",
        str(port),
        env={"DJANGO_SETTINGS_MODULE": "tests.acceptance.settings_otel", "PGFLOW_SPANS_FILE": str(spans_file)},
    )
    wait_until(
        lambda: Step.objects.filter(run=run, step_name="approve", status="waiting").exists(),
        timeout=60,
        what="approve to park",
    )
    wait_until(
        lambda: any(span["name"] == "pgflow Traced.approve" for span in _spans(spans_file)),
        timeout=10,
        what="the parked attempt's span",
    )
    import pgflow

    pgflow.signal(run, "approved", "yes")
    wait_until(lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished", timeout=60, what="the run to finish")
    wait_until(lambda: len(_spans(spans_file)) >= 6, timeout=10, what="every span")
    spans = _spans(spans_file)
    by_name: dict[str, list[dict]] = {}
    for span in sorted(spans, key=lambda s: s["start"]):
        by_name.setdefault(span["name"], []).append(span)
    # The bodies' own spans (a plain body's, an async body's) are children of their attempt's.
    for attempt, own in (("pgflow Traced.charge", "charge card"), ("pgflow Traced.notify", "send email")):
        (outer,) = by_name[attempt]
        (inner,) = by_name[own]
        assert (inner["trace_id"], inner["parent_id"]) == (outer["trace_id"], outer["span_id"]), own
        assert outer["start"] <= inner["start"] <= inner["end"] <= outer["end"]
    # approve: claimed and parked on the signal, then claimed again once the signal woke it.
    parked, woken = by_name["pgflow Traced.approve"]
    assert parked["attributes"]["pgflow.outcome"] == "parked"
    assert [event["name"] for event in parked["events"]] == ["due", "claimed", "parked"]
    assert woken["attributes"]["pgflow.outcome"] == "completed"
    assert [event["name"] for event in woken["events"]] == ["parked", "woken", "due", "claimed"]
    assert woken["attributes"]["pgflow.waiting_seconds"] >= 0
    # The park is not an end: the worker counts each attempt once, by the outcome its row holds.
    scraped = _scrape(f"http://127.0.0.1:{port}/metrics")
    counted = {
        (dict(labels)["step"], dict(labels)["outcome"]): value
        for (name, labels), value in scraped.items()
        if name == "pgflow_attempts_total" and dict(labels)["workflow_class"] == ow.Traced.workflow_path()
    }
    assert counted == {(step.step_name, step.outcome): 1 for step in Step.objects.filter(run=run)}
    assert _total(scraped, "pgflow_runs_ended_total", workflow_class=ow.Traced.workflow_path()) == 1
    assert_exactly_once()


def test_the_throttled_histogram_observes_each_limited_attempt_once_with_its_rows_throttled_time(start_worker):
    from tests import flowcontrol_workflows as fc

    for _ in range(4):
        fc.PerTenant.start(input={"tenant": "busy", "sleep": 0.3})
    for _ in range(2):
        fc.PerTenant.start(input={"sleep": 0})  # no tenant: not limited, never throttled
    port = _free_port()
    worker = start_worker("--queues", "limits", "--concurrency", "4", "--metrics-port", str(port))
    wait_until(lambda: WorkflowRun.objects.filter(status="finished").count() == 6, timeout=60, what="6 runs")
    scraped = _scrape(f"http://127.0.0.1:{port}/metrics")
    assert worker.terminate() == 0
    labels = {"workflow_class": "tests.flowcontrol_workflows.PerTenant", "step": "work"}
    limited = list(Step.objects.filter(run__input__tenant="busy"))
    assert all(step.throttled_until is not None for step in limited)
    assert _total(scraped, "pgflow_step_throttled_seconds_count", **labels) == len(limited) == 4
    assert _total(scraped, "pgflow_step_ran_seconds_count", **labels) == 6
    # Its sum is the rows' own throttled time (due -> let through), which two of the four had.
    throttled = [(min(step.throttled_until, step.started_at) - step.scheduled_at).total_seconds() for step in limited]
    assert _total(scraped, "pgflow_step_throttled_seconds_sum", **labels) == pytest.approx(sum(throttled), abs=1e-3)
    assert sum(seconds > 0 for seconds in throttled) >= 2  # a limit of two held two of them back
    assert_exactly_once()
