"""The run page's first line says why the run is where it is and what to do next, and a
fan-out's members are listed with their own errors: over HTTP, on real runs."""

from __future__ import annotations

import html
import html as htmllib
import re
from io import StringIO

import pytest
from django.contrib.admin.utils import quote
from django.core.management import call_command
from django.urls import reverse

from pgflow.models import BatchMember
from pgflow.testing import run_workflow
from tests import fanout_workflows as fw
from tests import workflows as wf
from tests.dashboard_support import insights_url, run_url

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db(transaction=True)


def why_of(page) -> str:
    found = re.search(
        r'<p class="pgflow-why[^"]*" id="pgflow-why"[^>]*><strong>Why:</strong> (.*?)</p>', page.content.decode(), re.S
    )
    assert found, "the run page has no why sentence"
    return htmllib.unescape(found[1])


def test_the_run_page_says_which_signal_it_waits_for_until_when_and_what_then(login, viewer):
    run = run_workflow(wf.WaitsForPayment.start())
    said = why_of(login(viewer).get(run_url(run)))
    assert said.startswith("waiting for signal 'payment' since ")
    assert said.endswith("(then: cancel)")


def test_a_due_run_with_no_worker_names_the_queue_and_the_command(login, viewer):
    run = wf.ThreeSteps.start()  # due now; no worker runs in this test
    said = why_of(login(viewer).get(run_url(run)))
    assert "no live worker serves queue 'workflows'" in said, said
    assert said.endswith("start `pgflow_worker --queues workflows`")


def test_a_run_paused_by_its_policy_names_the_error_and_what_next(login, viewer):
    run = run_workflow(wf.Failing.start())
    said = why_of(login(viewer).get(run_url(run)))
    assert said.startswith("paused since ")
    assert "step boom (attempt 1) failed with RuntimeError: boom (policy: pause); resume after fixing the cause" in said


def test_a_failed_fan_out_says_the_members_own_error_and_lists_its_members(login, viewer):
    tasks = [("tests.fanout_tasks.double", [1]), ("tests.fanout_tasks.fail", ["vendor 13's inbox refuses mail"])]
    run = run_workflow(fw.Fan.start(input={"tasks": tasks}))
    assert run.status == "paused"
    page = login(viewer).get(run_url(run))
    said = why_of(page)
    assert "fan-out failed: 1 of 2 jobs failed" in said, said
    assert "job 1 (tests.fanout_tasks.fail), failed with RuntimeError: vendor 13's inbox refuses mail" in said
    members = htmllib.unescape(page.content.decode().split('class="pgflow-table pgflow-members-table"')[1])
    members = members.split("</table>")[0]
    rows = re.findall(r'<tr class="pgflow-member-(\w+)"><td>(\d+)</td>', members)
    assert rows == [("failed", "1"), ("succeeded", "0")]  # the failed one first
    assert "<strong>RuntimeError</strong>: vendor 13's inbox refuses mail" in members
    assert "vendor 13's inbox refuses mail" in members.split("tests.fanout_tasks.fail")[1]  # its argument
    # Each row's status, and a link to its django-q2 task (a failure, or a success). The
    # tests run django-q2 in sync mode, which records no task id: give each one, as a
    # cluster's hook does.
    for member in BatchMember.objects.filter(batch__run=run):
        BatchMember.objects.filter(pk=member.pk).update(task_id=f"{member.position}a7f3c2e9b1d84f06")
    members = htmllib.unescape(login(viewer).get(run_url(run)).content.decode())
    members = members.split('class="pgflow-table pgflow-members-table"')[1].split("</table>")[0]
    failed, succeeded = members.split('<tr class="pgflow-member-')[1:3]
    assert '<span class="pgflow-status pgflow-status-failed">failed</span>' in failed
    assert '<span class="pgflow-status pgflow-status-succeeded">succeeded</span>' in succeeded
    by_position = dict(BatchMember.objects.filter(batch__run=run).values_list("position", "task_id"))
    failure = reverse("admin:django_q_failure_change", args=[quote(by_position[1])])
    success = reverse("admin:django_q_success_change", args=[quote(by_position[0])])
    assert f'<a href="{failure}">{by_position[1]}</a>' in failed
    assert f'<a href="{success}">{by_position[0]}</a>' in succeeded


def test_insights_count_a_failed_fan_outs_member_errors(login, viewer):
    refused = "vendor 13's inbox refuses mail"
    tasks = [("tests.fanout_tasks.fail", [refused]), ("tests.fanout_tasks.fail", [refused])]
    run_workflow(fw.Fan.start(input={"tasks": tasks}))
    figures = login(viewer).get(insights_url("24h", as_json=True)).json()
    (fan_out,) = [row for row in figures["errors"] if row["error_class"].endswith("FanOutFailed")]
    assert fan_out["members"] == [{"error_class": "RuntimeError", "count": 2, "message": refused}]
    page = html.unescape(login(viewer).get(insights_url("24h")).content.decode())
    table = page.split('id="pgflow-errors-title"')[1].split("</table>")[0]
    cells = [" ".join(re.sub(r"<[^>]+>", "", cell).split()) for cell in re.findall(r"<td>(.*?)</td>", table, re.S)]
    # The members' own error leads the row; FanOutFailed only says where it came from.
    assert cells[:2] == [f"RuntimeError: {refused} × 2 failed fan-out members(their step: FanOutFailed)", "1"], cells
    out = StringIO()
    call_command("pgflow_insights", "--window", "24h", stdout=out)
    assert f"pgflow.exceptions.FanOutFailed\n          of its members: 2 × RuntimeError: {refused}\n" in out.getvalue()
