"""The run page's dangerous controls say what they break: Skip names the later steps that
read the skipped output, the signal form refuses a name nobody waits for unless the
operator insists, and Resume of a failed fan-out says it re-sends every member."""

from __future__ import annotations

import html

import pytest

from pgflow.models import Signal
from pgflow.testing import run_workflow
from tests import composition_workflows as cw
from tests import dashboard_workflows as dw
from tests import fanout_workflows as fw
from tests import workflows as wf
from tests.dashboard_support import changelist_url, control_url, messages_of, run_url

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db(transaction=True)


def text(response) -> str:
    return html.unescape(" ".join(response.content.decode().split()))


def test_skip_warns_that_a_later_step_reads_the_skipped_output(login, operator):
    run = wf.ThreeSteps.start()  # on step one; step two reads outputs["one"]
    page = text(login(operator).get(run_url(run)))
    warning = "Skipping step one: later step two reads outputs['one'], which a skipped step leaves empty."
    assert f'id="pgflow-skip-warning">{warning}</p>' in page
    assert f'data-confirm="{warning} Skip it anyway?' in page
    quiet = run_workflow(wf.WaitsForPayment.start())  # step ship reads nothing of charge
    assert "pgflow-skip-warning" not in text(login(operator).get(run_url(quiet)))


def test_the_signal_form_offers_the_awaited_names_and_refuses_others_unless_insisted(login, operator):
    run = run_workflow(dw.AwaitsApproval.start())
    client = login(operator)
    page = text(client.get(run_url(run)))
    assert '<datalist id="pgflow-signal-names"><option value="approval"></datalist>' in page
    assert 'value="approval"' in page.split('name="name"')[1][:200]  # the one name, filled in

    refused = client.post(control_url(run), {"action": "signal", "name": "aproval", "payload": "{}"})
    assert refused.status_code == 400
    assert "no step of this workflow waits for 'aproval' (its steps wait for 'approval')" in text(refused)
    assert not Signal.objects.filter(run=run).exists()

    insisted = {"action": "signal", "name": "aproval", "payload": "{}", "send_anyway": "on"}
    response = client.post(control_url(run), insisted, follow=True)
    assert "Signal 'aproval' sent to run" in messages_of(response)[0]
    assert list(Signal.objects.filter(run=run).values_list("name", flat=True)) == ["aproval"]


def test_resume_of_a_failed_fan_out_says_it_re_sends_every_member(login, operator):
    tasks = [("tests.fanout_tasks.double", [1]), ("tests.fanout_tasks.fail", ["no"])]
    run = run_workflow(fw.Fan.start(input={"tasks": tasks}))
    assert run.status == "paused"
    page = text(login(operator).get(run_url(run)))
    assert (
        "Resume runs fan-out step fan again: a fresh batch re-sends all 2 members, the 1 that succeeded as well "
        "as the 1 that failed, so they must be safe to run twice."
    ) in page


def test_skip_on_a_child_run_warns_that_its_parent_reads_its_outputs(login, operator):
    parent = run_workflow(cw.Parent.start(input={"n": 2, "pause": [1]}))  # child 1 pauses on its step
    child = parent.children.get(status="paused")
    page = text(login(operator).get(run_url(child)))
    assert f"this is a child run: its parent #{parent.pk} reads its outputs when it finishes." in page
    assert "Skip it anyway?" in page.split('id="pgflow-controls-title"')[1]


def test_a_bulk_resume_says_what_the_failed_fan_outs_re_send(login, operator):
    tasks = [("tests.fanout_tasks.double", [1]), ("tests.fanout_tasks.fail", ["no"])]
    fans = [run_workflow(fw.Fan.start(input={"tasks": tasks})) for _ in range(2)]
    other = run_workflow(wf.Failing.start())
    selected = [run.pk for run in (*fans, other)]
    page = text(login(operator).post(changelist_url(), {"action": "resume_runs", "_selected_action": selected}))
    assert (
        "2 of these runs resume a failed fan-out: their fresh batches re-send all 4 members, the 2 that succeeded "
        "as well as the 2 that failed, so they must be safe to run twice."
    ) in page
