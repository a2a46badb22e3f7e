"""The exactly-once checker on rows the engine wrote: clean runs pass, a transition planted
twice in one run and dropped in another fail it, though the global totals still agree."""

from __future__ import annotations

import pytest

from pgflow.models import Event
from pgflow.testing import run_workflow
from tests import workflows as wf
from tests.invariants import assert_exactly_once

pytestmark = pytest.mark.django_db


def test_runs_the_engine_finished_pass_and_planted_breaches_fail():
    runs = [run_workflow(wf.ThreeSteps.start()) for _ in range(3)]
    assert assert_exactly_once() == 3
    total = Event.objects.filter(event="step_completed").count()
    duplicated = Event.objects.filter(run=runs[0], event="step_completed").first()
    assert duplicated is not None
    duplicated.pk = None
    duplicated.save()
    Event.objects.filter(run=runs[1], event="step_completed").first().delete()
    assert Event.objects.filter(event="step_completed").count() == total  # a total cannot see it
    with pytest.raises(AssertionError) as failure:
        assert_exactly_once()
    message = str(failure.value)
    assert message.startswith("2 exactly-once violations:")
    assert f"run {runs[0].pk} one#1 (completed, outcome completed): closing events {{'step_completed': 2}}" in message
    assert f"run {runs[1].pk} one#1 (completed, outcome completed): closing events {{}}" in message
    assert assert_exactly_once([runs[2].pk]) == 1
