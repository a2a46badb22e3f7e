"""tests/acceptance/test_processes.py: a worker that skipped the system checks still imports
this module as it starts, so the first claims of its class bring the outputs."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

import pgflow
from pgflow import step


class ReadsOutputsFirst(pgflow.Workflow):
    """Its only step reads ``self.outputs`` and returns what that cost: no query when the
    claim brought them, which it does only if the worker knew the step reads them before
    it claimed it."""

    @step
    def counts(self):
        with CaptureQueriesContext(connection) as queries:
            outputs = dict(self.outputs)
        return {"outputs": outputs, "queries": len(queries)}
