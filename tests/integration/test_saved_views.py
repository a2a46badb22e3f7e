"""Saved views over HTTP: an operator saves the run list's search under a name (from the
link on the run list, the form filled in), the run list offers each view as a filter link
and lists its runs; a search that cannot be read is refused by the form. And an alert rule
of kind runs_matching counts a search's runs, or a saved view's by name."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.urls import reverse

from pgflow.core import alerting
from pgflow.models import Alert, SavedView
from pgflow.observability import alerts
from pgflow.store import now
from tests import attribute_workflows as aw
from tests.dashboard_support import changelist_url, make_user

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db


def listed(page: str) -> set[int]:
    return {int(pk) for pk in re.findall(r'class="field-id"><a href="[^"]*">(\d+)</a>', page)}


def errors_of(page: str) -> list[str]:
    return [
        html.unescape(re.sub(r"<[^>]+>", "", m)).strip()
        for m in re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', page, re.S)
    ]


@pytest.fixture
def curator():
    return make_user("curator", perms=("view_workflowrun", "add_savedview", "view_savedview", "change_savedview"))


@pytest.fixture
def runs():
    return {
        "gold_paused": aw.TwoSteps.start(attributes={"plan": "gold"}),
        "gold_running": aw.TwoSteps.start(attributes={"plan": "gold"}),
        "silver_paused": aw.TwoSteps.start(attributes={"plan": "silver"}),
    }


def pause(*started):
    for run in started:
        run.pause(actor="ops")


def test_an_operator_saves_the_search_and_the_run_list_offers_it(runs, login, curator):
    pause(runs["gold_paused"], runs["silver_paused"])
    client = login(curator)
    query = "attr.plan:gold status:paused"
    page = client.get(changelist_url(), {"q": query}).content.decode()
    assert listed(page) == {runs["gold_paused"].pk}
    (save,) = re.findall(r'<a href="([^"]+)" class="addlink">Save this search as a view</a>', page)
    form = client.get(html.unescape(save)).content.decode()
    assert f'value="{query}"' in form  # the form comes filled in with the search
    answer = client.post(reverse("admin:pgflow_savedview_add"), {"name": "gold paused", "query": query})
    assert answer.status_code == 302
    view = SavedView.objects.get()
    assert (view.name, view.query, view.created_by) == ("gold paused", query, curator)

    page = client.get(changelist_url()).content.decode()
    assert listed(page) == {run.pk for run in runs.values()}
    sidebar = page.split('id="changelist-filter"', 1)[1]
    assert re.search(r'<a href="\?view=gold\+paused"[^>]*>gold paused</a>', sidebar), "a filter link on the run list"
    assert listed(client.get(changelist_url(), {"view": "gold paused"}).content.decode()) == {runs["gold_paused"].pk}
    runs["gold_running"].pause(actor="ops")  # a view is read again each time: it follows the runs
    assert listed(client.get(changelist_url(), {"view": "gold paused"}).content.decode()) == {
        runs["gold_paused"].pk,
        runs["gold_running"].pk,
    }


def test_a_viewer_without_the_permission_gets_no_save_link(runs, login, viewer):
    page = login(viewer).get(changelist_url(), {"q": "attr.plan:gold"}).content.decode()
    assert listed(page) == {runs["gold_paused"].pk, runs["gold_running"].pk}
    assert "Save this search as a view" not in page


def test_a_search_that_cannot_be_read_is_refused_naming_what_is_accepted(login, curator):
    client = login(curator)
    answer = client.post(reverse("admin:pgflow_savedview_add"), {"name": "broken", "query": "attr.plan:>gold"})
    assert answer.status_code == 200
    (message,) = errors_of(answer.content.decode())
    assert "'attr.plan:>gold': > compares with a number (such as attr.<name>:>100)" in message
    assert not SavedView.objects.exists()


def test_a_view_whose_search_no_longer_reads_lists_nothing_and_says_why(runs, login, curator):
    SavedView.objects.create(name="old", query="colour:red", created_at=now())
    page = login(curator).get(changelist_url(), {"view": "old"})
    assert page.status_code == 200
    text = html.unescape(page.content.decode())
    assert listed(text) == set()
    assert "Saved view 'old' cannot be read: 'colour:red': unknown qualifier 'colour'" in text


# --- alert rules: kind runs_matching ------------------------------------------------------------


def check(settings, rule: dict, at) -> int:
    settings.PGFLOW = {**settings.PGFLOW, "ALERTS": [{"targets": [], "cooldown": 0, **rule}]}
    alerts.sync_declared(at)
    return alerts.evaluate(at)


def test_an_alert_fires_when_a_search_has_more_runs_than_its_threshold(settings, runs):
    rule = {"name": "gold paused", "kind": "runs_matching", "query": "attr.plan:gold status:paused", "threshold": 0}
    t0 = now()
    assert check(settings, rule, t0) == 0
    pause(runs["silver_paused"])
    assert check(settings, rule, t0 + timedelta(seconds=1)) == 0  # silver matches not
    pause(runs["gold_paused"])
    assert check(settings, rule, t0 + timedelta(seconds=2)) == 1
    alert = Alert.objects.get(rule__name="gold paused")
    assert alert.value == 1
    assert alert.message == "1 runs match 'attr.plan:gold status:paused' (more than 0)"
    runs["gold_paused"].resume(actor="ops")
    assert check(settings, rule, t0 + timedelta(seconds=3)) == 1  # resolved
    alert.refresh_from_db()
    assert alert.resolved_at is not None


def test_an_alert_counts_a_saved_views_runs_by_its_name(settings, runs):
    SavedView.objects.create(name="gold", query="attr.plan:gold", created_at=now())
    rule = {"name": "many gold", "kind": "runs_matching", "view": "gold", "threshold": 1}
    assert check(settings, rule, now()) == 1  # two gold runs: more than 1
    assert Alert.objects.get().message == "2 runs match saved view 'gold' (attr.plan:gold) (more than 1)"


def test_a_runs_matching_rule_is_checked_with_messages_naming_what_is_accepted():
    def problems(**raw):
        return alerting.rule_problems({"name": "r", "kind": "runs_matching", **raw})

    assert problems(query="attr.plan:gold", threshold=0) == []
    assert problems(view="gold") == []
    assert problems() == [
        "kind 'runs_matching' needs either 'query' (a run search, e.g. \"attr.plan:gold status:paused\") "
        "or 'view' (a saved view's name), not both"
    ]
    (bad,) = problems(query="status:sleeping")
    assert bad.startswith("'query' cannot be read: 'status:sleeping': status must be one of running, paused")
    assert problems(query="status:paused", threshold=-1) == [
        "'threshold' must be a whole number of runs, 0 or more, got -1"
    ]
    assert alerting.parse({"name": "r", "kind": "runs_matching", "view": "v"}).params == {
        "query": None,
        "view": "v",
        "threshold": 0,
    }


def test_the_run_page_lists_the_runs_attributes_each_a_search_of_it(login, viewer):
    run = aw.TwoSteps.start(attributes={"plan": "gold", "seats": 3})
    page = login(viewer).get(reverse("admin:pgflow_workflowrun_change", args=[run.pk])).content.decode()
    shown = re.search(r'<ul class="pgflow-attributes" id="pgflow-attributes">(.*?)</ul>', page, re.S).group(1)
    links = re.findall(r'<a href="([^"]+)"><code>([^<]+)</code></a>', shown)
    assert [label for _url, label in links] == ["plan:gold", "seats:3"]
    assert html.unescape(links[0][0]).endswith("?q=attr.plan:gold")
    assert listed(login(viewer).get(html.unescape(links[1][0])).content.decode()) == {run.pk}
