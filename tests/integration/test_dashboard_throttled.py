"""The throttled phase on the run page and in timeline.json: an attempt a limit held, which
limit and key held it, over HTTP against real claims and real bodies."""

from __future__ import annotations

import html

import pytest

from pgflow import store
from pgflow.models import Step
from pgflow.runtime.runner import Runner
from pgflow_dashboard import timeline
from pgflow_dashboard.mcp import reads
from tests import flowcontrol_workflows as fc
from tests.dashboard_support import run_url, timeline_url

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db(transaction=True)

HELD = "concurrency limit 2 for key 'acme'"


def kinds(row):
    return [segment["kind"] for segment in row["segments"]]


def test_an_attempt_held_by_a_full_limit_shows_throttled_and_names_the_limit(login, viewer):
    first, second, third = (fc.PerTenant.start(input={"tenant": "acme", "sleep": 0}) for _ in range(3))
    claimed = store.claim(worker="w", queues=["limits"], limit=10)
    assert sorted(c.run_id for c in claimed) == [first.pk, second.pk]
    client = login(viewer)

    # Held now: throttled up to now (not queued: a worker was free), the limit named.
    page = html.unescape(client.get(run_url(third)).content.decode())
    assert f"held by {HELD}" in page
    (row,) = client.get(timeline_url(third)).json()["rows"]
    assert kinds(row) == ["throttled"]
    data = client.get(timeline_url(third)).json()
    assert data["rows"][0]["segments"][0]["to"] == data["now"]
    # The MCP's get_run and explain_run say the same.
    (attempt,) = reads.get_run(third.pk, now=store.now())["attempts"]
    assert attempt["held_by"] == [HELD] and attempt["durations"]["throttled"] > 0
    assert attempt["durations"]["queued"] is None
    assert any(
        "throttled" in line and HELD in line for line in reads.explain_run(third.pk, now=store.now())["explanation"]
    )

    # A place frees: the next claim lets it through; its throttled time ends where the place freed.
    Runner().execute(next(c for c in claimed if c.run_id == first.pk))
    freed = Step.objects.get(run=first).finished_at
    (held,) = store.claim(worker="w", queues=["limits"], limit=10)
    assert held.run_id == third.pk
    Runner().execute(held)
    attempt = Step.objects.get(run=third)
    assert attempt.status == "completed"
    assert attempt.throttled_until == freed

    page = html.unescape(client.get(run_url(third)).content.decode())
    assert f"was held by {HELD}" in page
    assert '<th scope="col">Throttled</th>' in page
    (row,) = client.get(timeline_url(third)).json()["rows"]
    assert kinds(row)[0] == "throttled" and "ran" in kinds(row)
    throttled = row["segments"][0]
    assert (throttled["from"], throttled["to"]) == (timeline.millis(attempt.scheduled_at), timeline.millis(freed))
    (read,) = reads.get_run(third.pk, now=store.now())["attempts"]
    assert read["throttled_until"] == freed and read["held_by"] == [HELD]
    assert read["durations"]["throttled"] == (freed - attempt.scheduled_at).total_seconds()


def test_an_attempt_let_through_at_once_has_no_throttled_phase(login, viewer):
    run = fc.PerTenant.start(input={"tenant": "acme", "sleep": 0})
    (held,) = store.claim(worker="w", queues=["limits"], limit=10)
    Runner().execute(held)
    client = login(viewer)
    page = html.unescape(client.get(run_url(run)).content.decode())
    assert "held by" not in page
    (row,) = client.get(timeline_url(run)).json()["rows"]
    assert "throttled" not in kinds(row)
