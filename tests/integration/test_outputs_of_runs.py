"""store.outputs_of_runs: the outputs of several runs in one query, as outputs_of gives each
(what the claim loop hands the async bodies it claimed)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pgflow import store
from pgflow.store import scheduling
from pgflow.testing import run_workflow
from tests import workflows as wf

pytestmark = pytest.mark.django_db


def test_each_run_maps_to_what_outputs_of_gives_it_in_one_query():
    finished = [run_workflow(wf.ThreeSteps.start(input={"a": index})) for index in range(3)]
    fresh = wf.ThreeSteps.start()
    ids = [run.pk for run in [*finished, fresh]]
    with CaptureQueriesContext(connection) as queries:
        outputs = store.outputs_of_runs(ids)
    assert len(queries) == 1
    assert outputs == {run.pk: scheduling.outputs_of(run) for run in [*finished, fresh]}
    assert outputs[fresh.pk] == {} and all(len(outputs[run.pk]) == 3 for run in finished)
    assert list(outputs[finished[0].pk]) == ["one", "two", "three"]  # oldest first
