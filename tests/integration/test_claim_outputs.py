"""What a claim brings a body: the run's outputs (for a step whose body reads them), every
field of its run, and its subject (``needs_subject``), so the body reads them with no query
of its own. Each body counts the queries of its own reads on its connection."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

import pgflow
from pgflow import store
from pgflow.models import Step, WorkflowRun
from pgflow.runtime.answer import Answer
from pgflow.runtime.held import output_readers
from pgflow.runtime.runner import Runner
from pgflow.store.claims import Kinds, with_subjects
from pgflow.store.rows import OUTPUTS_CAP
from tests.invariants import assert_exactly_once

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "claim-outputs"
SEEN: list[dict[str, Any]] = []  # what each body read, and the queries its reads made


def _reads(workflow: pgflow.Workflow, *, subject: bool = False) -> None:
    run = workflow.run
    with CaptureQueriesContext(connection) as queries:
        seen = {
            "outputs": workflow.outputs,
            "input": workflow.input,
            "run": {field.attname: getattr(run, field.attname) for field in WorkflowRun._meta.concrete_fields},
            "step": (workflow.step_name, workflow.attempt),
        }
        if subject:
            seen["subject"] = workflow.subject
    SEEN.append({**seen, "queries": len(queries)})


class Reads(pgflow.Workflow):
    queue = QUEUE

    @pgflow.step
    def a(self):
        return {"n": self.input.get("n", 1), "pad": self.input.get("pad", "")}

    @pgflow.step
    def b(self):
        _reads(self)  # reads self.outputs: the claim brings them

    @pgflow.step(needs_subject=True)
    def c(self):
        # Its source names self.outputs (evaluation.reads_outputs): a read only through a
        # helper such as _reads would cost one query, as before.
        assert self.outputs
        _reads(self, subject=True)


class ReadsAsync(pgflow.Workflow):
    queue = QUEUE

    @pgflow.step
    def a(self):
        return {"n": 2}

    @pgflow.step
    async def b(self):
        SEEN.append({"outputs": dict(self.outputs), "input": self.input, "run": self.run.rerun_of_id})


class ReadsLimited(Reads):
    """Reads with every step limited: its attempts are gated, claimed by CLAIM_SQL."""

    concurrency = pgflow.Limit(max=2)


class Plain(pgflow.Workflow):
    queue = QUEUE

    @pgflow.step
    def only(self):
        return "x" * 10


def _run_next(kinds: Kinds | None = None) -> store.Claim:
    """Claim the next attempt as the worker does (its outputs, its subject) and run it."""
    kinds = kinds or Kinds(threads=8, awaiting=0, readers=output_readers())
    (held,) = store.claim(worker="w", queues=[QUEUE], limit=1, kinds=kinds)
    (held,) = with_subjects([held])
    result = Runner().execute(held)
    assert result.applied, result
    return held


@pytest.fixture(autouse=True)
def _fresh():
    SEEN.clear()
    yield
    assert_exactly_once()


def test_a_body_reads_outputs_input_run_and_subject_with_no_query():
    user = User.objects.create(username="ada")
    run = Reads.start(subject=user, input={"n": 7})
    _run_next()
    held = _run_next()  # b
    assert held.outputs == {"a": {"n": 7, "pad": ""}}
    _run_next()  # c
    b, c = SEEN
    assert b["queries"] == 0 and c["queries"] == 0
    assert b["outputs"] == {"a": {"n": 7, "pad": ""}} and c["outputs"] == {"a": {"n": 7, "pad": ""}, "b": None}
    assert b["input"] == {"n": 7} and b["step"] == ("b", 1)
    run.refresh_from_db()
    stored = {field.attname: getattr(run, field.attname) for field in WorkflowRun._meta.concrete_fields}
    for name in ("rerun_of_id", "singleton_key", "subject_id", "workflow_class", "created_at", "key"):
        assert b["run"][name] == stored[name], name
    assert c["subject"] == user


def test_without_needs_subject_the_subject_costs_one_query():
    user = User.objects.create(username="bob")
    Reads.start(subject=user)
    (held,) = store.claim(worker="w", queues=[QUEUE], limit=1)
    run = held.run()
    with CaptureQueriesContext(connection) as queries:
        assert run.subject == user
    assert len(queries) == 1
    Runner().execute(held)
    _run_next()
    _run_next()


def test_a_rerun_sees_the_copied_outputs():
    original = Reads.start(input={"n": 3})
    for _ in range(3):
        _run_next()
    SEEN.clear()
    rerun = original.rerun_from("b")
    held = _run_next()
    assert held.run_id == rerun.pk and held.step_name == "b"
    assert held.outputs == {"a": {"n": 3, "pad": ""}}
    assert SEEN[0]["outputs"] == {"a": {"n": 3, "pad": ""}} and SEEN[0]["queries"] == 0
    assert SEEN[0]["run"]["rerun_of_id"] == original.pk
    _run_next()


def test_large_outputs_are_left_to_the_body_and_other_steps_bring_none():
    # Incompressible, so its stored size is past the cap.
    pad = "".join(f"{index:x}{index * 7919 % 1000003:x}" for index in range(OUTPUTS_CAP // 4))
    Reads.start(input={"pad": pad})
    Plain.start()
    held_a = _run_next()
    plain = _run_next()
    assert held_a.step_name == "a" and held_a.outputs is None  # a's body never reads outputs
    assert plain.step_name == "only" and plain.outputs is None
    held_b = _run_next()
    assert held_b.step_name == "b" and held_b.outputs is None  # past the cap: read by the body
    assert SEEN[0]["outputs"] == {"a": {"n": 1, "pad": pad}} and SEEN[0]["queries"] == 1
    _run_next()


def test_a_step_sees_every_output_committed_before_its_claim():
    run = Reads.start(input={"n": 5})
    _run_next()
    # An output committed after a's, before b's claim (as a re-run's copy or a repair would write).
    Step.objects.filter(run=run, step_name="a").update(output={"n": 6, "pad": ""})
    held = _run_next()
    assert held.outputs == {"a": {"n": 6, "pad": ""}} == SEEN[0]["outputs"]
    _run_next()


def test_the_claim_notified_brings_outputs_too():
    run = Reads.start()
    _run_next()
    step = Step.objects.get(run=run, status="scheduled")
    (held,) = store.claim_notified(step.pk, worker="w", queues=[QUEUE], readers=output_readers())
    assert held.outputs == {"a": {"n": 1, "pad": ""}}
    Runner().execute(held)
    assert SEEN[0]["queries"] == 0
    _run_next()


def test_an_async_body_reads_the_claims_outputs_with_no_query():
    ReadsAsync.start(input={"k": 1})
    _run_next()
    (held,) = store.claim(
        worker="w", queues=[QUEUE], limit=1, kinds=Kinds(threads=8, awaiting=0, readers=output_readers())
    )
    handed: list[store.Finished] = []

    def finish_later(item: store.Finished) -> Answer[bool]:
        handed.append(item)  # applied below: finishing it here would count its queries
        return Answer()

    async def body_and_its_queries() -> int:
        # The queries of an async body's path run in asgiref's one thread for sync code.
        captured = CaptureQueriesContext(connection)
        await sync_to_async(captured.__enter__)()
        await Runner(finish_later=finish_later).execute_async(held)
        await sync_to_async(captured.__exit__)(None, None, None)
        return await sync_to_async(len)(captured)  # read there: ``connection`` is that thread's

    assert asyncio.run(body_and_its_queries()) == 0
    assert SEEN == [{"outputs": {"a": {"n": 2}}, "input": {"k": 1}, "run": None}]
    (item,) = handed
    assert store.finish(item.claim, item.outcome, output=item.output)


def test_the_gated_claim_brings_outputs_too():
    run = ReadsLimited.start(input={"n": 4})
    _run_next()
    assert Step.objects.get(run=run, status="scheduled").gated  # so CLAIM_SQL claims it
    held = _run_next()
    assert held.step_name == "b" and held.outputs == {"a": {"n": 4, "pad": ""}}
    assert SEEN[0]["outputs"] == {"a": {"n": 4, "pad": ""}} and SEEN[0]["queries"] == 0
    _run_next()
