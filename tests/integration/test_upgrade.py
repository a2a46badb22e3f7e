"""A run started on one definition and continued by a worker with new code.

Each test defines version 1 of a class, starts a run, then defines version 2 under the
same dotted path (as a deploy would) and lets the engine carry on."""

from __future__ import annotations

import pytest

import pgflow
from pgflow import step, store
from pgflow.runtime.runner import Runner
from pgflow.testing import run_workflow

pytestmark = pytest.mark.django_db

PATH_MODULE = __name__


def define(body: dict, name: str = "Upgraded") -> type[pgflow.Workflow]:
    namespace = {"__module__": PATH_MODULE, "__qualname__": name, **body}
    return type(name, (pgflow.Workflow,), namespace)


def test_a_step_added_later_in_the_class_runs_for_an_old_run():
    v1 = define({"first": step(lambda self: "one"), "second": step(lambda self: "two")})
    run = v1.start()
    old_digest = run.definition_digest
    v2 = define(
        {"first": step(lambda self: "one"), "second": step(lambda self: "two"), "third": step(lambda self: "three")}
    )
    assert v2.definition_digest() != old_digest
    run = run_workflow(run)
    assert run.status == "finished"
    assert list(run.steps.values_list("step_name", flat=True)) == ["first", "second", "third"]
    assert run.definition_digest == old_digest  # a run keeps the digest it started with


def test_a_removed_step_declared_in_removed_steps_is_skipped_to_the_next():
    v1 = define(
        {"first": step(lambda self: "one"), "legacy": step(lambda self: "old"), "last": step(lambda self: "end")}
    )
    run = v1.start()
    Runner().execute(store.claim(worker="t", queues=["workflows"], limit=1)[0])  # `first`, with v1
    run.refresh_from_db()
    assert run.current_step == "legacy"
    define({"first": step(lambda self: "one"), "last": step(lambda self: "end"), "removed_steps": ["legacy"]})
    run = run_workflow(run)
    assert run.status == "finished"
    assert list(run.steps.values_list("step_name", "status")) == [
        ("first", "completed"),
        ("legacy", "skipped"),
        ("last", "completed"),
    ]
    assert run.events.get(event="skipped").details == {"reason": "removed from the workflow"}


def test_a_renamed_step_not_declared_pauses_the_run_naming_it():
    v1 = define({"first": step(lambda self: "one"), "old_name": step(lambda self: "x")})
    run = v1.start()
    Runner().execute(store.claim(worker="t", queues=["workflows"], limit=1)[0])
    define({"first": step(lambda self: "one"), "new_name": step(lambda self: "x")})
    run = run_workflow(run)
    assert run.status == "paused"
    assert "step 'old_name' of run" in run.paused_reason
    assert "declare it in removed_steps to skip it, or restore it" in run.paused_reason
    failed = run.steps.get(step_name="old_name")
    assert (failed.status, failed.error_class) == ("failed", "pgflow.exceptions.StepNotFound")
    # resuming without fixing the code pauses again, once: never a crash loop
    with pytest.raises(pgflow.StepNotFound):
        run.resume()
    run.refresh_from_db()
    assert run.status == "paused"
