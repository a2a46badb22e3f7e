"""The example project's private PostgreSQL cluster: reuse, and never a stranger's port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

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
        second = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
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
    result = subprocess.run([sys.executable, "-m", "pytest", "tests/unit/test_dburl.py", "-q"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 3
    assert "cannot connect to DATABASE_URL postgres://app:***@127.0.0.1:1/nowhere" in result.stdout + result.stderr
    assert "s3cret" not in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
