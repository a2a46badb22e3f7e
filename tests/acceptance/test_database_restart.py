"""Stop PostgreSQL for five seconds in the middle of a load: workers log the outage,
reconnect without a restart, and finish every run, bodies that query through the ORM
(sync, on their step thread's connection, and async, on the one asgiref's thread shares)
included: a body that failed because the database went away is re-attempted, never paused.
And once the worker has found the database away, no body runs on a session the outage
ended: every step thread, and asgiref's for async bodies, reconnects before its next body.

Runs on a private cluster of its own (the suite's database stays up)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from example_project import pgcluster
from tests.invariants import cluster_violations

from .conftest import cluster_env

ROOT = Path(__file__).resolve().parents[2]
MANAGE = [sys.executable, "manage.py"]
pytestmark = pytest.mark.skipif(pgcluster._system_binaries() is None, reason="needs the system's PostgreSQL")

START_RUNS = """
from django.db import transaction
from tests.reliability_workflows import AsyncQueries, Load, Queries
with transaction.atomic():
    for n in range({count}):
        (Load, Queries, AsyncQueries)[n % 3].start()
"""

START_QUERIES = """
from django.db import transaction
from tests.reliability_workflows import AsyncQueries, Queries
with transaction.atomic():
    for n in range({count}):
        (Queries, AsyncQueries)[n % 2].start()
"""


def finished(url: str) -> int:
    try:
        with psycopg.connect(url.replace("postgres://", "postgresql://"), connect_timeout=2) as conn:
            return conn.execute("SELECT count(*) FROM pgflow_run WHERE status = 'finished'").fetchone()[0]
    except psycopg.OperationalError:
        return -1


def paused(url: str) -> list[str]:
    try:
        with psycopg.connect(url.replace("postgres://", "postgresql://"), connect_timeout=2) as conn:
            found = conn.execute("SELECT paused_reason FROM pgflow_run WHERE status = 'paused' LIMIT 5").fetchall()
            return [reason for (reason,) in found]
    except psycopg.OperationalError:
        return []


@dataclass(frozen=True)
class Cluster:
    data: Path
    url: str
    env: dict[str, str]

    @property
    def port(self) -> int:
        port = urlsplit(self.url).port
        assert port is not None, self.url
        return port


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A private PostgreSQL cluster, migrated, stopped and removed after the test."""
    data = Path(tempfile.mkdtemp(prefix="pgflow-restart-"))
    data.chmod(0o755)
    try:
        url = pgcluster.ensure(data)
        env = cluster_env(url, lease=30)
        subprocess.run([*MANAGE, "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
        yield Cluster(data, url, env)
    finally:
        pgcluster.stop(data)
        shutil.rmtree(data, ignore_errors=True)


def test_no_body_runs_on_a_session_the_outage_ended(cluster):
    """Every session of an idle worker is ended (as a restart ends them) while its four step
    threads and asgiref's thread (async bodies' queries) each hold a connection. The claim
    loop finds the database away first; then each thread's next body must run on a fresh
    session, not lose its attempt on the dead one."""
    url, env = cluster.url, cluster.env
    worker = None
    log = cluster.data / "worker.log"
    try:
        start = [*MANAGE, "shell", "-c"]
        subprocess.run([*start, START_QUERIES.format(count=12)], cwd=ROOT, env=env, check=True)
        with log.open("wb") as out:
            worker = subprocess.Popen(
                [*MANAGE, "pgflow_worker", "--concurrency", "4"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        libpq = url.replace("postgres://", "postgresql://")
        deadline = time.monotonic() + 60
        while finished(url) < 12 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert finished(url) == 12
        with psycopg.connect(libpq, autocommit=True) as conn:
            ended = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()[0]
        assert ended >= 5, "the claim loop's and the step threads' sessions"
        deadline = time.monotonic() + 20
        while "database unavailable" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "database unavailable" in log.read_text()
        subprocess.run([*start, START_QUERIES.format(count=24)], cwd=ROOT, env=env, check=True)
        deadline = time.monotonic() + 60
        while finished(url) < 36 and time.monotonic() < deadline:
            assert worker.poll() is None
            time.sleep(0.1)
        assert finished(url) == 36
        with psycopg.connect(libpq) as conn:
            lost = conn.execute("SELECT step_name, error_message FROM pgflow_step WHERE outcome = 'lost'").fetchall()
        assert lost == [], "bodies ran on a session the outage had ended"
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()


def test_workers_ride_out_a_database_restart(cluster, capsys):
    data, url, env, port = cluster.data, cluster.url, cluster.env, cluster.port
    workers: list[subprocess.Popen[bytes]] = []
    logs = [data / f"worker-{n}.log" for n in range(2)]
    try:
        runs = 300
        subprocess.run([*MANAGE, "shell", "-c", START_RUNS.format(count=runs)], cwd=ROOT, env=env, check=True)
        for log in logs:
            with log.open("wb") as out:
                workers.append(
                    subprocess.Popen(
                        [*MANAGE, "pgflow_worker", "--concurrency", "4"],
                        cwd=ROOT,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
        deadline = time.monotonic() + 60
        while finished(url) < 30 and time.monotonic() < deadline:
            time.sleep(0.1)
        before = finished(url)
        assert 0 < before < runs, "the outage must fall in the middle of the load"
        pgcluster.stop(data)
        time.sleep(5)
        pgcluster.start_again(data, port)
        deadline = time.monotonic() + 180
        while finished(url) < runs and time.monotonic() < deadline:
            assert all(w.poll() is None for w in workers), "a worker exited instead of reconnecting"
            assert paused(url) == [], "runs paused after the outage"
            time.sleep(0.2)
        assert finished(url) == runs
        with psycopg.connect(url.replace("postgres://", "postgresql://")) as conn:
            open_steps = conn.execute(
                "SELECT count(*) FROM pgflow_step WHERE status IN ('scheduled', 'waiting', 'in_progress')"
            ).fetchone()[0]
            doubles = conn.execute(
                "SELECT count(*) FROM (SELECT run_id, step_name FROM pgflow_step WHERE status = 'completed' "
                "GROUP BY 1, 2 HAVING count(*) > 1) d"
            ).fetchone()[0]
            found = cluster_violations(conn)
            lost = conn.execute(
                "SELECT count(*) FROM pgflow_step WHERE outcome = 'lost' AND error_message LIKE '%%connection%%'"
            ).fetchone()[0]
            # A body the outage cut loses its attempt once; its re-attempt runs on a fresh
            # session (the claim loop found the database away before it could be claimed).
            lost_twice = conn.execute(
                "SELECT run_id, step_name, count(*) FROM pgflow_step WHERE outcome = 'lost' "
                "GROUP BY 1, 2 HAVING count(*) > 1"
            ).fetchall()
        assert paused(url) == []
        assert lost_twice == [], "steps lost again after the database was back"
        assert open_steps == 0
        assert doubles == 0
        assert found == [], found[:20]
        for worker in workers:
            worker.terminate()
            assert worker.wait(60) == 0
        output = "".join(log.read_text() for log in logs)
        assert "database unavailable" in output
        assert "database back after" in output
        with capsys.disabled():
            print(
                f"\n[reliability] database restart: {runs} runs, PostgreSQL down 5 s after {before} finished: "
                f"all {runs} finished (two thirds query the ORM), {lost} bodies re-attempted after losing their "
                "connection, 0 steps completed twice, workers reconnected without a restart"
            )
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
