"""The admin's Queues page over HTTP: each queue's figures, and Pause / Resume through the
public API, for those with a change permission only."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from pgflow import store
from pgflow.models import QueueState
from pgflow.runtime import presence
from tests import flowcontrol_workflows as fc

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db(transaction=True)


def url() -> str:
    return reverse("admin:pgflow_queuestate_changelist")


def row_of(page: str, queue: str) -> str:
    start = page.index(f"<code>{queue}</code>")
    return page[start : page.index("</tr>", start)]


def cells(row: str) -> list[str]:
    """The cells after the queue's name: due, oldest due, in progress, workers, state, ..."""
    return [cell.split(">", 1)[1] for cell in row.split("<td")[1:]]


def test_the_page_lists_each_queues_figures(login, viewer):
    now = timezone.now()
    for tenant in ("a", "a", "a", "b"):
        fc.PerTenant.start(input={"tenant": tenant})
    store.claim(worker="w", queues=["limits"], limit=1)  # one in progress, three due
    presence.register(name="w-live", queues=["limits", "mail"], concurrency=4, at=now)
    presence.register(name="w-gone", queues=["limits"], concurrency=1, at=now - timedelta(hours=2))
    response = login(viewer).get(url())
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    limits = cells(row_of(page, "limits"))
    assert limits[0].startswith("3<") and limits[2].startswith("1<") and limits[3].startswith("1<")
    assert "running" in limits[4]
    assert limits[1].endswith("s</td>\n      ")  # the oldest due age
    mail = cells(row_of(page, "mail"))  # served, nothing in it
    assert mail[0].startswith("0<") and mail[1].startswith("—") and mail[3].startswith("1<")
    assert "Pause</button>" not in page  # a viewer sees no action


def test_an_operator_pauses_and_resumes_a_queue_and_the_page_says_who(login, operator):
    fc.PerTenant.start(input={"tenant": "a"})
    client = login(operator)
    page = html.unescape(client.get(url()).content.decode())
    assert 'value="pause">Pause</button>' in row_of(page, "limits")
    asked = html.unescape(" ".join(client.post(url(), {"action": "pause", "queue": "limits"}).content.decode().split()))
    assert "Pausing queue <code>limits</code> stops every worker claiming its attempts" in asked
    assert "It has <strong>1</strong> attempt due now and <strong>0</strong> in progress" in asked
    assert not QueueState.objects.exists()  # nothing changed until it is confirmed
    confirmed = {"action": "pause", "queue": "limits", "confirm": "yes", "reason": "vendor outage"}
    response = client.post(url(), confirmed, follow=True)
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert "Queue 'limits' paused." in page
    assert "paused by user:operator (reason: vendor outage)" in row_of(page, "limits")
    assert "paused by user:operator" in row_of(page, "limits") and "<strong>paused</strong>" in row_of(page, "limits")
    assert store.claim(worker="w", queues=["limits"], limit=4) == []  # the engine honours it
    asked = client.post(url(), {"action": "resume", "queue": "limits"}).content.decode()
    asked = html.unescape(" ".join(asked.split()))
    assert "Resuming queue <code>limits</code> lets every worker serving it claim its attempts again" in asked
    assert "It has <strong>1</strong> attempt due now" in asked and 'value="resume">Resume queue limits' in asked
    assert QueueState.objects.get(queue="limits").paused  # nothing changed until it is confirmed
    resumed = {"action": "resume", "queue": "limits", "confirm": "yes", "reason": "vendor back"}
    response = client.post(url(), resumed, follow=True)
    page = html.unescape(response.content.decode())
    assert "resumed by user:operator (reason: vendor back)" in row_of(page, "limits")
    assert QueueState.objects.get(queue="limits").paused is False
    assert len(store.claim(worker="w", queues=["limits"], limit=4)) == 1


def test_a_pause_with_a_reason_too_long_shows_its_page_again_and_changes_nothing(login, operator):
    client = login(operator)
    confirmed = {"action": "pause", "queue": "limits", "confirm": "yes", "reason": "x" * 121}
    refused = client.post(url(), confirmed)
    assert refused.status_code == 400
    page = html.unescape(refused.content.decode())
    assert "the reason has 121 characters; at most 120 are recorded" in page
    assert "Pausing queue <code>limits</code> stops every worker claiming its attempts" in page
    assert 'value="' + "x" * 121 + '"' in page  # what was typed, to shorten
    assert not QueueState.objects.exists()


def test_a_queue_not_listed_can_be_paused_by_name_and_a_bad_name_changes_nothing(login, operator):
    client = login(operator)
    client.post(url(), {"action": "pause", "queue": "mail", "confirm": "yes"})
    assert QueueState.objects.get(queue="mail").paused
    response = client.post(url(), {"action": "pause", "queue": "no spaces"}, follow=True)
    page = html.unescape(response.content.decode())
    assert "Nothing changed: queue must be" in page and "got 'no spaces'" in page
    assert list(QueueState.objects.values_list("queue", flat=True)) == ["mail"]
    response = client.post(url(), {"action": "drain", "queue": "mail"})
    assert response.status_code == 400
    assert response.content.decode() == "action must be one of pause, resume, got 'drain'"


def test_pause_needs_a_change_permission(login, viewer, staff_without_perms):
    response = login(viewer).post(url(), {"action": "pause", "queue": "limits"})
    assert response.status_code == 403
    assert not QueueState.objects.exists()
    assert login(staff_without_perms).get(url()).status_code == 403


def test_the_queues_page_is_in_the_app_list(login, viewer):
    page = login(viewer).get(reverse("admin:index")).content.decode()
    assert f'href="{url()}"' in page and ">Queues<" in page
