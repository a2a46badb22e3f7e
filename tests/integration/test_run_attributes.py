"""Run attributes on a real database: start(attributes=...) in the one-statement start and
the general one, a body's set_attributes() recorded at the step's commit (by store.finish and
by the group commit, each with an attributes_set event), Django lookups on them, and
attr.K:V in the search language on the GIN index."""

from __future__ import annotations

import pytest
from django.db import connection

from pgflow import store
from pgflow.core.flow import Outcome
from pgflow.models import Event, WorkflowRun
from pgflow.search import parse
from pgflow.searching import runs_matching
from pgflow.testing import run_workflow
from tests import attribute_workflows as aw

pytestmark = pytest.mark.django_db


def found(text: str) -> set[int]:
    return set(runs_matching(parse(text)).values_list("pk", flat=True))


def test_start_stores_attributes_in_the_plain_start_and_with_a_key():
    plain = aw.Tagged.start(input={}, attributes={"customer": "acme", "plan": "gold", "seats": 3})
    keyed = aw.Tagged.start(key="order-7", attributes={"customer": "initech"})
    untagged = aw.Tagged.start()
    assert WorkflowRun.objects.get(pk=plain.pk).attributes == {"customer": "acme", "plan": "gold", "seats": 3}
    assert WorkflowRun.objects.get(pk=keyed.pk).attributes == {"customer": "initech"}
    assert WorkflowRun.objects.get(pk=untagged.pk).attributes == {}
    # The Django way: Workflow.runs() is a queryset over a JSONField.
    assert set(aw.Tagged.runs().filter(attributes__plan="gold").values_list("pk", flat=True)) == {plain.pk}
    assert set(aw.Tagged.runs().filter(attributes__seats__gte=2).values_list("pk", flat=True)) == {plain.pk}
    assert set(aw.Tagged.runs().filter(attributes__contains={"customer": "initech"})) == {keyed}


def test_start_refuses_bad_attributes_and_starts_nothing():
    with pytest.raises(TypeError, match=r"start\(attributes=\.\.\.\): the value of 'plan' is a dict; a value must be"):
        aw.Tagged.start(attributes={"plan": {"tier": "gold"}})
    with pytest.raises(ValueError, match="key 'bad key' is not accepted; a key is 1-64 characters"):
        aw.Tagged.start(attributes={"bad key": 1})
    assert not WorkflowRun.objects.exists()


def test_set_attributes_in_a_body_lands_at_the_steps_commit_with_an_event():
    run = run_workflow(aw.Tagged.start(input={"amount": 250}, attributes={"customer": "initial", "source": "web"}))
    assert run.status == "finished"
    assert run.attributes == {
        "customer": "acme",  # set again by the body
        "source": "web",
        "order.id": 7,
        "amount": 250,
        "plan": "gold",
        "vip": True,
    }
    events = list(run.events.values_list("event", "step__step_name", "details"))
    assert [e for e in events if e[0] == "attributes_set"] == [
        ("attributes_set", "look_up", {"attributes": {"order.id": 7, "customer": "acme", "amount": 250}}),
        ("attributes_set", "decide", {"attributes": {"plan": "gold", "vip": True}}),
    ]
    kinds = [e[0] for e in events]
    assert kinds.index("attributes_set") < kinds.index("step_completed")  # set during the step, before its end


def test_an_attempt_that_fails_sets_nothing():
    run = run_workflow(aw.Tagged.start(input={"fail": True}))
    assert run.status == "paused"
    assert "plan" not in run.attributes
    assert run.attributes["customer"] == "acme"  # the step before it committed its own


def test_set_attributes_past_the_runs_limit_fails_the_attempt_naming_the_limit():
    run = run_workflow(aw.TooMany.start(attributes={f"k{i}": i for i in range(30)}))
    assert run.status == "paused"
    error = run.last_error()
    assert error is not None and error["error_class"] == "ValueError"
    assert "set_attributes(): 33 keys; a run holds at most 32 attributes" in error["error_message"]
    assert len(run.attributes) == 30


def test_the_group_commit_merges_attributes_and_writes_the_event_in_its_statements():
    tagged = aw.TwoSteps.start(attributes={"plan": "silver", "source": "api"})
    plain = aw.TwoSteps.start()
    held = {c.run_id: c for c in store.claim(worker="t", queues=["attrs"], limit=10)}
    items = [
        store.Finished(
            claim=held[tagged.pk], outcome=Outcome(kind="complete"), output={"n": 1}, attributes={"plan": "gold"}
        ),
        store.Finished(claim=held[plain.pk], outcome=Outcome(kind="complete"), output={"n": 1}),
    ]
    assert store.finish_many(items) == [True, True]
    tagged, plain = WorkflowRun.objects.get(pk=tagged.pk), WorkflowRun.objects.get(pk=plain.pk)
    assert (tagged.current_step, tagged.attributes) == ("second", {"plan": "gold", "source": "api"})
    assert (plain.current_step, plain.attributes) == ("second", {})
    assert list(tagged.events.values_list("event", "details")) == [
        ("started", {"workflow": "tests.attribute_workflows.TwoSteps", "key": None}),
        ("attributes_set", {"attributes": {"plan": "gold"}}),
        ("step_completed", {}),
    ]
    assert not Event.objects.filter(run=plain, event="attributes_set").exists()


def test_attr_qualifiers_find_the_runs_they_name():
    gold = aw.TwoSteps.start(attributes={"plan": "gold", "amount": 120, "order.id": "A-7", "vip": True})
    silver = aw.TwoSteps.start(attributes={"plan": "silver", "amount": 80, "seats": "42"})
    texty = aw.TwoSteps.start(attributes={"amount": "200"})  # a string: no comparison matches it
    aw.TwoSteps.start()
    assert found("attr.plan:gold") == {gold.pk}
    assert found("attr.plan:gold attr.plan:silver") == set()  # AND
    assert found("attr.amount:>100") == {gold.pk}
    assert found("attr.amount:<=80") == {silver.pk}
    assert found("attr.amount:200") == {texty.pk}  # unquoted: the number or the text
    assert found("attr.seats:42") == {silver.pk}
    assert found('attr.amount:"120"') == set()  # quoted: the text only
    assert found("attr.order.id:A-7 attr.vip:true") == {gold.pk}
    assert found("attr.missing:x") == set()


# A comparison has no index that orders the values (on the GIN, its plan reads every entry):
# it reads the runs of its since: window, 7 days by default (pgflow.search.COMPARISON_WINDOW).
@pytest.mark.parametrize(
    ("query", "index"),
    [("attr.plan:gold", "pgflow_run_attributes"), ("attr.amount:>100", "Index Cond: (created_at >=")],
)
def test_attr_qualifiers_use_an_index(query, index):
    aw.TwoSteps.start(attributes={"plan": "gold", "amount": 120})
    sql, params = runs_matching(parse(query)).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a table this small is read whole otherwise
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = " ".join(row[0] for row in cursor.fetchall())
    assert index in plan, plan
