"""``manage.py pgflow_archive restore`` at its edges: a run that is live is refused with a
message saying so; a run id the archive does not hold is refused naming where it looked; a
restored run is found again by the run list's search and opens in the live run page."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from pgflow.runtime import sweep
from pgflow.store import now
from pgflow.testing import run_workflow
from tests import attribute_workflows as aw
from tests.integration.test_archive import configure, ended

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db


def listed(page: str) -> set[int]:
    return {int(pk) for pk in re.findall(r'class="field-id"><a href="[^"]*">(\d+)</a>', page)}


def test_restoring_a_live_run_is_refused_saying_it_is_live(settings, tmp_path):
    configure(settings, tmp_path)
    live = run_workflow(aw.TwoSteps.start(key="live-1"))  # never archived
    with pytest.raises(CommandError) as raised:
        call_command("pgflow_archive", "restore", str(live.pk))
    assert str(raised.value) == (
        f"run {live.pk} is live in the database (TwoSteps, finished): nothing to restore; "
        f"it opens at /admin/pgflow/workflowrun/{live.pk}/change/"
    )


def test_a_run_the_archive_does_not_hold_is_refused_naming_where_it_looked(settings, tmp_path):
    configure(settings, tmp_path)
    run = ended(run_workflow(aw.TwoSteps.start()), 40)
    assert sweep.purge(at=now()) == 1
    day = run.finished_at.date().isoformat()
    with pytest.raises(CommandError) as raised:
        call_command("pgflow_archive", "restore", "999999")
    assert str(raised.value) == (
        f"run 999999 is not in the archive: looked in the storage 'pgflow_archive' under 'runs/', "
        f"1 day ({day} to {day})"
    )
    with pytest.raises(CommandError) as raised:
        call_command("pgflow_archive", "restore", str(run.pk), "--day", "2001-01-01")
    assert str(raised.value) == (
        f"run {run.pk} is not in the archive: looked in the storage 'pgflow_archive' under 'runs/', "
        "the day 2001-01-01 (it holds 1 day; leave out --day to look in all)"
    )


def test_a_restored_run_is_searchable_and_opens_in_the_run_page(settings, tmp_path, login, viewer):
    configure(settings, tmp_path)
    run = ended(run_workflow(aw.TwoSteps.start(key="order-70", attributes={"plan": "platinum"})), 40)
    assert sweep.purge(at=now()) == 1
    client = login(viewer)
    runs = reverse("admin:pgflow_workflowrun_changelist")
    assert listed(client.get(runs, {"q": "key:order-70"}).content.decode()) == set()
    call_command("pgflow_archive", "restore", str(run.pk), stdout=io.StringIO())
    assert listed(client.get(runs, {"q": "key:order-70"}).content.decode()) == {run.pk}
    assert listed(client.get(runs, {"q": "attr.plan:platinum"}).content.decode()) == {run.pk}
    assert listed(client.get(runs, {"q": "class:TwoSteps status:finished"}).content.decode()) == {run.pk}
    page = client.get(reverse("admin:pgflow_workflowrun_change", args=[run.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "order-70" in text and "first" in text and "second" in text
    archived = client.get(reverse("admin:pgflow_archived_runs"), {"key": "order-70"}).content.decode()
    live = reverse("admin:pgflow_workflowrun_change", args=[run.pk])
    assert f'<a href="{live}" class="pgflow-archived-live">restored: open the live run</a>' in archived
