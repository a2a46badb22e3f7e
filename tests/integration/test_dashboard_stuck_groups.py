"""Insights' "stuck now" groups paused runs by (class, step, error) with a count and one
dry-run bulk action a group, over HTTP."""

from __future__ import annotations

import html
import re

import pytest

from pgflow.models import WorkflowRun
from pgflow.testing import run_workflow
from tests import fanout_workflows as fw
from tests import workflows as wf
from tests.dashboard_support import changelist_url, insights_url

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db(transaction=True)


def test_paused_runs_of_one_error_read_as_one_group_with_one_dry_run_action(login, operator):
    runs = [run_workflow(wf.Failing.start()) for _ in range(3)]
    by_hand = wf.ThreeSteps.start()
    by_hand.pause()
    client = login(operator)
    page = client.get(insights_url("24h")).content.decode()
    table = page.split('id="pgflow-paused-groups"')[1].split("</table>")[0]
    groups = [
        " ".join(html.unescape(re.sub(r"<[^>]+>", " ", row)).split())
        for row in re.findall(r"<tr><td><strong>.*?</tr>", table, re.S)
    ]
    assert [group.split(" Re-run")[0].rsplit(" ", 2)[0] for group in groups][0].startswith(
        "3 × Failing boom RuntimeError"
    )
    assert groups[1].startswith("1 × ThreeSteps one no error (paused by hand)")
    form = re.search(r'<form method="post" action="([^"]+)" class="pgflow-group-action">(.*?)</form>', table, re.S)
    ids = [int(pk) for pk in re.findall(r'name="_selected_action" value="(\d+)"', form[2])]
    assert form[1] == changelist_url() and ids == [run.pk for run in runs]

    dry = client.post(changelist_url(), {"action": "rerun_failed_runs", "_selected_action": ids})
    text = " ".join(html.unescape(dry.content.decode()).split())
    assert "Dry run: 3 runs would be re-run from its failed step; 0 would not. Nothing has changed yet." in re.sub(
        r"<[^>]+>", "", text
    )
    assert set(WorkflowRun.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"paused"}


def test_runs_paused_by_failed_fan_outs_group_by_their_members_own_error(login, operator):
    def fan(message: str) -> WorkflowRun:
        tasks = [("tests.fanout_tasks.double", [1]), ("tests.fanout_tasks.fail", [message])]
        return run_workflow(fw.Fan.start(input={"tasks": tasks}))

    refused = [fan("vendor 13's inbox refuses mail"), fan("vendor 14's inbox refuses mail")]
    missing = run_workflow(
        fw.Fan.start(input={"tasks": [("tests.fanout_tasks.fail_unless_exists", ["/nowhere/at/all"])]})
    )
    assert {run.status for run in (*refused, missing)} == {"paused"}
    page = login(operator).get(insights_url("24h")).content.decode()
    table = page.split('id="pgflow-paused-groups"')[1].split("</table>")[0]
    groups = [
        " ".join(html.unescape(re.sub(r"<[^>]+>", " ", row)).split())
        for row in re.findall(r"<tr><td><strong>.*?</tr>", table, re.S)
    ]
    assert groups[0].startswith("2 × Fan fan RuntimeError (a fan-out member; FanOutFailed)"), groups
    assert groups[1].startswith("1 × Fan fan FileNotFoundError (a fan-out member; FanOutFailed)"), groups
    form = table.split("<tr><td><strong>")[1]
    ids = [int(pk) for pk in re.findall(r'name="_selected_action" value="(\d+)"', form)]
    assert ids == [run.pk for run in refused]
    assert missing.pk not in ids
