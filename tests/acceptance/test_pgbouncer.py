"""pgflow behind a real PgBouncer (the Debian package): a web process through transaction
pooling starts runs, signals them, uses the operator controls and the dashboard over HTTP;
a worker through session pooling runs them to completion. Skips, saying so, where pgbouncer
is not installed, unless PGFLOW_REQUIRE_PGBOUNCER is set (CI sets it)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

import pgflow
from pgflow.models import WorkflowRun
from tests.acceptance.conftest import wait_until
from tests.dashboard_support import changelist_url, control_url, run_url, timeline_url
from tests.invariants import assert_exactly_once
from tests.workflows import ThreeSteps, WaitsForPayment

BINARY = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if Path(p).exists()), None
)
if BINARY is None and os.environ.get("PGFLOW_REQUIRE_PGBOUNCER"):
    raise RuntimeError("PGFLOW_REQUIRE_PGBOUNCER is set but pgbouncer is not installed (apt-get install pgbouncer)")
pytestmark = [
    pytest.mark.skipif(BINARY is None, reason="needs pgbouncer (apt-get install pgbouncer)"),
    pytest.mark.django_db(transaction=True),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def pgbouncer(mode: str) -> Iterator[int]:
    """A pgbouncer process in front of the test cluster, pooling in ``mode``; yields its port."""
    assert BINARY is not None
    settings = connection.settings_dict
    root = Path(tempfile.mkdtemp(prefix="pgflow-pgbouncer-", dir="/var/tmp"))  # noqa: S108 - its user must reach it
    root.chmod(0o755)
    port = free_port()
    user = settings["USER"] or "postgres"
    (root / "users.txt").write_text(f'"{user}" ""\n')
    (root / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {root / 'users.txt'}\n"
        f"pool_mode = {mode}\nmax_client_conn = 200\ndefault_pool_size = 10\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
        f"logfile = {root / 'pgbouncer.log'}\n"
    )
    argv = [BINARY, str(root / "pgbouncer.ini")]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        shutil.chown(root, "postgres", "postgres")
        for name in ("users.txt", "pgbouncer.ini"):
            shutil.chown(root / name, "postgres", "postgres")
        argv = ["runuser", "-u", "postgres", "--", *argv]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            assert time.monotonic() < deadline, "pgbouncer did not start listening"
            time.sleep(0.05)
        yield port
        log = (root / "pgbouncer.log").read_text()
        assert f"login attempt: db={settings['NAME']}" in log, "nothing connected through pgbouncer"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def connected_through(port: int) -> Iterator[None]:
    """This process's Django connection goes through the pooler on ``port``, set up as a
    transaction-pooled web process is: no prepared statements of psycopg's own."""
    settings = connection.settings_dict
    saved = {key: settings[key] for key in ("HOST", "PORT", "OPTIONS")}
    connection.close()
    settings.update(HOST="127.0.0.1", PORT=port, OPTIONS={**saved["OPTIONS"], "prepare_threshold": None})
    try:
        yield
    finally:
        connection.close()
        settings.update(saved)


def url_to(port: int) -> str:
    parts = urlsplit(os.environ["DATABASE_URL"])
    netloc = f"{parts.username or ''}{':' + parts.password if parts.password else ''}@127.0.0.1:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def test_a_web_process_through_transaction_pooling(start_worker) -> None:
    start_worker("--concurrency", "2")  # straight to PostgreSQL
    with pgbouncer("transaction") as port, connected_through(port):
        admin = User.objects.create_superuser("ops", "ops@example.com", "pw")
        client = Client()
        client.force_login(admin)
        runs = [ThreeSteps.start() for _ in range(20)]  # the start is prepared from its second run
        waiting = WaitsForPayment.start()
        wait_until(
            lambda: waiting.steps.filter(step_name="charge", status="waiting").exists(), timeout=30, what="the wait"
        )
        pgflow.signal(waiting, "payment", {"amount": 3})
        paused = WaitsForPayment.start()
        assert client.post(control_url(paused), {"action": "pause"}).status_code == 302
        assert WorkflowRun.objects.get(pk=paused.pk).status == "paused"
        assert client.post(control_url(paused), {"action": "resume"}).status_code == 302
        cancelled = WaitsForPayment.start()
        assert client.post(control_url(cancelled), {"action": "cancel"}).status_code == 302
        for url in (changelist_url(), run_url(waiting), timeline_url(waiting)):
            assert client.get(url).status_code == 200, url
        ids = [run.pk for run in [*runs, waiting]]
        wait_until(
            lambda: WorkflowRun.objects.filter(pk__in=ids, status="finished").count() == len(ids),
            timeout=40,
            what="the runs started through the pooler",
        )
        assert WorkflowRun.objects.get(pk=cancelled.pk).status == "cancelled"
        assert WorkflowRun.objects.get(pk=waiting.pk).steps.get(step_name="charge", status="completed").output == {
            "paid": {"amount": 3}
        }
    assert_exactly_once()


def test_a_worker_through_session_pooling(start_worker) -> None:
    with pgbouncer("session") as port:
        worker = start_worker("--concurrency", "4", env={"DATABASE_URL": url_to(port)})
        runs = [ThreeSteps.start() for _ in range(30)]
        waiting = WaitsForPayment.start()
        wait_until(
            lambda: waiting.steps.filter(step_name="charge", status="waiting").exists(), timeout=30, what="the wait"
        )
        pgflow.signal(waiting, "payment", "ok")
        ids = [run.pk for run in [*runs, waiting]]
        wait_until(
            lambda: WorkflowRun.objects.filter(pk__in=ids, status="finished").count() == len(ids),
            timeout=40,
            what="the runs a worker ran through the pooler",
        )
        worker.proc.terminate()
        assert worker.proc.wait(30) == 0
    assert_exactly_once()
