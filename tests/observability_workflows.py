"""Workflows whose bodies open spans of their own, for the tracing tests (importable by worker
subprocesses)."""

from __future__ import annotations

import asyncio

from opentelemetry import trace

import pgflow
from pgflow import step


class Traced(pgflow.Workflow):
    """A plain body and an async body each open a span (as an instrumented HTTP or SQL call
    would), then a step parks until the signal "approved" wakes it."""

    @step
    def charge(self):
        with trace.get_tracer("shop").start_as_current_span("charge card"):
            return "charged"

    @step
    async def notify(self):
        with trace.get_tracer("shop").start_as_current_span("send email"):
            await asyncio.sleep(0.01)
        return "sent"

    @step(wait_for="approved")
    def approve(self, signal):
        return signal.payload
