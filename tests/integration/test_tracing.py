"""Spans the process that sends a signal or runs a fan-out member makes, through the
OpenTelemetry SDK's in-memory exporter: each is linked to the trace of the run it serves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import pgflow
from pgflow.testing import run_workflow
from tests import fanout_workflows as fw
from tests import workflows as wf

pytest.importorskip("opentelemetry.sdk")

pytestmark = pytest.mark.django_db


@pytest.fixture
def exporter() -> Iterator:
    """A tracer provider with an in-memory exporter, installed as the process's for this test only."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace._TRACER_PROVIDER = provider  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER_SET_ONCE._done = True  # type: ignore[attr-defined]
    try:
        yield memory
    finally:
        trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
        trace._TRACER_PROVIDER_SET_ONCE._done = False  # type: ignore[attr-defined]


def trace_of(traceparent: str) -> int:
    return int(traceparent.split("-")[1], 16)


def test_a_signal_span_sits_in_the_senders_request_and_links_the_runs_trace(exporter):
    from opentelemetry import trace

    tracer = trace.get_tracer("web")
    with tracer.start_as_current_span("POST /checkout"):
        run = run_workflow(wf.WaitsForPayment.start())
    with tracer.start_as_current_span("POST /webhooks/payment") as webhook:
        pgflow.signal(run, "payment", {"amount": 10})
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "pgflow signal payment"]
    assert span.parent is not None and span.parent.span_id == webhook.get_span_context().span_id
    assert span.context.trace_id == webhook.get_span_context().trace_id != trace_of(run.traceparent)
    assert [link.context.trace_id for link in span.links] == [trace_of(run.traceparent)]
    assert dict(span.attributes) == {
        "pgflow.run_id": run.pk,
        "pgflow.workflow_class": "tests.workflows.WaitsForPayment",
        "pgflow.signal": "payment",
    }


def test_each_fan_out_member_has_one_span_linked_to_its_runs_trace(exporter):
    from opentelemetry import trace

    with trace.get_tracer("web").start_as_current_span("POST /import"):
        run = fw.Fan.start(input={"tasks": [["tests.fanout_tasks.double", [1]], ["tests.fanout_tasks.fail", ["down"]]]})
    run = run_workflow(run)
    assert run.status == "paused"  # one member failed: on_batch_failure="pause"
    members = sorted(
        (s for s in exporter.get_finished_spans() if s.name.startswith("pgflow member ")),
        key=lambda s: s.attributes["pgflow.member"],
    )
    assert [s.name for s in members] == [
        "pgflow member tests.fanout_tasks.double",
        "pgflow member tests.fanout_tasks.fail",
    ]
    assert [s.attributes["pgflow.outcome"] for s in members] == ["succeeded", "failed"]
    for span in members:
        assert [link.context.trace_id for link in span.links] == [trace_of(run.traceparent)]
        assert span.attributes["pgflow.run_id"] == run.pk
