"""``PGFLOW["READ_DATABASE"]`` pointed at a real streaming standby (``pg_basebackup -R``, as in
test_failover.py): the run list, the insights and the ``/metrics`` gauges read the standby, the
run page and the controls the primary; the dashboard says how far behind the standby is, and
when the standby is stopped it reads the primary and says so.

Which database served a page is seen in what it shows: the standby's replay is paused
(``pg_wal_replay_pause()``), then a run is cancelled and two more started on the primary, so
the standby holds an older state than the primary ever will again.

The dashboard runs in a process of its own against the pair (``manage.py shell`` with Django's
test client, the project's settings reading ``PGFLOW_READ_DATABASE_URL``); the suite's database
is not touched."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.acceptance.test_failover import BINARIES, ROOT, Pair, build_pair
from tests.invariants import cluster_violations

pytestmark = pytest.mark.skipif(BINARIES is None, reason="needs the system's PostgreSQL (initdb, pg_basebackup)")

# Each operation of ``ops`` (a JSON list), run in the dashboard's own process; prints a JSON
# list with one answer per operation.
CLIENT = """
import json, os
from django.contrib.auth.models import User
from django.test import Client
from pgflow.models import WorkflowRun
from tests.reliability_workflows import Queries
answers = []
client = Client()
for op in json.loads(os.environ["OPS"]):
    if op["op"] == "start":
        answers.append([Queries.start().pk for _ in range(op["n"])])
    elif op["op"] == "cancel":
        WorkflowRun.objects.get(pk=op["id"]).cancel(actor="test")
        answers.append(None)
    elif op["op"] == "get":
        user, _ = User.objects.get_or_create(username="ops", defaults={"is_staff": True, "is_superuser": True})
        client.force_login(user)
        response = client.get(op["path"], follow=True)
        answers.append({"status": response.status_code, "body": response.content.decode()})
print("ANSWERS " + json.dumps(answers))
"""


def dashboard(env: dict[str, str], *ops: dict[str, Any]) -> list[Any]:
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", CLIENT],
        cwd=ROOT,
        env={**env, "OPS": json.dumps(ops)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r"^ANSWERS (.*)$", done.stdout, re.MULTILINE)
    assert done.returncode == 0 and found, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(found.group(1))


def get(path: str) -> dict[str, str]:
    return {"op": "get", "path": path}


def caught_up(pair: Pair) -> None:
    """Wait until the standby has applied everything the primary wrote so far."""
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{pair.primary_port}/postgres", autocommit=True) as c:
        target = c.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    with psycopg.connect(pair.standby_url(), autocommit=True) as c:
        deadline = time.monotonic() + 20
        while not c.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target]).fetchone()[0]:
            assert time.monotonic() < deadline, "the standby did not catch up"
            time.sleep(0.05)


def listed(body: str) -> set[int]:
    """The run ids the run list shows (each row links to its run page)."""
    return {int(pk) for pk in re.findall(r"/admin/pgflow/workflowrun/(\d+)/change/", body)}


def due(metrics: str) -> int:
    return sum(int(float(n)) for n in re.findall(r'^pgflow_steps_due\{queue="[^"]*"\} (\S+)$', metrics, re.MULTILINE))


def gauge(metrics: str, name: str) -> float | None:
    found = re.search(rf"^{name} (\S+)$", metrics, re.MULTILINE)
    return None if found is None else float(found.group(1))


def messages(body: str) -> str:
    return " ".join(re.findall(r'<li class="(?:info|warning)">(.*?)</li>', body, re.DOTALL))


def test_aggregates_read_the_standby_and_the_run_page_the_primary(tmp_path: Path) -> None:
    with build_pair(synchronous=False) as pair:
        primary = f"postgresql://postgres@127.0.0.1:{pair.primary_port}/pgflow"
        env = {**os.environ, "DATABASE_URL": primary, "PGFLOW_READ_DATABASE_URL": pair.standby_url()}
        env.pop("PGFLOW_TEST_DB_NAME", None)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
        [[old]] = dashboard(env, {"op": "start", "n": 1})
        caught_up(pair)
        with psycopg.connect(pair.standby_url(), autocommit=True) as standby:
            standby.execute("SELECT pg_wal_replay_pause()")
        # The primary moves on; the paused standby keeps the state before.
        _, new = dashboard(env, {"op": "cancel", "id": old}, {"op": "start", "n": 2})
        run_list, old_page, new_page, metrics, figures, page = dashboard(
            env,
            get("/admin/pgflow/workflowrun/"),
            get(f"/admin/pgflow/workflowrun/{old}/change/"),
            get(f"/admin/pgflow/workflowrun/{new[0]}/change/"),
            get("/metrics"),
            get("/admin/pgflow/insights.json?window=1h"),
            get("/admin/pgflow/insights/?window=1h"),
        )
        assert run_list["status"] == 200
        assert listed(run_list["body"]) == {old}, "the run list reads the standby, where only the first run is"
        assert "pgflow-status-running" in run_list["body"], "the standby still has the first run running"
        assert "replay is PAUSED" in messages(run_list["body"]), messages(run_list["body"])
        assert old_page["status"] == new_page["status"] == 200, "the run page reads the primary"
        assert "pgflow-status-cancelled" in old_page["body"], "the run page shows the cancel the standby lacks"
        assert due(metrics["body"]) == 1, "the gauges read the standby: one due attempt, not the primary's two"
        assert gauge(metrics["body"], "pgflow_read_replica_fallback") == 0
        assert gauge(metrics["body"], "pgflow_read_replica_lag_seconds") is not None
        insights = json.loads(figures["body"])
        assert insights["read_database"]["alias"] == "replica" and not insights["read_database"]["fell_back"]
        assert [row["started"] for row in insights["workflows"]] == [1], "the insights count the standby's runs"
        assert "replay is PAUSED" in messages(page["body"]), "the insights page says how old its figures are"

        with psycopg.connect(pair.standby_url(), autocommit=True) as standby:
            standby.execute("SELECT pg_wal_replay_resume()")
        caught_up(pair)
        [run_list] = dashboard(env, get("/admin/pgflow/workflowrun/"))
        assert listed(run_list["body"]) == {old, *new}
        assert "up to date with the primary" in messages(run_list["body"]), messages(run_list["body"])

        pair.pg_ctl("-D", str(pair.standby), "-m", "fast", "-w", "stop")  # the replica goes down
        started = time.monotonic()
        run_list, metrics, figures = dashboard(
            env, get("/admin/pgflow/workflowrun/"), get("/metrics"), get("/admin/pgflow/insights.json?window=1h")
        )
        assert time.monotonic() - started < 60
        assert run_list["status"] == 200
        assert listed(run_list["body"]) == {old, *new}, "with the standby down the primary serves the list"
        assert "cannot be reached" in messages(run_list["body"]) and "from the primary" in messages(run_list["body"])
        assert due(metrics["body"]) == 2 and gauge(metrics["body"], "pgflow_read_replica_fallback") == 1
        assert json.loads(figures["body"])["read_database"]["fell_back"] is True

        with psycopg.connect(primary) as conn:
            found = cluster_violations(conn)
        assert found == [], found[:20]
