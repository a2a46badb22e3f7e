"""The archive when a purge is tried again: a batch whose archive write succeeded but whose
purge then rolled back (here a row elsewhere still naming the run, through a real foreign key)
is archived again by the next sweep, and the archive still holds each run once; a run whose
write failed (the object or its index) is never purged."""

from __future__ import annotations

import gzip
import io
import json
import re

import pytest
from django.core.files.storage import FileSystemStorage
from django.core.management import call_command
from django.db import IntegrityError, connection
from django.urls import reverse

from pgflow import archive
from pgflow.core import archiving
from pgflow.models import WorkflowRun
from pgflow.runtime import sweep
from pgflow.store import now
from pgflow.testing import run_workflow
from tests import attribute_workflows as aw
from tests.integration.test_archive import configure, ended

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db


class IndexRefusingStorage(FileSystemStorage):
    """A filesystem storage whose disk refuses the archive's index files (a quota, a policy)."""

    def _save(self, name, content):
        if name.endswith(archiving.INDEX_SUFFIX):
            raise OSError(f"no space left for {name}")
        return super()._save(name, content)


def archived_lines(location) -> list[int]:
    """Every run id the archive's data objects hold, one per line written."""
    return sorted(
        json.loads(line)["run"]["id"]
        for path in location.glob("runs/*/*.jsonl.gz")
        for line in gzip.decompress(path.read_bytes()).decode().splitlines()
    )


def page_rows(client) -> list[int]:
    page = client.get(reverse("admin:pgflow_archived_runs")).content.decode()
    return [int(pk) for pk in re.findall(r'<tr class="pgflow-archived-row" data-run="(\d+)">', page)]


@pytest.fixture
def referenced():
    """A table of the project's own naming runs: while a row names a run, its delete fails."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE archive_test_note (run_id bigint NOT NULL REFERENCES pgflow_run (id))")

    def note(run_id: int | None) -> None:
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM archive_test_note")
            if run_id is not None:
                cursor.execute("INSERT INTO archive_test_note VALUES (%s)", [run_id])

    return note


def test_a_purge_rolled_back_after_its_write_leaves_the_run_archived_once(
    settings, tmp_path, referenced, login, viewer
):
    configure(settings, tmp_path)
    run = ended(run_workflow(aw.TwoSteps.start(key="order-1")), 40)
    referenced(run.pk)
    with pytest.raises(IntegrityError):
        sweep.purge(at=now())  # written, then the delete fails: the batch rolls back
    assert WorkflowRun.objects.filter(pk=run.pk).exists()
    assert archived_lines(tmp_path) == [run.pk]
    referenced(None)
    assert sweep.purge(at=now()) == 1  # the same batch again: its object is written over
    assert archived_lines(tmp_path) == [run.pk]
    assert page_rows(login(viewer)) == [run.pk]
    out = io.StringIO()
    call_command("pgflow_archive", "restore", str(run.pk), stdout=out)
    assert WorkflowRun.objects.filter(pk=run.pk).count() == 1


def test_a_batch_grown_since_its_rolled_back_purge_still_shows_each_run_once(
    settings, tmp_path, referenced, login, viewer
):
    configure(settings, tmp_path)
    first = ended(run_workflow(aw.TwoSteps.start(key="order-1")), 40)
    referenced(first.pk)
    with pytest.raises(IntegrityError):
        sweep.purge(at=now())
    referenced(None)
    second = ended(run_workflow(aw.TwoSteps.start(key="order-2")), 40)  # the next batch holds both
    assert sweep.purge(at=now()) == 2
    assert archived_lines(tmp_path) == [first.pk, second.pk]  # the older object, superseded, went
    assert page_rows(login(viewer)) == [second.pk, first.pk]
    configured = archive.configured()
    assert [r["run"]["id"] for r in archive.search(configured, days_=archive.days(configured), key="order-1")] == [
        first.pk
    ]
    call_command("pgflow_archive", "restore", str(first.pk), stdout=io.StringIO())
    assert WorkflowRun.objects.get(pk=first.pk).key == "order-1"


def test_the_reader_shows_a_run_held_by_two_objects_once_the_newest(settings, tmp_path, login, viewer):
    """Two objects naming one run (a batch that lost a run to a lock between its tries, or a
    restored run archived again): the page and restore take the newest copy."""
    configure(settings, tmp_path)
    run = ended(run_workflow(aw.TwoSteps.start(key="order-1", attributes={"plan": "gold"})), 40)
    assert sweep.purge(at=now()) == 1
    (old,) = tmp_path.glob("runs/*/*.jsonl.gz")
    (old_index,) = tmp_path.glob(f"runs/*/*{archiving.INDEX_SUFFIX}")
    record = json.loads(gzip.decompress(old.read_bytes()))
    entry = json.loads(gzip.decompress(old_index.read_bytes()))
    newer = {**record, "archived_at": "2999-01-01T00:00:00+00:00", "run": {**record["run"], "key": "order-1b"}}
    copy = old.with_name(f"runs-{run.pk}-{run.pk}-0123abcd.jsonl.gz")
    copy.write_bytes(gzip.compress((json.dumps(newer) + "\n").encode()))
    copy.with_name(copy.name.removesuffix(".jsonl.gz") + archiving.INDEX_SUFFIX).write_bytes(
        gzip.compress(
            (
                json.dumps(
                    {
                        **entry,
                        "key": "order-1b",
                        "archived_at": newer["archived_at"],
                        "object": f"runs/{old.parent.name}/{copy.name}",
                    }
                )
                + "\n"
            ).encode()
        )
    )
    assert page_rows(login(viewer)) == [run.pk]
    configured = archive.configured()
    assert archive.find(configured, run.pk)["run"]["key"] == "order-1b"
    call_command("pgflow_archive", "restore", str(run.pk), stdout=io.StringIO())
    assert WorkflowRun.objects.get(pk=run.pk).key == "order-1b"


def test_a_run_whose_index_could_not_be_written_is_not_purged(settings, tmp_path):
    configure(settings, tmp_path)
    settings.STORAGES = {
        **settings.STORAGES,
        "pgflow_archive": {"BACKEND": f"{__name__}.IndexRefusingStorage", "OPTIONS": {"location": str(tmp_path)}},
    }
    run = ended(run_workflow(aw.TwoSteps.start()), 40)
    assert sweep.purge(at=now()) == 0
    assert WorkflowRun.objects.filter(pk=run.pk).exists()
    assert list(tmp_path.glob("runs/*/*")) == []  # its object, written, was taken back
    configure(settings, tmp_path)  # the storage works again
    assert sweep.purge(at=now()) == 1
    assert not WorkflowRun.objects.filter(pk=run.pk).exists()
    assert len(list(tmp_path.glob("runs/*/*.jsonl.gz"))) == 1
    assert len(list(tmp_path.glob(f"runs/*/*{archiving.INDEX_SUFFIX}"))) == 1
