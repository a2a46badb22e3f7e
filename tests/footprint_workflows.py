"""A workflow whose body reports what its worker process has imported (the worker's footprint)."""

from __future__ import annotations

import sys

import pgflow
from pgflow import step

# Packages a worker has no use for unless the application uses them.
OPTIONAL = ("mcp", "pydantic", "starlette", "uvicorn", "opentelemetry", "prometheus_client")


class ReportImports(pgflow.Workflow):
    @step
    def report(self):
        return {"imported": sorted(name for name in OPTIONAL if name in sys.modules)}
