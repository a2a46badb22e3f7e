"""A primary killed and its synchronous standby promoted under load, workers on a multi-host
connection string (``target_session_attrs=read-write``): no acknowledged start is lost, no
run pauses because its body lost its connection (bodies that query through the ORM, sync and
async), and every step ends exactly once.

The pair is built here, in a folder of its own under /var/tmp (the server's user must reach
it): ``initdb``, then ``pg_basebackup -R`` for the standby, each started with ``pg_ctl`` as
the ``postgres`` user when we are root. The suite's database is not touched."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from example_project import pgcluster
from tests.acceptance.conftest import cluster_env
from tests.invariants import cluster_violations

ROOT = Path(__file__).resolve().parents[2]
BINARIES = pgcluster._system_binaries()
pytestmark = pytest.mark.skipif(BINARIES is None, reason="needs the system's PostgreSQL (initdb, pg_basebackup)")

# Starts runs one at a time (each start its own commit) for ``seconds``, riding out the
# failover as a client would (a failed start is tried again on a fresh connection), and
# writes the id of each start that returned: an acknowledged start.
STARTER = """
import time
from django.db import connection, DatabaseError, InterfaceError
from tests.reliability_workflows import AsyncQueries, Queries
deadline = time.monotonic() + {seconds}
n = 0
with open({path!r}, "a") as out:
    while time.monotonic() < deadline:
        try:
            run = (Queries, AsyncQueries)[n % 2].start()
        except (DatabaseError, InterfaceError):
            connection.close()
            time.sleep(0.1)
            continue
        n += 1
        out.write(f"{{run.pk}}\\n")
        out.flush()
        time.sleep(0.02)
"""


def as_server(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Pair:
    root: Path
    primary: Path
    standby: Path
    primary_port: int
    standby_port: int

    @property
    def url(self) -> str:
        return (
            f"postgres://postgres@127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}/pgflow"
            "?target_session_attrs=read-write&connect_timeout=2"
        )

    def standby_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.standby_port}/pgflow"

    def pg_ctl(self, *args: str) -> None:
        assert BINARIES is not None
        subprocess.run(as_server([str(BINARIES / "pg_ctl"), *args]), check=True, capture_output=True)

    def start(self, data: Path, port: int, *extra: str) -> None:
        options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=100"
        options += " -c fsync=off -c full_page_writes=off " + " ".join(extra)
        self.pg_ctl("-D", str(data), "-l", str(self.root / f"{data.name}.log"), "-o", options, "-w", "start")


def _server(argv: list[str]) -> None:
    subprocess.run(as_server(argv), check=True, capture_output=True)


@pytest.fixture
def pair() -> Iterator[Pair]:
    with build_pair() as made:
        yield made


@contextmanager
def build_pair(*, synchronous: bool = True) -> Iterator[Pair]:
    """A primary and its streaming standby, synchronous (a commit is acknowledged once the
    standby has it) or not; both stopped and removed afterwards."""
    assert BINARIES is not None
    root = Path(tempfile.mkdtemp(prefix="pgflow-failover-", dir="/var/tmp"))  # noqa: S108 - the server's user must reach it
    root.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    made = Pair(root, root / "primary", root / "standby", free_port(), free_port())
    try:
        _server([str(BINARIES / "initdb"), "-D", str(made.primary), "-U", "postgres", "--auth=trust", "--no-sync"])
        made.start(made.primary, made.primary_port)
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{made.primary_port}/postgres", autocommit=True) as c:
            c.execute("CREATE DATABASE pgflow")
        _server(
            [
                str(BINARIES / "pg_basebackup"),
                *("-h", "127.0.0.1", "-p", str(made.primary_port), "-U", "postgres"),
                *("-D", str(made.standby), "-R", "-X", "stream", "--no-sync", "--checkpoint=fast"),
            ]
        )
        made.start(made.standby, made.standby_port)
        if not synchronous:
            wait_streaming(made)
            yield made
            return
        # Synchronous from now on (set after the standby is up: a commit waits for it): a
        # commit is acknowledged once the standby has it, so none is lost with the primary.
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{made.primary_port}/postgres", autocommit=True) as c:
            c.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            c.execute("SELECT pg_reload_conf()")
            deadline = time.monotonic() + 10
            while c.execute("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").fetchone()[0] < 1:
                assert time.monotonic() < deadline, "the standby did not become synchronous"
                time.sleep(0.05)
        yield made
    finally:
        for data in (made.primary, made.standby):
            if (data / "postmaster.pid").exists():
                subprocess.run(
                    as_server([str(BINARIES / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                    capture_output=True,
                    check=False,
                )
        shutil.rmtree(root, ignore_errors=True)


def wait_streaming(made: Pair) -> None:
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{made.primary_port}/postgres", autocommit=True) as c:
        deadline = time.monotonic() + 10
        while c.execute("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'").fetchone()[0] < 1:
            assert time.monotonic() < deadline, "the standby did not start streaming"
            time.sleep(0.05)


def count(url: str, sql: str) -> int:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute(sql).fetchone()[0]
    except psycopg.OperationalError:
        return -1


def replication_warnings(url: str) -> str:
    """What ``manage.py check --database default`` says of replication against ``url``."""
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("PGFLOW_TEST_DB_NAME", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--database", "default"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    return done.stdout + done.stderr


def kill_postmaster(data: Path) -> None:
    """``kill -9`` of the server's postmaster, as a host dying does (no shutdown checkpoint)."""
    pid = int((data / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)


def start_load(
    env: dict[str, str], tmp_path: Path, processes: list[subprocess.Popen[bytes]], *, seconds: int
) -> subprocess.Popen[bytes]:
    """Two workers (logs ``worker-0.log``, ``worker-1.log``) and a process starting runs for
    ``seconds``, writing each acknowledged run id to ``acknowledged``; all appended to
    ``processes`` (the starter last, and returned) so the caller stops them."""
    manage = [sys.executable, "manage.py"]
    (tmp_path / "acknowledged").touch()
    for n in range(2):
        with (tmp_path / f"worker-{n}.log").open("wb") as out:
            processes.append(
                subprocess.Popen(
                    [*manage, "pgflow_worker", "--concurrency", "4"],
                    cwd=ROOT,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
    with (tmp_path / "starter.log").open("wb") as out:
        starter = subprocess.Popen(
            [*manage, "shell", "-c", STARTER.format(seconds=seconds, path=str(tmp_path / "acknowledged"))],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    processes.append(starter)
    return starter


def test_workers_ride_out_a_failover_to_the_standby(pair: Pair, tmp_path: Path, capsys) -> None:
    ride_out(pair, tmp_path, capsys, synchronous=True)


def test_a_failover_to_an_asynchronous_standby_is_warned_of_and_counted(tmp_path: Path, capsys) -> None:
    with build_pair(synchronous=False) as made:
        ride_out(made, tmp_path, capsys, synchronous=False)


def ride_out(pair: Pair, tmp_path: Path, capsys, *, synchronous: bool) -> None:
    warned = "pgflow.W003" in replication_warnings(pair.url)
    assert warned is not synchronous, "pgflow.W003 warns of an asynchronous standby, and only of one"
    env = cluster_env(pair.url, lease=5)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    acknowledged = tmp_path / "acknowledged"
    processes: list[subprocess.Popen[bytes]] = []
    logs = [tmp_path / f"worker-{n}.log" for n in range(2)]
    try:
        starter = start_load(env, tmp_path, processes, seconds=14)
        primary = f"postgresql://postgres@127.0.0.1:{pair.primary_port}/pgflow"
        finished_sql = "SELECT count(*) FROM pgflow_run WHERE status = 'finished'"
        deadline = time.monotonic() + 30
        while count(primary, finished_sql) < 50 and time.monotonic() < deadline:
            time.sleep(0.1)
        before = count(primary, finished_sql)
        assert before >= 50, "the load must be under way before the failover"
        kill_postmaster(pair.primary)  # the primary dies
        killed = time.monotonic()
        time.sleep(0.5)
        pair.pg_ctl("-D", str(pair.standby), "-w", "promote")
        promoted = time.monotonic()
        assert starter.wait(40) == 0, (tmp_path / "starter.log").read_text()[-2000:]
        ids = {int(line) for line in acknowledged.read_text().split()}
        survivor = pair.standby_url()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            assert all(w.poll() is None for w in processes[:2]), "a worker exited instead of reconnecting"
            open_runs = count(survivor, "SELECT count(*) FROM pgflow_run WHERE status = 'running'")
            if open_runs == 0:
                break
            time.sleep(0.2)
        with psycopg.connect(survivor) as conn:
            kept = {pk for (pk,) in conn.execute("SELECT id FROM pgflow_run").fetchall()}
            paused = conn.execute("SELECT paused_reason FROM pgflow_run WHERE status = 'paused'").fetchall()
            statuses = dict(conn.execute("SELECT status, count(*) FROM pgflow_run GROUP BY 1").fetchall())
            lost = conn.execute(
                "SELECT count(*) FROM pgflow_step WHERE outcome = 'lost' AND error_class <> 'pgflow.LeaseExpired'"
            ).fetchone()[0]
            found = cluster_violations(conn)
        missing = ids - kept
        if synchronous:
            assert missing == set(), f"{len(missing)} acknowledged starts lost with the primary"
        assert paused == [], f"{len(paused)} runs paused, e.g. {paused[:3]}"
        assert set(statuses) == {"finished"}, statuses
        assert found == [], found[:20]
        for worker in processes[:2]:
            worker.terminate()
            assert worker.wait(30) == 0
        output = "".join(log.read_text() for log in logs)
        assert "database unavailable" in output
        away = [float(s) for s in re.findall(r"database back after ([0-9.]+)s", output)]
        with capsys.disabled():
            print(
                f"\n[reliability] failover ({'synchronous' if synchronous else 'asynchronous'} standby): primary "
                f"killed -9 after {before} runs finished, standby promoted {promoted - killed:.1f}s later; "
                f"{len(ids)} starts acknowledged, {len(missing)} lost, the rest finished ({statuses}); claim loops "
                f"away {away} s; {lost} bodies re-attempted after losing their connection, 0 paused"
            )
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)
