"""OpenTelemetry traces: a run joins the trace that was current when it started, and each
attempt is a span ``pgflow <Class>.<step>`` in it.

Optional (``django-pgflow[otel]``): without ``opentelemetry-api``, or with no tracer
provider installed, every function here returns at once after one check. The span of an
attempt begins at its claim and is current while the body runs, so a body's own
instrumented calls (HTTP, SQL) nest under it. Its events mark when the attempt came due,
parked, was woken and was claimed (each at the row's own timestamp), and its attributes
carry the phases (``pgflow.core.phases``) in seconds.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from ..core import phases
from . import metrics

if TYPE_CHECKING:
    from ..store import Claim

TRACER = "pgflow"


def _api() -> Any:
    """``opentelemetry.trace`` once the process uses it, else None (tracing is off).

    Never imported here first: a tracer provider or a current span exists only after the
    application imported the API (or names a provider in ``OTEL_PYTHON_TRACER_PROVIDER``,
    which the API loads on first use), so a process without either pays no import for it.
    """
    api = sys.modules.get("opentelemetry.trace")
    if api is None and _provider_named():
        try:
            from opentelemetry import trace as api  # lazy: optional extra django-pgflow[otel]
        except ImportError:  # the [otel] extra is not installed
            return None
    return api


@functools.cache
def _provider_named() -> bool:
    """Whether the environment names a tracer provider. Read once, as the API reads it once
    (on its first use): a lookup in ``os.environ`` encodes the name each time, before every body."""
    return "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def enabled() -> bool:
    """True once the application installed a tracer provider (the API's default is a no-op proxy)."""
    otel = _api()
    return otel is not None and not isinstance(otel.get_tracer_provider(), otel.ProxyTracerProvider)


def _propagator() -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # lazy: optional extra

    return TraceContextTextMapPropagator()


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the span current in this thread, or None."""
    otel = _api()
    if otel is None:
        return None
    context = otel.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    carrier: dict[str, str] = {}
    _propagator().inject(carrier)
    return carrier.get("traceparent")


def _parent(traceparent: str | None) -> Any:
    return _propagator().extract({"traceparent": traceparent}) if traceparent else None


def _link(traceparent: str | None) -> list[Any]:
    if not traceparent:
        return []
    otel = _api()
    context = otel.get_current_span(_parent(traceparent)).get_span_context()
    return [otel.Link(context)] if context.is_valid else []


def _ns(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1_000_000_000)


class AttemptSpan:
    """The span of one attempt while its body runs; ``ended`` closes it with the outcome."""

    def __init__(self, span: Any, held: Claim) -> None:
        self.span = span
        self.held = held

    def failed(self, error: BaseException) -> None:
        self.span.record_exception(error)
        otel = _api()
        self.span.set_status(otel.Status(otel.StatusCode.ERROR, f"{type(error).__name__}: {error}"))

    def ended(self, outcome: str) -> None:
        at = timezone.now()
        fields = self.held.step_fields
        span = self.span
        if outcome == metrics.BEFORE_BODY:
            # Ended or parked before its body: the span says which, from the row (a signal
            # step with no signal yet parked; a skip_if skipped …).
            outcome = metrics.settled_before_body(self.held.step_id) or "parked"
        span.set_attribute("pgflow.outcome", outcome)
        if outcome == "parked":
            span.add_event("parked", timestamp=_ns(at))
        durations = phases.of_attempt(
            created=fields.get("created_at"),
            scheduled=fields.get("scheduled_at"),
            started=self.held.started_at,
            waiting_since=fields.get("waiting_since"),
            throttled_until=fields.get("throttled_until"),
            finished=at,
        )
        for phase, seconds in durations.items():
            if seconds is not None:
                span.set_attribute(f"pgflow.{phase}_seconds", seconds)
        span.end(end_time=_ns(at))


@contextmanager
def attempt(held: Claim, *, worker: str) -> Iterator[AttemptSpan | None]:
    """The attempt's span, current in this thread while the body runs (None when tracing is off)."""
    if not enabled():
        yield None
        return
    run = held.run_fields
    path = run.get("workflow_class", "")
    fields = held.step_fields
    otel = _api()
    tracer = otel.get_tracer(TRACER)
    span = tracer.start_span(
        f"pgflow {path.rsplit('.', 1)[-1]}.{held.step_name}",
        context=_parent(run.get("traceparent")),
        kind=otel.SpanKind.CONSUMER,
        start_time=_ns(held.started_at),
        attributes={
            "pgflow.run_id": held.run_id,
            "pgflow.workflow_class": path,
            "pgflow.step": held.step_name,
            "pgflow.attempt": held.attempt,
            "pgflow.queue": fields.get("queue", ""),
            "pgflow.worker": worker,
        },
    )
    scheduled, since = fields.get("scheduled_at"), fields.get("waiting_since")
    if since is not None and scheduled is not None and since < scheduled:  # parked, then woken by its signal
        span.add_event("parked", timestamp=_ns(since))
        span.add_event("woken", timestamp=_ns(scheduled))
    span.add_event("due", timestamp=_ns(scheduled))
    span.add_event("claimed", timestamp=_ns(held.started_at))
    recorder = AttemptSpan(span, held)
    with otel.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
        try:
            yield recorder
        except BaseException as exc:
            recorder.failed(exc)
            recorder.ended("error")
            raise


def record_failure(error: BaseException) -> None:
    """Record a body's error on the current attempt span (nothing without one)."""
    otel = _api()
    if otel is None:
        return
    span = otel.get_current_span()
    if span.is_recording():
        span.record_exception(error)
        span.set_status(otel.Status(otel.StatusCode.ERROR, f"{type(error).__name__}: {error}"))


def linked(
    name: str,
    *,
    traceparent: str | None,
    attributes: dict[str, Any],
    start: datetime | None = None,
    end: datetime | None = None,
) -> None:
    """A span in the current context (the sender's request, a task) linked to the run's trace:
    a signal sent to a run, a fan-out member that ran."""
    if not enabled():
        return
    span = (
        _api()
        .get_tracer(TRACER)
        .start_span(name, links=_link(traceparent), attributes=attributes, start_time=_ns(start))
    )
    span.end(end_time=_ns(end))
