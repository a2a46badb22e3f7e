"""pgflow behind a real PgBouncer (the Debian package): a web process through transaction
pooling starts runs, signals them, uses the operator controls and the dashboard over HTTP;
a worker through session pooling runs them to completion; two workers with
``PGFLOW["NOTIFY"]`` False run them through transaction pooling and leave no session state on
its server connections. Skips, saying so, where pgbouncer
is not installed, unless PGFLOW_REQUIRE_PGBOUNCER is set (CI sets it)."""

from __future__ import annotations

import logging
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
from pgflow.store import cursors
from tests.acceptance.conftest import wait_until
from tests.dashboard_support import changelist_url, control_url, run_url, timeline_url
from tests.flowcontrol_workflows import PerTenant
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
def pgbouncer(mode: str, *, pool_size: int = 10) -> Iterator[int]:
    """A pgbouncer process in front of the test cluster, pooling in ``mode`` on up to
    ``pool_size`` server connections; yields its port."""
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
        f"pool_mode = {mode}\nmax_client_conn = 200\ndefault_pool_size = {pool_size}\n"
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


def test_a_web_process_through_transaction_pooling(start_worker, monkeypatch, caplog) -> None:
    start_worker("--concurrency", "2")  # straight to PostgreSQL
    monkeypatch.setattr(cursors._Lost, "lost", False)  # an earlier test of this process may have set it
    # Two server connections, and two other clients busy on them: this process's transactions
    # land on either, as a web process's do under load.
    with pgbouncer("transaction", pool_size=2) as port, connected_through(port), neighbours(port):
        admin = User.objects.create_superuser("ops", "ops@example.com", "pw")
        client = Client()
        client.force_login(admin)
        with caplog.at_level(logging.WARNING, logger="pgflow"):
            # The start is prepared from its second run, on one server connection; a later one
            # lands on the other, which lacks it: the start goes on unprepared, and says so.
            runs = [ThreeSteps.start() for _ in range(20)]
        assert cursors._Lost.lost, "every start landed on the server connection that had prepared it"
        assert "did not keep the start's prepared statement" in caplog.text
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


POOL = 4  # server connections: fewer than the two workers' threads, so they share them


def server_sessions(port: int) -> list[dict[str, object]]:
    """The session state of every server connection of the pool: as many clients through the
    pooler as it has server connections, each holding one in a transaction, each asking its own."""
    import psycopg

    settings = connection.settings_dict
    params = {"host": "127.0.0.1", "port": port, "dbname": settings["NAME"], "user": settings["USER"] or "postgres"}
    clients = [psycopg.connect(**params, prepare_threshold=None) for _ in range(POOL)]
    try:
        seen = []
        for client in clients:  # autocommit off: each keeps its server connection until the rollback
            seen.append(
                {
                    "pid": client.execute("SELECT pg_backend_pid()").fetchone()[0],
                    "synchronous_commit": client.execute("SHOW synchronous_commit").fetchone()[0],
                    "jit": client.execute("SHOW jit").fetchone()[0],
                    "prepared": client.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0],
                    "listening": [row[0] for row in client.execute("SELECT pg_listening_channels()").fetchall()],
                    "locks": client.execute(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
                    ).fetchone()[0],
                }
            )
        return seen
    finally:
        for client in clients:
            client.close()


def housekeeping(log: str) -> list[tuple[str, str]]:
    """(began, ended) of each sweep housekeeping a worker's DEBUG log shows, by its timestamps."""
    spans: list[tuple[str, str]] = []
    began = None
    for line in log.splitlines():
        if line.endswith("sweep: housekeeping began"):
            began = line[:23]
        elif line.endswith("sweep: housekeeping ended") and began is not None:
            spans.append((began, line[:23]))
            began = None
    return spans


def test_two_workers_through_transaction_pooling(start_worker) -> None:
    with pgbouncer("transaction", pool_size=POOL) as port:
        env = {
            "DATABASE_URL": url_to(port),
            "PGFLOW_NOTIFY": "false",  # polls; keeps no session state
            "PGFLOW_POLL_SECONDS": "0.2",
        }
        # --verbosity 2: DEBUG, with the sweep's housekeeping spans.
        queues = ("--queues", "workflows,limits")
        workers = [start_worker("--concurrency", "4", *queues, "--verbosity", "2", env=env) for _ in range(2)]
        runs = [ThreeSteps.start() for _ in range(60)]
        # Behind a limit: the gated claim, its settings for its own transaction too.
        runs += [PerTenant.start(input={"tenant": "t1", "sleep": 0.05}) for _ in range(10)]
        waiting = WaitsForPayment.start()
        wait_until(
            lambda: waiting.steps.filter(step_name="charge", status="waiting").exists(), timeout=60, what="the wait"
        )
        pgflow.signal(waiting, "payment", "ok")
        ids = [run.pk for run in [*runs, waiting]]
        wait_until(
            lambda: WorkflowRun.objects.filter(pk__in=ids, status="finished").count() == len(ids),
            timeout=90,
            what="the runs two workers ran through a transaction pooler",
        )
        time.sleep(2)  # a few more sweeps, each worker's turn at the housekeeping
        for worker in workers:
            assert worker.terminate() == 0, worker.output()[-3000:]
        logs = [worker.output() for worker in workers]
        for log in logs:
            assert "LISTEN" not in log and "prepared statement" not in log, log[-3000:]
            assert "database unavailable" not in log, log[-3000:]
        # What the workers did through the pooler left nothing on its server connections that
        # the next client there (a web process's start) would inherit: no session settings,
        # prepared statements, LISTEN or advisory lock.
        with connection.cursor() as cursor:  # the server's own defaults (the tests' cluster sets some)
            cursor.execute("SELECT current_setting('synchronous_commit'), current_setting('jit')")
            defaults = cursor.fetchone()
        sessions = server_sessions(port)
        assert len({session["pid"] for session in sessions}) == POOL, sessions
        for session in sessions:
            assert (session["synchronous_commit"], session["jit"]) == defaults, sessions
            assert session["prepared"] == 0 and session["listening"] == [] and session["locks"] == 0, sessions
        # Never two housekeepings at once: the spans of both workers, in order, do not overlap.
        spans = sorted(span for log in logs for span in housekeeping(log))
        assert len(spans) >= 4, spans
        for (_, ended), (began, _) in zip(spans, spans[1:], strict=False):
            assert began >= ended, f"two sweeps' housekeeping overlapped: {spans}"
    assert_exactly_once()


@contextmanager
def neighbours(port: int, count: int = 2) -> Iterator[None]:
    """Other clients of the pooler, each running short transactions in a loop: a client's
    next transaction then lands on whichever server connection is free, as under load."""
    import threading

    import psycopg

    settings = connection.settings_dict
    params = {"host": "127.0.0.1", "port": port, "dbname": settings["NAME"], "user": settings["USER"] or "postgres"}
    stop = threading.Event()

    def churn() -> None:
        with psycopg.connect(**params, prepare_threshold=None) as client:
            while not stop.is_set():
                with client.transaction():
                    client.execute("SELECT pg_sleep(0.003)")
                time.sleep(0.001)

    threads = [threading.Thread(target=churn, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


def test_the_mcp_server_through_transaction_pooling(transactional_db) -> None:
    """The MCP server (``manage.py pgflow_mcp``, driven by the SDK's own client over stdio)
    reads and acts through PgBouncer in transaction mode, each tool called again and again
    (a statement prepared on one server connection would be missing on the next)."""
    import json
    import sys

    import anyio
    from django.contrib.auth.models import Permission
    from mcp import Client, StdioServerParameters
    from mcp_types import Implementation

    from pgflow.models import Event
    from pgflow.testing import run_workflow

    operator = User.objects.create_user("operator", password="x")  # noqa: S106
    operator.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="pgflow", codename__in=["view_workflowrun", "change_workflowrun"]
        )
    )
    waiting = run_workflow(WaitsForPayment.start())
    doomed = run_workflow(WaitsForPayment.start())
    with pgbouncer("transaction", pool_size=2) as port:
        env = {
            **os.environ,
            "DATABASE_URL": url_to(port),
            "PGFLOW_TEST_DB_NAME": connection.settings_dict["NAME"],
            "DJANGO_SETTINGS_MODULE": "tests.acceptance.settings_pooled",
            "PYTHONUNBUFFERED": "1",
        }
        params = StdioServerParameters(
            command=sys.executable,
            args=["manage.py", "pgflow_mcp", "--user", "operator"],
            cwd=str(Path(__file__).resolve().parents[2]),
            env=env,
        )

        async def session() -> dict[str, object]:
            async with Client(params, client_info=Implementation(name="pooled-agent", version="1")) as client:
                call = client.call_tool
                reads = []
                for _ in range(6):  # psycopg would prepare from the 5th run of a statement
                    reads += [
                        await call("get_run", {"run_id": waiting.pk}),
                        await call("search_runs", {"status": "running"}),
                        await call("explain_run", {"run_id": waiting.pk}),
                        await call("stuck", {}),
                        await call("workers", {}),
                        await call("insights", {"window": "24h"}),
                    ]
                return {
                    "reads": reads,
                    "pause": await call("pause_run", {"run_id": waiting.pk, "dry_run": False}),
                    "resume": await call("resume_run", {"run_id": waiting.pk, "dry_run": False}),
                    "signal": await call(
                        "send_signal",
                        {"run_id": waiting.pk, "name": "payment", "payload": {"amount": 5}, "dry_run": False},
                    ),
                    "cancel": await call("cancel_run", {"run_id": doomed.pk, "dry_run": False}),
                    "after": await call("get_run", {"run_id": doomed.pk}),
                }

        with neighbours(port):
            got = anyio.run(session)
    for result in [*got["reads"], got["pause"], got["resume"], got["signal"], got["cancel"], got["after"]]:
        assert not result.is_error, result.content[0].text
    assert json.loads(got["reads"][0].content[0].text)["run"]["run_id"] == waiting.pk
    assert json.loads(got["after"].content[0].text)["run"]["status"] == "cancelled"
    actor = "agent:pooled-agent for user:operator"
    assert list(Event.objects.filter(run=waiting, actor=actor).order_by("id").values_list("event", flat=True)) == [
        "paused",
        "resumed",
        "signal_received",
    ]
    assert waiting.step_set.get(step_name="charge", status="scheduled")  # woken by the signal
    assert WorkflowRun.objects.get(pk=doomed.pk).status == "cancelled"
