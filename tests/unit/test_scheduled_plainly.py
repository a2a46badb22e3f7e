"""One predicate says a step is scheduled plainly (the plain start's and the group commit's
fast paths), and it knows every field of StepDefinition that changes how an attempt is
scheduled: a new option fails here until it is classified."""

from __future__ import annotations

import dataclasses

import pytest

from pgflow import Limit, Rate, Singleton
from pgflow.core.definitions import (
    DELAYING_OPTIONS,
    GATING_OPTIONS,
    SIGNAL,
    StepDefinition,
    scheduled_plainly,
)

# The fields that do not change how an attempt is scheduled: they act at the claim's
# prepare (skip_if), around the body (timeout, on_exception), at a signal's or a batch's
# wait, or are read the same on every path (queue and priority, through Workflow.queue_for
# and priority_for). A field neither here nor in DELAYING_OPTIONS/GATING_OPTIONS fails.
NOT_SCHEDULING = {
    "name",
    "approval",
    "kind",
    "method",
    "skip_if",
    "timeout",
    "on_exception",
    "queue",
    "priority",
    "wait_for",
    "wait_timeout",
    "on_timeout",
    "on_batch_failure",
    "needs_subject",
}

# A value for each scheduling option, as a user declares it.
SET = {"wait": 5.0, "wait_until": "when", "concurrency": Limit(2), "rate": Rate(3, per=1.0)}


def test_every_field_of_a_step_definition_is_known_to_scheduling_or_not():
    fields = {field.name for field in dataclasses.fields(StepDefinition)}
    scheduling = set(DELAYING_OPTIONS) | set(GATING_OPTIONS)
    assert not scheduling & NOT_SCHEDULING
    unknown = fields - scheduling - NOT_SCHEDULING
    assert not unknown, (
        f"StepDefinition fields {sorted(unknown)} are neither scheduling options (DELAYING_OPTIONS, "
        "GATING_OPTIONS in pgflow/core/definitions.py) nor listed here as not changing scheduling"
    )
    assert scheduling | NOT_SCHEDULING == fields  # no stale name either
    assert SET.keys() == scheduling


def test_a_step_with_no_scheduling_option_is_scheduled_plainly():
    assert scheduled_plainly(StepDefinition(name="a", queue="q", priority=3, timeout=1.0), singleton=None)
    assert scheduled_plainly(StepDefinition(name="a", kind=SIGNAL, wait_for="go"), singleton=None)


@pytest.mark.parametrize("option", sorted(GATING_OPTIONS))
def test_a_gating_option_is_never_scheduled_plainly(option):
    step = StepDefinition(name="a", **{option: SET[option]})
    assert not scheduled_plainly(step, singleton=None)
    assert not scheduled_plainly(step, singleton=None, delay_worked_out=True)


@pytest.mark.parametrize("option", sorted(DELAYING_OPTIONS))
def test_a_wait_is_plain_only_where_the_caller_works_its_delay_out(option):
    step = StepDefinition(name="a", **{option: SET[option]})
    assert not scheduled_plainly(step, singleton=None)
    assert scheduled_plainly(step, singleton=None, delay_worked_out=True)


def test_a_singleton_class_is_never_scheduled_plainly():
    step = StepDefinition(name="a")
    assert not scheduled_plainly(step, singleton=Singleton())
    assert not scheduled_plainly(step, singleton=Singleton(), delay_worked_out=True)
