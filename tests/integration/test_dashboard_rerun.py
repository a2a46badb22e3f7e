"""The dashboard's re-run and child-run pages, over HTTP."""

from __future__ import annotations

import pytest
from django.urls import reverse

from pgflow.models import WorkflowRun
from pgflow.testing import run_workflow
from tests import composition_workflows as cw
from tests.dashboard_support import changelist_url, messages_of, run_url, timeline_url

pytestmark = pytest.mark.django_db(transaction=True)
pytest_plugins = ["tests.dashboard_fixtures"]


def rerun_url(run: WorkflowRun, step: str | None = None) -> str:
    url = reverse("admin:pgflow_workflowrun_rerun", args=[run.pk])
    return f"{url}?step={step}" if step else url


def test_rerun_from_here_confirms_then_starts_a_linked_run(login, operator):
    original = run_workflow(cw.Ledger.start(input={"n": 2, "amount": 3, "fail": True}))
    client = login(operator, csrf=False)
    page = client.get(run_url(original)).content.decode()
    assert f'href="{rerun_url(original, "charge")}"' in page and "Re-run from here" in page
    confirm = client.get(rerun_url(original, "charge"))
    text = confirm.content.decode()
    assert confirm.status_code == 200
    assert 'id="pgflow-rerun-copied"' in text and "fetch" in text and "&quot;fetched&quot;: 2" in text
    assert "pgflow-rerun-cancels" in text and "pgflow-rerun-definition-same" in text
    bad = client.post(rerun_url(original), {"step": "charge", "input": "[1, 2]"})
    assert bad.status_code == 400 and "must be a JSON object" in bad.content.decode()
    bad = client.post(rerun_url(original), {"step": "charge", "input": "{nope"})
    assert bad.status_code == 400 and "not valid JSON" in bad.content.decode()
    assert not original.reruns.exists()
    done = client.post(rerun_url(original), {"step": "charge", "input": '{"n": 2, "amount": 9}'}, follow=True)
    rerun = original.reruns.get()
    assert rerun.input == {"n": 2, "amount": 9}
    assert any(f"as run {rerun.pk}" in m for m in messages_of(done))
    assert rerun.events.get(event="rerun_of").actor == f"user:{operator.username}"
    both = client.get(run_url(rerun)).content.decode()
    assert 'id="pgflow-rerun-of"' in both and run_url(original) in both
    back = client.get(run_url(original)).content.decode()
    assert 'id="pgflow-reruns"' in back and run_url(rerun) in back


def test_an_unknown_step_names_the_steps(login, operator):
    original = run_workflow(cw.Ledger.start(input={"amount": 3, "fail": True}))
    response = login(operator).get(rerun_url(original, "nope"), follow=True)
    assert any("its steps are fetch, charge, receipt" in m for m in messages_of(response))


def test_the_bulk_rerun_counts_first_and_changes_nothing_until_confirmed(login, operator):
    failed = [run_workflow(cw.Ledger.start(input={"amount": 1, "fail": True})) for _ in range(2)]
    fine = run_workflow(cw.Ledger.start(input={"amount": 1}))
    running = cw.Ledger.start(input={"amount": 1})
    selected = [r.pk for r in [*failed, fine, running]]
    client = login(operator)
    before = WorkflowRun.objects.count()
    dry = client.post(changelist_url(), {"action": "rerun_failed_runs", "_selected_action": selected})
    text = dry.content.decode()
    assert dry.status_code == 200
    assert "Dry run: <strong>2</strong> runs would be re-run" in text and "<strong>2</strong> would not" in text
    assert "no attempt of it failed" in text and "it is running" in text
    assert WorkflowRun.objects.count() == before
    assert [WorkflowRun.objects.get(pk=r.pk).status for r in failed] == ["paused", "paused"]
    done = client.post(
        changelist_url(),
        {"action": "rerun_failed_runs", "_selected_action": selected, "confirm": "yes"},
        follow=True,
    )
    assert WorkflowRun.objects.count() == before + 2
    assert all(WorkflowRun.objects.get(pk=r.pk).reruns.get().current_step == "charge" for r in failed)
    assert any(m.startswith("Re-ran 2 runs") for m in messages_of(done))


def test_the_bulk_rerun_records_its_reason_and_refuses_one_too_long(login, operator):
    failed = [run_workflow(cw.Ledger.start(input={"amount": 1, "fail": True})) for _ in range(2)]
    selected = {"action": "rerun_failed_runs", "_selected_action": [r.pk for r in failed], "confirm": "yes"}
    client = login(operator)
    dry = client.post(changelist_url(), {**selected, "confirm": ""}).content.decode()
    assert 'name="reason"' in dry  # the dry run takes an optional reason
    before = WorkflowRun.objects.count()
    refused = client.post(changelist_url(), {**selected, "reason": "x" * 121})
    assert refused.status_code == 400
    assert "the reason has 121 characters; at most 120 are recorded" in refused.content.decode()
    assert WorkflowRun.objects.count() == before
    client.post(changelist_url(), {**selected, "reason": "ledger fixed in 4.2.1"}, follow=True)
    for run in failed:
        rerun = WorkflowRun.objects.get(pk=run.pk).reruns.get()
        assert rerun.events.get(event="rerun_of").actor == f"user:{operator.username} (reason: ledger fixed in 4.2.1)"


def test_a_parent_lists_its_children_and_a_child_links_its_parent(login, viewer):
    parent = run_workflow(cw.Parent.start(input={"n": 2, "pause": [1]}))
    client = login(viewer)
    page = client.get(run_url(parent)).content.decode()
    children = list(parent.children.order_by("id"))
    assert 'id="pgflow-children"' in page
    assert all(run_url(child) in page for child in children) and "paused" in page
    child_page = client.get(run_url(children[0])).content.decode()
    assert 'id="pgflow-parent"' in child_page and run_url(parent) in child_page
    listed = client.get(changelist_url() + f"?parent={parent.pk}").content.decode()
    searched = client.get(changelist_url() + f"?q=parent:{parent.pk}").content.decode()
    for text in (listed, searched):
        assert all(run_url(child) in text for child in children)
        # The parent is not listed: its link is only in each child's parent column.
        assert text.count(f'href="{run_url(parent)}"') == len(children)


def test_the_timeline_draws_a_parents_wait_on_its_children_and_counts_them(login, viewer):
    parent = run_workflow(cw.Parent.start(input={"n": 2, "pause": [1]}))  # child 0 finishes, child 1 pauses
    client = login(viewer)
    rows = client.get(timeline_url(parent.pk)).json()["rows"]
    spread = next(row for row in rows if row["label"] == "spread #1")
    waiting = spread["segments"][-1]
    assert (waiting["kind"], waiting["series"], waiting["note"]) == (
        "waiting",
        "waiting_children",
        "waiting for 2 child runs (1 ended)",
    )
    page = client.get(run_url(parent)).content.decode()
    assert "waiting for child runs" in page  # the legend lists the series
    # The paused child ends: the count follows, and a child's own rows have no such series.
    parent.children.get(status="paused").cancel(actor="ops")
    rows = client.get(timeline_url(parent.pk)).json()["rows"]
    spread = next(row for row in rows if row["label"] == "spread #1")
    assert spread["segments"][-1]["note"] == "waiting for 2 child runs (2 ended)"
    child = parent.children.order_by("id").first()
    child_rows = client.get(timeline_url(child.pk)).json()["rows"]
    assert all(segment["series"] != "waiting_children" for row in child_rows for segment in row["segments"])
