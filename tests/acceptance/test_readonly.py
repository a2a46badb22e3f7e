"""A primary that turns read-only under load (``default_transaction_read_only`` on, as a
demoted primary left running), then its synchronous standby promoted: every connection of
the workers (claim loop, committer, heartbeat, sweep, step threads) leaves the read-only node
for the writable one through the multi-host URL; nothing is failed or paused for it, and
every step ends exactly once.

Before the fix the committer kept its connection on the read-only node (it reconnected only
on OperationalError / InterfaceError): every outcome was refused with SQLSTATE 25006 and the
runs never finished."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.acceptance.conftest import cluster_env
from tests.acceptance.test_failover import BINARIES, ROOT, build_pair, count, start_load
from tests.invariants import cluster_violations

pytestmark = pytest.mark.skipif(BINARIES is None, reason="needs the system's PostgreSQL (initdb, pg_basebackup)")


def test_workers_leave_a_primary_that_turned_read_only(tmp_path: Path, capsys) -> None:
    with build_pair() as pair:
        env = cluster_env(pair.url, lease=5)
        manage = [sys.executable, "manage.py"]
        subprocess.run([*manage, "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
        acknowledged = tmp_path / "acknowledged"
        logs = [tmp_path / f"worker-{n}.log" for n in range(2)]
        processes: list[subprocess.Popen[bytes]] = []
        try:
            starter = start_load(env, tmp_path, processes, seconds=10)
            primary = f"postgresql://postgres@127.0.0.1:{pair.primary_port}/pgflow"
            finished_sql = "SELECT count(*) FROM pgflow_run WHERE status = 'finished'"
            deadline = time.monotonic() + 30
            while count(primary, finished_sql) < 30 and time.monotonic() < deadline:
                time.sleep(0.1)
            before = count(primary, finished_sql)
            assert before >= 30, "the load must be under way before the primary turns read-only"
            # The primary stays up but takes no writes (its sessions too, from their next statement).
            with psycopg.connect(primary, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
                conn.execute("SELECT pg_reload_conf()")
            time.sleep(1.0)
            pair.pg_ctl("-D", str(pair.standby), "-w", "promote")
            promoted = time.monotonic()
            assert starter.wait(40) == 0, (tmp_path / "starter.log").read_text()[-2000:]
            ids = {int(line) for line in acknowledged.read_text().split()}
            survivor = pair.standby_url()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                assert all(w.poll() is None for w in processes[:2]), "a worker exited instead of reconnecting"
                if count(survivor, "SELECT count(*) FROM pgflow_run WHERE status = 'running'") == 0:
                    break
                time.sleep(0.2)
            settled = time.monotonic() - promoted
            with psycopg.connect(survivor) as conn:
                kept = {pk for (pk,) in conn.execute("SELECT id FROM pgflow_run").fetchall()}
                statuses = dict(conn.execute("SELECT status, count(*) FROM pgflow_run GROUP BY 1").fetchall())
                outcomes = dict(
                    conn.execute("SELECT outcome, count(*) FROM pgflow_step WHERE attempt > 1 GROUP BY 1").fetchall()
                )
                failed = conn.execute(
                    "SELECT count(*) FROM pgflow_step WHERE outcome NOT IN ('completed', 'lost')"
                ).fetchone()[0]
                paused = conn.execute(
                    "SELECT r.paused_reason, s.error_class FROM pgflow_run r JOIN pgflow_step s "
                    "ON s.run_id = r.id AND s.outcome <> 'completed' WHERE r.status = 'paused' LIMIT 3"
                ).fetchall()
                found = cluster_violations(conn)
            assert ids - kept == set(), f"{len(ids - kept)} acknowledged starts lost"
            assert set(statuses) == {"finished"}, (statuses, paused)  # none paused, failed or stuck running
            assert failed == 0, f"{failed} attempts closed other than completed or lost"
            assert found == [], found[:20]
            for worker in processes[:2]:
                worker.terminate()
                assert worker.wait(30) == 0
            output = "".join(log.read_text() for log in logs)
            away = [float(s) for s in re.findall(r"database back after ([0-9.]+)s", output)]
            with capsys.disabled():
                print(
                    f"\n[reliability] read-only primary then promotion: {before} runs finished before, "
                    f"{len(ids)} starts acknowledged, all kept and finished ({statuses}); claim loops away "
                    f"{away} s; all settled {settled:.1f}s after the promotion; re-run attempts {outcomes}"
                )
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait(10)
