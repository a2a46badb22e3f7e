"""SQL-looking and HTML-looking strings in every free-text field go in and come out as text."""

from __future__ import annotations

import pytest

import pgflow
from pgflow.models import Event, Signal, WorkflowRun
from pgflow.testing import run_workflow
from tests import workflows as wf

pytestmark = pytest.mark.django_db

HOSTILE = ["'; DROP TABLE pgflow_run; --", "<script>alert(1)</script>", "\" OR 1=1 --", "%(now)s %s {0}",
           "Robert'); DELETE FROM pgflow_step;--", "emoji 🚀 and ünïcode"]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_round_trip_everywhere(text):
    run = wf.WaitsForPayment.start(input={"note": text, text: text}, key=text[:200])
    assert wf.WaitsForPayment.start(key=text[:200]).pk == run.pk  # the key is matched, not interpreted
    pgflow.signal(run, "payment", {"memo": text}, actor=text)
    run = run_workflow(run)
    assert run.status == "finished"
    assert WorkflowRun.objects.get(pk=run.pk).input == {"note": text, text: text}
    assert run.steps.get(step_name="charge").output == {"paid": {"memo": text}}
    assert Signal.objects.get(run=run).payload == {"memo": text}
    assert Event.objects.get(run=run, event="signal_received").actor == text
    assert WorkflowRun.objects.count() == 1  # nothing was dropped or deleted


def test_a_hostile_signal_name_is_stored_as_given():
    run = wf.WaitsForPayment.start()
    name = "payment'; DROP TABLE pgflow_signal; --"
    pgflow.signal(run, name, None)
    assert Signal.objects.get(run=run).name == name
