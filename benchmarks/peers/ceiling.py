"""PostgreSQL's own ceiling for one step: pgbench running the least SQL a step of a chain needs.

A step of a 3-step chain, at the least, must claim one due row (``FOR UPDATE SKIP LOCKED``,
so that concurrent claimers never wait on each other), mark it done and insert the next
step, atomically. The script ``one`` does exactly that in ONE statement (one round trip, one
transaction, prepared), so its transactions per second are steps per second that no
queue built on one-transaction-per-step can beat on this machine and this server.

A worker cannot quite do that: the body runs between the claim and the completion. The
script ``two`` is the least such a worker needs when it takes one step at a time: one
transaction claims a due row (marks it running), a second marks it done and inserts the
next step. The gap between the two is what batching claims and outcomes can win back.

Fair to a chain: the table starts with 2,000 due rows (2,000 runs at their first step),
the claim uses a partial index on the due rows like a real queue's, done rows stay in the
table (dead index entries and all, as in pgflow's step table), and step 3's successor is
step 1 of the same run id, so the queue never drains while pgbench runs. It leaves out
everything a real engine adds: a run row, run locks, events, leases, outputs, NOTIFY and
the body running between claim and completion, which makes two transactions of one step.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

DATABASE = "bench_ceiling"
DUE_ROWS = 2000

SETUP = """
DROP TABLE IF EXISTS ceiling_step;
CREATE TABLE ceiling_step (
    id bigserial PRIMARY KEY,
    run_id bigint NOT NULL,
    step smallint NOT NULL,
    status text NOT NULL DEFAULT 'scheduled',
    scheduled_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz
);
CREATE INDEX ceiling_step_due ON ceiling_step (scheduled_at) WHERE status = 'scheduled';
"""

FILL = f"""
TRUNCATE ceiling_step RESTART IDENTITY;
INSERT INTO ceiling_step (run_id, step) SELECT g, 1 FROM generate_series(1, {DUE_ROWS}) AS g;
"""

STEP = """\
WITH claimed AS (
    SELECT id, run_id, step FROM ceiling_step
    WHERE status = 'scheduled' AND scheduled_at <= now()
    ORDER BY scheduled_at LIMIT 1
    FOR UPDATE SKIP LOCKED
), done AS (
    UPDATE ceiling_step AS s SET status = 'done', finished_at = now()
    FROM claimed WHERE s.id = claimed.id
    RETURNING claimed.run_id, claimed.step
)
INSERT INTO ceiling_step (run_id, step) SELECT run_id, step % 3 + 1 FROM done;
"""


CLAIM_THEN_COMPLETE = """\
UPDATE ceiling_step SET status = 'running', started_at = now()
WHERE id = (
    SELECT id FROM ceiling_step
    WHERE status = 'scheduled' AND scheduled_at <= now()
    ORDER BY scheduled_at LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING id AS claimed_id \\gset
WITH done AS (
    UPDATE ceiling_step SET status = 'done', finished_at = now()
    WHERE id = :claimed_id
    RETURNING run_id, step
)
INSERT INTO ceiling_step (run_id, step) SELECT run_id, step % 3 + 1 FROM done;
"""

SCRIPTS = {"one": STEP, "two": CLAIM_THEN_COMPLETE}
TITLES = {"one": "1 statement a step", "two": "claim + complete, 2 transactions a step"}


def prepare(server_url: str) -> str:
    """Create the ceiling's database and table; return the database's URL."""
    import psycopg

    from benchmarks.peers.common import conninfo, recreate_database

    url = recreate_database(server_url, DATABASE)
    with psycopg.connect(**{k: v for k, v in conninfo(url).items() if v is not None}, autocommit=True) as conn:
        conn.execute(SETUP)
    return url


def refill(url: str) -> None:
    """2,000 due rows and fresh statistics before each measurement."""
    import psycopg

    from benchmarks.peers.common import conninfo

    with psycopg.connect(**{k: v for k, v in conninfo(url).items() if v is not None}, autocommit=True) as conn:
        conn.execute(FILL)
        conn.execute("VACUUM ANALYZE ceiling_step")


def command(pgbench: Path, url: str, script: Path, clients: int, seconds: float) -> list[str]:
    from benchmarks.peers.common import conninfo

    info = conninfo(url)
    return [
        str(pgbench),
        "--no-vacuum",
        "--protocol",
        "prepared",
        "--file",
        str(script),
        "--client",
        str(clients),
        "--jobs",
        str(clients),
        "--time",
        str(max(1, round(seconds))),
        "--host",
        str(info["host"]),
        "--port",
        str(info["port"]),
        "--username",
        str(info["user"]),
        str(info["dbname"]),
    ]


def parse(output: str) -> dict[str, Any]:
    tps = re.search(r"^tps = ([\d.]+)", output, re.MULTILINE)
    latency = re.search(r"^latency average = ([\d.]+) ms", output, re.MULTILINE)
    failed = re.search(r"^number of failed transactions: (\d+)", output, re.MULTILINE)
    if tps is None:
        lines = [line for line in output.splitlines() if line.strip()]
        raise RuntimeError(f"pgbench printed no tps: {lines[-1] if lines else '(nothing)'}")
    return {
        "steps_per_s": float(tps.group(1)),
        "latency_avg_ms": float(latency.group(1)) if latency else None,
        "failed": int(failed.group(1)) if failed else 0,
    }


def write_script(folder: Path, variant: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ceiling_{variant}.sql"
    path.write_text(SCRIPTS[variant])
    return path


def version(pgbench: Path) -> str:
    result = subprocess.run([str(pgbench), "--version"], capture_output=True, text=True, check=False)
    return result.stdout.strip()
