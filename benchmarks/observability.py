#!/usr/bin/env python
"""What tracing and metrics add to one attempt on the worker's hot path.

    .venv/bin/python benchmarks/observability.py [--attempts 20000]

Times, in-process and without a database, the telemetry calls the worker makes around
each attempt (``observability.attempt`` around the runner, ``attempt_ended`` after it)
with a body that does nothing, so what is measured is the telemetry alone:

1. off: neither opentelemetry nor prometheus_client configured (no tracer provider set,
   the metrics calls skipped as when prometheus_client is not installed);
2. metrics on: the counters and the four phase histograms of each attempt;
3. tracing on: an SDK tracer provider exporting each span to an exporter that drops it
   (what a BatchSpanProcessor hands its exporter is not the worker's time);
4. both on.

Prints microseconds per attempt (median of 5 rounds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DATABASE_URL", "postgres://unused@127.0.0.1:1/unused")  # nothing here touches it

import django  # noqa: E402

django.setup()

from django.utils import timezone  # noqa: E402

from pgflow import observability  # noqa: E402
from pgflow.observability import metrics  # noqa: E402
from pgflow.runtime.runner import Result  # noqa: E402
from pgflow.store import Claim  # noqa: E402


def claim() -> Claim:
    at = timezone.now()
    return Claim(
        step_id=1,
        run_id=1,
        step_name="one",
        attempt=1,
        token=uuid.uuid4(),
        started_at=at,
        run_fields={
            "workflow_class": "tests.workflows.ThreeSteps",
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        },
        step_fields={
            "created_at": at - timedelta(seconds=2),
            "scheduled_at": at - timedelta(seconds=1),
            "waiting_since": None,
            "queue": "workflows",
        },
    )


def one_round(attempts: int, *, with_metrics: bool) -> float:
    held = claim()
    result = Result(claim=held, outcome="completed", applied=True, seconds=0.0)
    started = time.perf_counter()
    for _ in range(attempts):
        observability.attempt(held, worker="bench", execute=lambda h: result)
        if with_metrics:
            metrics.attempt_ended(held, "completed", applied=True, last_step=False)
    return (time.perf_counter() - started) / attempts * 1e6


def measure(attempts: int, *, with_metrics: bool) -> float:
    return statistics.median(one_round(attempts, with_metrics=with_metrics) for _ in range(5))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attempts", type=int, default=20000)
    attempts = parser.parse_args().attempts
    rows = [("off", measure(attempts, with_metrics=False)), ("metrics on", measure(attempts, with_metrics=True))]

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)
    rows += [
        ("tracing on", measure(attempts, with_metrics=False)),
        ("tracing and metrics on", measure(attempts, with_metrics=True)),
    ]
    print("| telemetry | µs per attempt |\n| --- | ---: |")
    for name, micros in rows:
        print(f"| {name} | {micros:.1f} |")


if __name__ == "__main__":
    main()
