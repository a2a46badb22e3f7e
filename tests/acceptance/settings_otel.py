"""The example project's settings plus an OpenTelemetry SDK tracer provider whose exporter
appends each finished span, as one JSON line, to the file named by PGFLOW_SPANS_FILE:
how the acceptance tests read the spans a real worker process made."""

import json
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from example_project.settings import *  # noqa: F403


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans):  # type: ignore[no-untyped-def]
        with open(self.path, "a") as out:
            for span in spans:
                out.write(
                    json.dumps(
                        {
                            "name": span.name,
                            "trace_id": f"{span.context.trace_id:032x}",
                            "span_id": f"{span.context.span_id:016x}",
                            "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
                            "attributes": dict(span.attributes or {}),
                            "events": [
                                {"name": event.name, "attributes": dict(event.attributes or {})}
                                for event in span.events
                            ],
                            "links": [f"{link.context.trace_id:032x}" for link in span.links],
                            "status": span.status.status_code.name,
                            "start": span.start_time,
                            "end": span.end_time,
                        }
                    )
                    + "\n"
                )
        return SpanExportResult.SUCCESS


if os.environ.get("PGFLOW_SPANS_FILE"):
    _provider = TracerProvider()
    _provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["PGFLOW_SPANS_FILE"])))
    trace.set_tracer_provider(_provider)
