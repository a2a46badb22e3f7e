"""What a worker process loads: only what running steps needs (benchmarks/worker_rss.py measures the memory)."""

from __future__ import annotations

from pgflow.models import WorkflowRun
from tests.acceptance.conftest import wait_until
from tests.footprint_workflows import ReportImports


def test_a_worker_imports_neither_the_mcp_sdk_nor_unused_telemetry(start_worker):
    # The project's URLconf mounts the MCP endpoint (Django's URL checks import it in the
    # worker); no tracer provider and no --metrics-port are configured.
    start_worker("--concurrency", "1", env={"DJANGO_SETTINGS_MODULE": "tests.acceptance.settings_without_django_q"})
    run = ReportImports.start()
    wait_until(lambda: WorkflowRun.objects.get(pk=run.pk).status == "finished", timeout=30, what="the run")
    assert run.steps.get().output == {"imported": []}
