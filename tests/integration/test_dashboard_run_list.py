"""The run list says what each run is doing and why, links child runs to their parent and
counts the statuses on the status filter, over HTTP."""

from __future__ import annotations

import html
import re

import pytest

from pgflow.testing import run_workflow
from tests import composition_workflows as cw
from tests import dashboard_workflows as dw
from tests import fanout_workflows as fw
from tests import workflows as wf
from tests.dashboard_support import changelist_url

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db(transaction=True)


def rows(page: str) -> dict[int, str]:
    """Each listed run's row, by run id."""
    found = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page, re.S):
        run_id = re.search(r'class="field-id"><a href="[^"]*">(\d+)</a>', row)
        if run_id:
            found[int(run_id[1])] = html.unescape(" ".join(re.sub(r"<[^>]+>", " ", row).split()))
    return found


def test_each_row_says_what_the_run_is_doing_and_why(login, viewer):
    sleeping = dw.Later.start()  # its step is due in an hour
    waiting = run_workflow(wf.WaitsForPayment.start())
    due = wf.ThreeSteps.start()  # due now, and no worker runs in this test
    paused = run_workflow(wf.Failing.start())
    response = login(viewer).get(changelist_url())
    page = response.content.decode()
    listed = rows(page)
    assert "due in 59m" in listed[sleeping.pk] or "due in 1h" in listed[sleeping.pk], listed[sleeping.pk]
    assert "sleeping until then" in listed[sleeping.pk]
    assert "waiting for signal 'payment'" in listed[waiting.pk]
    assert "(then: cancel)" in listed[waiting.pk]
    assert "no worker on workflows" in listed[due.pk]
    assert "start `pgflow_worker --queues workflows`" in listed[due.pk]
    assert "paused: " in listed[paused.pk] and "resume" in listed[paused.pk]
    assert "<title>Workflow runs |" in page
    assert "Select workflow run to change" not in page


def test_child_runs_name_their_parent_and_the_status_filter_counts(login, viewer):
    parent = run_workflow(cw.Parent.start(input={"n": 2, "pause": [1]}))  # child 0 finishes, child 1 pauses
    page = login(viewer).get(changelist_url()).content.decode()
    listed = rows(page)
    children = [pk for pk in listed if pk != parent.pk]
    assert len(children) == 2
    for child in children:
        assert f"#{parent.pk}" in listed[child]
    assert "is waiting for 2 child runs (1 ended)" in listed[parent.pk], listed[parent.pk]  # counted, as on its page
    text = html.unescape(page)
    assert "Running (1)" in text and "Finished (1)" in text and "Paused (1)" in text and "Cancelled (0)" in text


def test_a_failed_fan_out_reads_as_its_members_own_error(login, viewer):
    tasks = [("tests.fanout_tasks.double", [1]), ("tests.fanout_tasks.fail", ["vendor 13's inbox refuses mail"])]
    run = run_workflow(fw.Fan.start(input={"tasks": tasks}))
    assert run.status == "paused"
    row = rows(login(viewer).get(changelist_url()).content.decode())[run.pk]
    assert "paused: RuntimeError" in row, row  # the badge: the member's class, not FanOutFailed
    assert "job 1 (tests.fanout_tasks.fail), failed with RuntimeError: vendor 13's inbox refuses mail" in row, row
    assert "paused: FanOutFailed" not in row
