"""The archive on an S3-compatible storage through django-storages: a real local S3 server
(moto's, a separate process), retention writing a run there before purging it, the run found
again by id (through its index) and restored. Skipped where django-storages or moto are not installed (the
``archive`` extra, and ``dev``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command

from pgflow import archive
from pgflow.models import WorkflowRun
from pgflow.runtime import sweep
from pgflow.store import now
from pgflow.testing import run_workflow
from tests import attribute_workflows as aw

boto3 = pytest.importorskip("boto3")
pytest.importorskip("storages")
pytest.importorskip("moto")

BUCKET = "pgflow-archive"
KEYS = {"access_key": "testing", "secret_key": "testing"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def s3_server(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    log = (tmp_path / "moto.log").open("wb")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"the S3 server did not start: {(tmp_path / 'moto.log').read_text()}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def client(url: str):
    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=KEYS["access_key"],
        aws_secret_access_key=KEYS["secret_key"],
        region_name="us-east-1",
    )


def test_retention_archives_to_s3_and_the_run_comes_back(settings, transactional_db, s3_server):
    client(s3_server).create_bucket(Bucket=BUCKET)
    settings.STORAGES = {
        **settings.STORAGES,
        "pgflow_archive": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {"bucket_name": BUCKET, "endpoint_url": s3_server, "region_name": "us-east-1", **KEYS},
        },
    }
    settings.PGFLOW = {**settings.PGFLOW, "ARCHIVE": {"STORAGE": "pgflow_archive", "PREFIX": "runs/"}}
    run = run_workflow(aw.TwoSteps.start(key="s3-1", attributes={"plan": "gold"}))
    WorkflowRun.objects.filter(pk=run.pk).update(finished_at=now() - timedelta(days=40))
    assert sweep.purge(at=now()) == 1
    assert not WorkflowRun.objects.filter(pk=run.pk).exists()
    index, stored = sorted(item["Key"] for item in client(s3_server).list_objects_v2(Bucket=BUCKET)["Contents"])
    assert index.startswith("runs/") and index.endswith(".index.json.gz")  # written with its object
    assert stored == index.removesuffix(".index.json.gz") + ".jsonl.gz"
    configured = archive.configured()
    assert archive.find(configured, run.pk)["run"]["attributes"] == {"plan": "gold"}
    assert [r["run"]["id"] for r in archive.search(configured, days_=archive.days(configured), key="s3-1")] == [run.pk]
    call_command("pgflow_archive", "restore", str(run.pk))
    assert WorkflowRun.objects.get(pk=run.pk).steps.count() == 2
