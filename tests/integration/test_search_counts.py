"""The run list's counts stop at counting.COUNT_CAP (1,000): past it the list says "more than",
and the status filter "1,000+", so a search matching most of a big history costs what a
thousand matches cost (benchmarks/search_runs.py). Here the cap is lowered to 2."""

from __future__ import annotations

import re

import pytest

from pgflow_dashboard.admin import counting
from tests import workflows as wf
from tests.dashboard_support import changelist_url

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db


def text_of(page: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", page).split())


def test_counts_past_the_cap_say_more_than(login, viewer, monkeypatch):
    monkeypatch.setattr(counting, "COUNT_CAP", 2)
    for _ in range(3):
        wf.ThreeSteps.start()
    client = login(viewer)
    page = text_of(client.get(changelist_url()).content.decode())
    assert "more than 2 workflow runs" in page, page
    assert "Running (2+)" in page and "Paused (0)" in page, page
    page = text_of(client.get(changelist_url(), {"q": "status:running"}).content.decode())
    assert "more than 2 workflow runs" in page
    assert len(re.findall(r"field-id", client.get(changelist_url()).content.decode())) >= 3  # all listed


def test_counts_under_the_cap_are_exact(login, viewer, monkeypatch):
    monkeypatch.setattr(counting, "COUNT_CAP", 2)
    for _ in range(2):
        wf.ThreeSteps.start()
    page = text_of(login(viewer).get(changelist_url()).content.decode())
    assert "2 workflow runs" in page and "more than" not in page, page
    assert "Running (2)" in page
