"""The archive's index: each data object is written with a small index of its runs (id, key,
class, attributes, status, end), so the Archived runs page searches by reading the indexes
and opening a run reads only its own object; an archive written before the index existed is
still searched and opened, by reading its objects."""

from __future__ import annotations

import gzip
import html
import io
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.files.storage import FileSystemStorage
from django.core.management import call_command
from django.urls import reverse

import pgflow
from pgflow import archive
from pgflow.core import archiving
from pgflow.models import WorkflowRun
from pgflow.runtime import sweep
from pgflow.store import now
from pgflow.testing import run_workflow
from tests import attribute_workflows as aw
from tests import workflows as wf
from tests.integration.test_archive import configure

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db

LIST = "admin:pgflow_archived_runs"


class ReadCountingStorage(FileSystemStorage):
    """The filesystem storage, keeping the name of every file opened for reading."""

    opened: list[str] = []

    def _open(self, name, mode="rb"):
        ReadCountingStorage.opened.append(name)
        return super()._open(name, mode)


def rows(page: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr class="pgflow-archived-row" data-run="(\d+)">', page)]


def noon(days_ago: int) -> datetime:
    today = now().astimezone(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    return today - timedelta(days=days_ago)


def ended_at(run, moment: datetime):
    WorkflowRun.objects.filter(pk=run.pk).update(finished_at=moment)
    return WorkflowRun.objects.get(pk=run.pk)


@pytest.fixture
def archived(settings, tmp_path):
    """Three runs archived into three objects: two sweeps on one day, one on another."""
    configure(settings, tmp_path)
    settings.STORAGES = {
        **settings.STORAGES,
        "pgflow_archive": {"BACKEND": f"{__name__}.ReadCountingStorage", "OPTIONS": {"location": str(tmp_path)}},
    }
    gold = ended_at(run_workflow(aw.TwoSteps.start(key="order-7", attributes={"plan": "gold"})), noon(40))
    assert sweep.purge(at=now()) == 1
    silver = ended_at(run_workflow(aw.TwoSteps.start(key="order-8", attributes={"plan": "silver"})), noon(40))
    assert sweep.purge(at=now()) == 1
    waiting = run_workflow(wf.WaitsForPayment.start(input={"plan": "pro"}))
    pgflow.signal(waiting, "payment", {"amount": 5})
    other = ended_at(run_workflow(waiting), noon(45))
    assert sweep.purge(at=now()) == 1
    ReadCountingStorage.opened = []
    return {"gold": gold, "silver": silver, "other": other, "location": tmp_path}


def test_each_object_is_written_with_an_index_of_its_runs(archived):
    location = archived["location"]
    day = noon(40).date().isoformat()
    objects = sorted(location.glob(f"runs/{day}/*.jsonl.gz"))
    indexes = sorted(location.glob(f"runs/{day}/*{archiving.INDEX_SUFFIX}"))
    assert len(objects) == len(indexes) == 2
    entries = [json.loads(line) for path in indexes for line in gzip.decompress(path.read_bytes()).splitlines()]
    gold = next(entry for entry in entries if entry["id"] == archived["gold"].pk)
    assert {k: gold[k] for k in ("key", "workflow_class", "attributes", "status")} == {
        "key": "order-7",
        "workflow_class": "tests.attribute_workflows.TwoSteps",
        "attributes": {"plan": "gold"},
        "status": "finished",
    }
    assert gold["finished_at"].startswith(day)
    assert (location / gold["object"]).is_file() and gold["object"].startswith(f"runs/{day}/runs-")


def test_the_page_searches_the_indexes_and_opens_only_the_runs_object(archived, login, viewer):
    client = login(viewer)
    day = noon(40).date().isoformat()
    assert rows(client.get(reverse(LIST)).content.decode()) == [
        archived["other"].pk,
        archived["silver"].pk,
        archived["gold"].pk,
    ]
    assert rows(client.get(reverse(LIST), {"key": "order-7"}).content.decode()) == [archived["gold"].pk]
    assert rows(client.get(reverse(LIST), {"class": "WaitsForPayment"}).content.decode()) == [archived["other"].pk]
    assert rows(client.get(reverse(LIST), {"attr": "plan:silver"}).content.decode()) == [archived["silver"].pk]
    assert rows(client.get(reverse(LIST), {"day": day}).content.decode()) == [
        archived["silver"].pk,
        archived["gold"].pk,
    ]
    assert ReadCountingStorage.opened and all(
        name.endswith(archiving.INDEX_SUFFIX) for name in ReadCountingStorage.opened
    )

    listing = client.get(reverse(LIST), {"key": "order-8"}).content.decode()
    (link,) = re.findall(r'<a href="([^"]+)">#\d+</a>', listing)
    ReadCountingStorage.opened = []
    page = client.get(html.unescape(link))
    assert page.status_code == 200 and "order-8" in page.content.decode()
    objects = [name for name in ReadCountingStorage.opened if not name.endswith(archiving.INDEX_SUFFIX)]
    (silver_index,) = [
        path
        for path in archived["location"].glob(f"runs/{day}/*{archiving.INDEX_SUFFIX}")
        if "order-8" in gzip.decompress(path.read_bytes()).decode()
    ]
    assert objects == [json.loads(gzip.decompress(silver_index.read_bytes()))["object"]]


def test_an_archive_written_before_the_index_is_still_searched_and_opened(archived, login, viewer):
    for index in archived["location"].glob(f"runs/*/*{archiving.INDEX_SUFFIX}"):
        index.unlink()  # as the archive was before indexes were written
    client = login(viewer)
    assert rows(client.get(reverse(LIST), {"key": "order-7"}).content.decode()) == [archived["gold"].pk]
    assert rows(client.get(reverse(LIST), {"attr": "plan:silver"}).content.decode()) == [archived["silver"].pk]
    assert rows(client.get(reverse(LIST), {"class": "WaitsForPayment"}).content.decode()) == [archived["other"].pk]
    page = client.get(reverse("admin:pgflow_archived_run", args=[archived["gold"].pk]))
    assert page.status_code == 200 and "order-7" in page.content.decode()
    configured = archive.configured()
    assert archive.find(configured, archived["other"].pk)["signals"][0]["name"] == "payment"
    call_command("pgflow_archive", "restore", str(archived["silver"].pk), stdout=io.StringIO())
    assert WorkflowRun.objects.get(pk=archived["silver"].pk).attributes == {"plan": "silver"}
