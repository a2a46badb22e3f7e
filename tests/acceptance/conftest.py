"""Real worker processes against the test database."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> int:
        # A worker still importing Django has no SIGTERM handler yet and would just die:
        # wait until it says it started, as a supervisor's stop after a restart would.
        deadline = time.monotonic() + 60
        while "starting: queues=" not in self.output() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def output(self) -> str:
        return self.log.read_text()


def server() -> dict[str, object]:
    """How psycopg reaches the test database's server (not which database on it)."""
    params = connection.get_connection_params()
    return {k: v for k, v in params.items() if k in ("host", "port", "user", "password")}


def query(database: str, sql: str) -> list[tuple[object, ...]]:
    """Run one statement on another database of the test server, committed; its rows, if any."""
    with psycopg.connect(**server(), dbname=database, autocommit=True) as conn:
        cursor = conn.execute(sql)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def new_database(transactional_db: None, request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of its own on the test server, empty as after createdb, dropped after the
    test: for processes run with settings of their own (a second database, django-tenants, a
    project before migrate). Named after the test database and the module, so that helpers
    running at once never share one, and one left by a killed run is dropped on the next."""
    module = re.sub(r"^test_", "", request.module.__name__.rsplit(".", 1)[-1])
    name = f"{connection.settings_dict['NAME']}_{module}"
    drop = f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
    query("postgres", drop)
    query("postgres", f'CREATE DATABASE "{name}"')
    yield name
    query("postgres", drop)


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    path = tmp_path / "marks.txt"
    path.touch()
    return path


@pytest.fixture
def start_worker(transactional_db: None, tmp_path: Path, marks: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str, lease: float = 2.0, env: dict[str, str] | None = None) -> WorkerProcess:
        log = tmp_path / f"worker-{len(started)}.log"
        full_env = {
            **os.environ,
            "DATABASE_URL": os.environ["DATABASE_URL"],
            "PGFLOW_TEST_DB_NAME": connection.settings_dict["NAME"],
            "PGFLOW_TEST_MARKS": str(marks),
            "PGFLOW_LEASE_SECONDS": str(lease),
            "PGFLOW_SWEEP_SECONDS": "0.5",
            "PGFLOW_POLL_SECONDS": "1",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "pgflow_worker", *args],
                cwd=ROOT,
                env=full_env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        worker = WorkerProcess(proc, log)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait(10)


def cluster_env(url: str, *, lease: int) -> dict[str, str]:
    """The environment of a process on a private cluster of a test's own (a restart, a
    failover): its URL instead of the suite's test database, a short poll and sweep."""
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "PGFLOW_LEASE_SECONDS": str(lease),
        "PGFLOW_POLL_SECONDS": "0.5",
        "PGFLOW_SWEEP_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PGFLOW_TEST_DB_NAME", None)
    return env


def wait_until(predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; {where_runs_stand()}")


def where_runs_stand() -> str:
    """Runs by status and attempts by status, and why any run paused: what a timed-out
    wait needs to be explained after the test database is gone."""
    from django.db.models import Count

    from pgflow.models import Step, WorkflowRun

    runs = dict(WorkflowRun.objects.values_list("status").annotate(n=Count("id")).order_by())
    steps = dict(Step.objects.values_list("status").annotate(n=Count("id")).order_by())
    paused = list(WorkflowRun.objects.filter(status="paused").values_list("paused_reason", flat=True)[:3])
    return f"runs by status {runs}, attempts by status {steps}" + (f", paused because {paused}" if paused else "")
