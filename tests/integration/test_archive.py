"""The archive (PGFLOW["ARCHIVE"]) on a real database and the filesystem storage: retention
writes each run it purges, with its attempts, events, signals and batches, as gzip JSON Lines
grouped by the day it ended, before the purge; a run whose write failed is not purged; KEEP
"failed" archives only the cancelled runs and those with a failed attempt. Read back by id and
searched by key, class and attribute."""

from __future__ import annotations

import gzip
import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

import pgflow
from pgflow import archive
from pgflow.conf import validate
from pgflow.models import WorkflowRun
from pgflow.runtime import sweep
from pgflow.store import now
from pgflow.testing import run_workflow
from tests import attribute_workflows as aw
from tests import workflows as wf

pytestmark = pytest.mark.django_db


def configure(settings, location, **archive_settings):
    settings.STORAGES = {
        **settings.STORAGES,
        "pgflow_archive": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(location)},
        },
    }
    settings.PGFLOW = {
        **settings.PGFLOW,
        "RETENTION": timedelta(days=30),
        "ARCHIVE": {"STORAGE": "pgflow_archive", "PREFIX": "runs/", **archive_settings},
    }


def ended(run, days_ago: float):
    """``run`` (ended) as if it had ended ``days_ago`` days ago."""
    moment = now() - timedelta(days=days_ago)
    WorkflowRun.objects.filter(pk=run.pk).update(finished_at=moment)
    return WorkflowRun.objects.get(pk=run.pk)


def lines(path):
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]


def test_retention_writes_each_run_before_it_purges_it(settings, tmp_path):
    configure(settings, tmp_path)
    gold = ended(run_workflow(aw.TwoSteps.start(key="order-7", attributes={"plan": "gold"})), 40)
    waiting = run_workflow(wf.WaitsForPayment.start(input={"plan": "pro"}))
    pgflow.signal(waiting, "payment", {"amount": 5})
    waiting = ended(run_workflow(waiting), 41)
    recent = ended(run_workflow(aw.TwoSteps.start()), 1)
    assert (gold.status, waiting.status) == ("finished", "finished")

    assert sweep.purge(at=now()) == 2
    assert set(WorkflowRun.objects.values_list("pk", flat=True)) == {recent.pk}
    files = sorted(tmp_path.glob("runs/*/*.jsonl.gz"))
    assert [f.parent.name for f in files] == sorted(
        {gold.finished_at.date().isoformat(), waiting.finished_at.date().isoformat()}
    )
    records = {record["run"]["id"]: record for path in files for record in lines(path)}
    assert set(records) == {gold.pk, waiting.pk}
    assert records[gold.pk]["run"]["attributes"] == {"plan": "gold"}
    assert [s["step_name"] for s in records[gold.pk]["steps"]] == ["first", "second"]
    assert [e["event"] for e in records[gold.pk]["events"]][0] == "started"
    assert [s["name"] for s in records[waiting.pk]["signals"]] == ["payment"]

    arch = archive.configured()
    assert archive.find(arch, gold.pk)["run"]["key"] == "order-7"
    assert archive.find(arch, recent.pk) is None
    days = archive.days(arch)
    assert [r["run"]["id"] for r in archive.search(arch, days_=days, key="order-7")] == [gold.pk]
    assert [r["run"]["id"] for r in archive.search(arch, days_=days, workflow="WaitsForPayment")] == [waiting.pk]
    assert [r["run"]["id"] for r in archive.search(arch, days_=days, attributes={"plan": "gold"})] == [gold.pk]


def test_a_run_whose_archive_write_failed_is_not_purged(settings, tmp_path):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the archive's folder would be")
    configure(settings, blocked)
    run = ended(run_workflow(aw.TwoSteps.start()), 40)
    assert sweep.purge(at=now()) == 0
    assert WorkflowRun.objects.filter(pk=run.pk).exists()
    configure(settings, tmp_path / "fixed")  # the storage works again: the next sweep archives and purges it
    assert sweep.purge(at=now()) == 1
    assert not WorkflowRun.objects.filter(pk=run.pk).exists()
    assert len(list((tmp_path / "fixed").glob("runs/*/*.jsonl.gz"))) == 1


def test_keep_failed_archives_only_cancelled_runs_and_runs_with_a_failed_attempt(settings, tmp_path):
    configure(settings, tmp_path, KEEP="failed")
    plain = ended(run_workflow(aw.TwoSteps.start()), 40)
    cancelled = aw.TwoSteps.start()
    cancelled.cancel(actor="ops")
    cancelled = ended(cancelled, 40)
    # Finished, but after a failed attempt: its step raised, the run paused, an operator skipped it.
    recovered = run_workflow(wf.Failing.start())
    assert recovered.status == "paused"
    recovered.skip_step(actor="ops")
    recovered = ended(recovered, 40)
    assert recovered.status == "finished"
    assert sweep.purge(at=now()) == 3
    records = [record for path in tmp_path.glob("runs/*/*.jsonl.gz") for record in lines(path)]
    assert sorted(record["run"]["id"] for record in records) == sorted([cancelled.pk, recovered.pk])
    assert plain.pk not in {record["run"]["id"] for record in records}


def test_a_bad_archive_setting_is_named_with_what_is_accepted():
    assert validate({"ARCHIVE": {"STORAGE": "s3", "KEEP": "some"}}) == [
        "PGFLOW['ARCHIVE']['KEEP'] must be one of all, failed, got 'some'"
    ]
    assert validate({"ARCHIVE": {"BUCKET": "x"}}) == [
        "unknown key 'BUCKET' in PGFLOW['ARCHIVE'] (accepted: STORAGE, PREFIX, KEEP)"
    ]


def test_restore_brings_an_archived_run_back_as_the_ended_run_it_was(settings, tmp_path):
    configure(settings, tmp_path)
    waiting = run_workflow(wf.WaitsForPayment.start(input={"plan": "pro"}, attributes={"plan": "gold"}))
    pgflow.signal(waiting, "payment", {"amount": 5})
    run = ended(run_workflow(waiting), 40)
    before = {
        "steps": list(run.steps.values_list("step_name", "status", "output")),
        "events": list(run.events.values_list("event", "details")),
    }
    assert sweep.purge(at=now()) == 1
    out = io.StringIO()
    call_command("pgflow_archive", "restore", str(run.pk), stdout=out)
    assert f"restored run {run.pk} (WaitsForPayment, finished)" in out.getvalue()
    back = WorkflowRun.objects.get(pk=run.pk)
    assert (back.status, back.attributes, back.input) == ("finished", {"plan": "gold"}, {"plan": "pro"})
    assert list(back.steps.values_list("step_name", "status", "output")) == before["steps"]
    assert list(back.events.values_list("event", "details")) == before["events"]
    assert list(back.signal_set.values_list("name", "payload")) == [("payment", {"amount": 5})]
    assert back.finished_at > run.finished_at  # kept another RETENTION
    with pytest.raises(
        CommandError, match=rf"run {run.pk} is live in the database \(WaitsForPayment, finished\): nothing to restore"
    ):
        call_command("pgflow_archive", "restore", str(run.pk))
    with pytest.raises(CommandError, match="run 999999 is not in the archive"):
        call_command("pgflow_archive", "restore", "999999")
    with pytest.raises(CommandError, match="--day must be a date written YYYY-MM-DD, got 'today'"):
        call_command("pgflow_archive", "restore", "1", "--day", "today")
