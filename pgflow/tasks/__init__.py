"""pgflow as Django's task backend: ``TASKS = {"default": {"BACKEND": "pgflow.tasks.PgflowBackend"}}``.

Every ``@task`` of the backend is a one-step pgflow run: enqueued in the caller's transaction,
run by ``pgflow_worker``, re-attempted by its options, and read back with ``get_result`` from
any process. See docs/reference.md "Django tasks".
"""

from __future__ import annotations

from .backend import PgflowBackend, PgflowTask
from .taskoptions import options

__all__ = ["PgflowBackend", "PgflowTask", "options"]
