"""Limit, Rate and Singleton given wrong are DefinitionErrors naming the value and what is accepted."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pgflow
from pgflow import DefinitionError, Limit, Rate, Singleton, step
from pgflow.core.limits import CONCURRENCY_GATE, GATE_KINDS, RATE_GATE, SINGLETON_GATE, gate_kind, gates_of


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Limit(max=0), "max must be a whole number of 1 or more, got 0"),
        (lambda: Limit(max=True), "max must be a whole number of 1 or more, got True"),
        (lambda: Rate(limit=5, per=timedelta(seconds=-1)), "per must be more than 0 seconds"),
        (lambda: Rate(limit=5, per=0), "per must be more than 0 seconds, got 0"),
        (lambda: Rate(limit=0, per=1), "limit must be a whole number of 1 or more, got 0"),
        (lambda: Singleton(on_conflict="wait"), "on_conflict must be one of 'queue', 'skip', got 'wait'"),
        (lambda: Limit(max=2, key=42), "key must be the name of a method, a callable"),
    ],
)
def test_a_wrong_value_is_refused(make, message):
    with pytest.raises(DefinitionError, match=message):
        make()


def test_an_unknown_key_method_is_refused_when_the_class_is_created():
    with pytest.raises(DefinitionError, match=r"step 'send': concurrency key 'region' names no method of Mailer"):

        class Mailer(pgflow.Workflow):
            @step(concurrency=Limit(max=2, key="region"))
            def send(self): ...


def test_a_class_option_of_the_wrong_type_is_refused():
    with pytest.raises(DefinitionError, match=r"concurrency must be a pgflow.Limit\(...\) or None, got 3"):

        class Mailer(pgflow.Workflow):
            concurrency = 3

            @step
            def send(self): ...


def test_a_class_wide_limit_applies_to_steps_without_their_own():
    own = Limit(max=1)

    class Mailer(pgflow.Workflow):
        concurrency = Limit(max=5)

        @step
        def send(self): ...

        @step(concurrency=own)
        def report(self): ...

    assert Mailer.steps().get("send").concurrency == Limit(max=5)
    assert Mailer.steps().get("report").concurrency is own


def test_an_attempts_gate_columns_name_the_step_fields():
    from pgflow.core.limits import NO_GATES, Gates
    from pgflow.models import Step

    gates = Gates(gate="c:tenant-a", gate_max=2, rate_gate="r:tenant-a", rate_limit=3, rate_per=1.0)
    assert gates.columns() == {
        "gated": True,
        "gate": "c:tenant-a",
        "gate_max": 2,
        "rate_gate": "r:tenant-a",
        "rate_limit": 3,
        "rate_per": 1.0,
    }
    assert NO_GATES.columns()["gated"] is False
    assert set(gates.columns()) <= {field.name for field in Step._meta.get_fields()}


@pytest.mark.parametrize(
    ("returned", "error", "message"),
    [
        ("a\x00b", ValueError, r"step 'send': concurrency key 'tenant' returned 'a\\x00b': it holds a NUL"),
        ("a\ud800", ValueError, r"returned 'a\\ud800': it holds a lone surrogate"),
        (3.5, TypeError, r"step 'send': concurrency key 'tenant' must return a string or None, got 3.5"),
    ],
)
def test_a_key_postgresql_cannot_store_is_refused_naming_the_key(returned, error, message):
    from pgflow.core.limits import key_value

    class Instance:
        def tenant(self):
            return returned

    with pytest.raises(error, match=message):
        key_value(Instance(), "tenant", "default", "step 'send': concurrency key")
    assert key_value(Instance(), None, "default") == "default"


def test_a_gate_names_kind_is_read_back_from_its_name():
    gates = gates_of(
        object(),
        workflow_path="app.Flow",
        step_name="send",
        concurrency=Limit(2),
        rate=Rate(3, per=1.0),
        singleton=None,
    )
    assert (gate_kind(gates.gate), gate_kind(gates.rate_gate)) == (CONCURRENCY_GATE, RATE_GATE)
    singleton = gates_of(
        object(), workflow_path="app.Flow", step_name="send", concurrency=None, rate=None, singleton="a"
    )
    assert gate_kind(singleton.gate) == SINGLETON_GATE
    assert sorted(GATE_KINDS) == sorted({CONCURRENCY_GATE, RATE_GATE, SINGLETON_GATE})


def test_a_name_of_no_gate_kind_is_refused_naming_the_kinds():
    with pytest.raises(ValueError, match=r"not a gate name: 'x:1'.*'c:', 'r:', 's:'"):
        gate_kind("x:1")
