"""SQL-looking and HTML-looking strings in every free-text field go in and come out as text."""

from __future__ import annotations

import pytest

import pgflow
from pgflow.models import Event, Signal, WorkflowRun
from pgflow.testing import run_workflow
from tests import workflows as wf

pytestmark = pytest.mark.django_db

HOSTILE = [
    "'; DROP TABLE pgflow_run; --",
    "<script>alert(1)</script>",
    '" OR 1=1 --',
    "%(now)s %s {0}",
    "Robert'); DELETE FROM pgflow_step;--",
    "emoji 🚀 and ünïcode",
]


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


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda run: wf.ThreeSteps.start(input={"a": "nul\x00"}), ValueError, "input holds a NUL character"),
        (
            lambda run: wf.ThreeSteps.start(input={"a": float("nan")}),
            ValueError,
            "input must be JSON-serialisable: Out of range float values are not JSON compliant",
        ),
        (lambda run: wf.ThreeSteps.start(key="k\x00"), ValueError, "key must be a non-empty string"),
        (lambda run: pgflow.signal(run, "go", {"a": "\x00"}), ValueError, "signal payload holds a NUL character"),
        (lambda run: pgflow.signal(run, "g\x00o"), ValueError, "a signal name must be a non-empty string"),
    ],
)
def test_what_postgresql_cannot_store_is_refused_with_a_clear_error(call, error, message):
    run = wf.WaitsForPayment.start()
    with pytest.raises(error, match=message):
        call(run)
    assert WorkflowRun.objects.count() == 1
    assert Signal.objects.count() == 0
