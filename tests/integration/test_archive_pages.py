"""The admin's "Archived runs" pages over HTTP: runs retention archived (the filesystem
storage) are searched by day, key, class and attribute, and one opens read-only with its
timeline, attempts and events; a bad search is a message naming what is accepted."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.urls import reverse

import pgflow
from pgflow.models import WorkflowRun
from pgflow.runtime import sweep
from pgflow.store import now
from pgflow.testing import run_workflow
from tests import attribute_workflows as aw
from tests import workflows as wf
from tests.integration.test_archive import configure, ended

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db

LIST = "admin:pgflow_archived_runs"


def rows(page: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr class="pgflow-archived-row" data-run="(\d+)">', page)]


@pytest.fixture
def archived(settings, tmp_path):
    configure(settings, tmp_path)
    gold = ended(run_workflow(aw.TwoSteps.start(key="order-7", attributes={"plan": "gold", "seats": 3})), 40)
    waiting = run_workflow(wf.WaitsForPayment.start(input={"plan": "pro"}))
    pgflow.signal(waiting, "payment", {"amount": 5})
    other = ended(run_workflow(waiting), 45)
    assert sweep.purge(at=now()) == 2
    assert not WorkflowRun.objects.exists()
    return {"gold": gold, "other": other}


def test_the_archive_is_searched_by_key_class_day_and_attribute(archived, login, viewer):
    client = login(viewer)
    runs = client.get(reverse("admin:pgflow_workflowrun_changelist")).content.decode()
    assert f'<a href="{reverse(LIST)}" class="viewlink">Archived runs</a>' in runs  # the run list links it
    page = client.get(reverse(LIST))
    assert page.status_code == 200
    assert rows(page.content.decode()) == [archived["other"].pk, archived["gold"].pk]  # newest id first
    assert rows(client.get(reverse(LIST), {"key": "order-7"}).content.decode()) == [archived["gold"].pk]
    assert rows(client.get(reverse(LIST), {"class": "WaitsForPayment"}).content.decode()) == [archived["other"].pk]
    assert rows(client.get(reverse(LIST), {"attr": "plan:gold"}).content.decode()) == [archived["gold"].pk]
    assert rows(client.get(reverse(LIST), {"attr": "seats:3"}).content.decode()) == [archived["gold"].pk]
    day = archived["other"].finished_at.date().isoformat()
    assert rows(client.get(reverse(LIST), {"day": day}).content.decode()) == [archived["other"].pk]
    bad = html.unescape(client.get(reverse(LIST), {"day": "yesterday", "attr": "gold"}).content.decode())
    assert "day must be a date written YYYY-MM-DD, got 'yesterday'" in bad
    assert "attr must be written name:value (e.g. plan:gold), got 'gold'" in bad


def test_an_archived_run_opens_read_only_with_its_timeline(archived, login, viewer):
    client = login(viewer)
    listing = client.get(reverse(LIST), {"key": "order-7"}).content.decode()
    (link,) = re.findall(r'<a href="([^"]+)">#\d+</a>', listing)
    page = client.get(html.unescape(link))
    assert page.status_code == 200
    text = html.unescape(page.content.decode())
    assert f"TwoSteps #{archived['gold'].pk} (archived)" in text
    assert "plan:gold" in text and "order-7" in text
    steps = re.search(r'<table class="pgflow-table" id="pgflow-archived-steps">(.*?)</table>', text, re.S).group(1)
    assert steps.count("<tr>") == 3  # the header and the two attempts
    chart = json.loads(
        re.search(r'<script id="pgflow-timeline-data" type="application/json">(.*?)</script>', text, re.S).group(1)
    )
    assert chart["status"] == "finished" and chart["attempts"] == 2
    assert "<form" not in text.split('id="content-main"', 1)[1]  # read-only: no control, no form
    assert client.get(reverse("admin:pgflow_archived_run", args=[999999])).status_code == 404


def test_looking_needs_the_view_permission(archived, login, staff_without_perms):
    assert login(staff_without_perms).get(reverse(LIST)).status_code == 403
