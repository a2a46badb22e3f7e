#!/usr/bin/env python
"""The capacity model's figures (docs/scaling.md), measured on a durable PostgreSQL.

    .venv/bin/python benchmarks/capacity.py [--runs 3000] [--write]

Starts (or reuses) a private cluster of its own in benchmarks/.work/pg-capacity on
PostgreSQL's durable defaults (fsync, synchronous_commit and full_page_writes on), in its own
database ``pgflow_capacity``, and stops it again if it started it. For each worker layout
(one worker, two workers, one worker with --processes 2; --concurrency 8 each):

1. RUNS runs of ThreeNoops (three no-op steps) are started in one transaction: the WAL and
   the rows of a start are measured around it.
2. The workers drain them (``--burst``): steps/s from the rows (first claim to last finish);
   around it, the WAL written (``pg_current_wal_lsn()`` and ``pg_stat_wal``: records, full
   page images, syncs), the rows written per table (``pg_stat_user_tables``), the commits
   (``pg_stat_database``), the CPU seconds of every PostgreSQL process (``/proc``: the
   postmaster's own and reaped children's, plus the live backends') and of the workers
   (their rusage), and the peak of the workers' connections (``pg_stat_activity``, sampled).

Everything is divided by the steps ended. It prints a table and, with --write, puts it in
the section "Capacity model" of benchmarks/RESULTS.md (the other sections are kept).
The machine is shared, so CPU seconds (what a step costs) say more than steps/s (what this
box gave); both are written down, with the load average.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from example_project import pgcluster  # noqa: E402 - after the path is set

PG_DIR = ROOT / "benchmarks" / ".work" / "pg-capacity"
DATABASE = "pgflow_capacity"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
SECTION = "## Capacity model"
TABLES = ("pgflow_run", "pgflow_step", "pgflow_event", "pgflow_worker")
# --only's names: (the table's label, worker commands, their extra options)
LAYOUTS = {
    "1w": ("1 worker", 1, ()),
    "2w": ("2 workers", 2, ()),
    "2p": ("1 worker, --processes 2", 1, ("--processes", "2")),
}
CONCURRENCY = 8
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Snapshot:
    lsn: int
    wal: dict[str, float]
    rows: dict[str, dict[str, int]]
    commits: int
    pg_cpu: float


@dataclass
class Measured:
    label: str
    steps: int = 0
    seconds: float = 0.0
    wal_bytes: int = 0
    wal: dict[str, float] = field(default_factory=dict)
    rows: dict[str, dict[str, int]] = field(default_factory=dict)
    commits: int = 0
    pg_cpu: float = 0.0
    worker_cpu: float = 0.0
    peak_connections: int = 0
    workers: int = 1


def cpu_of(pid: int) -> tuple[float, int]:
    """(user+system seconds of ``pid`` and of its reaped children, its parent pid)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is the state; utime, stime, cutime, cstime are fields 14-17 of stat (1-based).
    ticks = sum(int(value) for value in fields[11:15])
    return ticks / TICK, int(fields[1])


def postgres_cpu(postmaster: int) -> float:
    """CPU seconds of the postmaster, every backend it reaped, and its live children."""
    total, _ = cpu_of(postmaster)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                seconds, parent = cpu_of(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue
            if parent == postmaster:
                total += seconds
    return total


def lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cluster: pgcluster.Cluster | None = None
        self.postmaster = 0

    def start(self) -> None:
        os.environ[pgcluster.DURABLE_ENV] = "1"
        PG_DIR.mkdir(parents=True, exist_ok=True)
        os.chmod(PG_DIR.parent, 0o755)  # noqa: S103 - the postgres user must reach its data folder
        self.cluster = pgcluster.start(PG_DIR)
        self.postmaster = int((self.cluster.pgdata / "postmaster.pid").read_text().split()[0])
        os.environ["DATABASE_URL"] = self.cluster.url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
        os.environ.setdefault("DEBUG", "false")
        from benchmarks import engine

        engine.setup_django(DATABASE)

    def stop(self) -> None:
        if self.cluster is not None and self.cluster.started:
            pgcluster.stop(PG_DIR)

    # --- figures of the server ---------------------------------------------------------

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def snapshot(self) -> Snapshot:
        self.query("SELECT pg_stat_clear_snapshot()")
        [(position,)] = self.query("SELECT pg_current_wal_lsn()::text")
        [wal] = self.query("SELECT wal_records, wal_fpi, wal_bytes, wal_write, wal_sync FROM pg_stat_wal")
        rows = {
            name: {"ins": ins, "upd": upd, "hot": hot, "del": dele, "vacuums": vacuums, "analyzes": analyzes}
            for name, ins, upd, hot, dele, vacuums, analyzes in self.query(
                "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, autovacuum_count, autoanalyze_count "
                "FROM pg_stat_user_tables "
                f"WHERE relname IN ({', '.join(repr(t) for t in TABLES)})"
            )
        }
        [(commits,)] = self.query(f"SELECT xact_commit FROM pg_stat_database WHERE datname = '{DATABASE}'")
        keys = ("records", "fpi", "bytes", "writes", "syncs")
        return Snapshot(
            lsn(position), dict(zip(keys, map(float, wal), strict=True)), rows, commits, postgres_cpu(self.postmaster)
        )

    def difference(self, before: Snapshot, after: Snapshot, into: Measured) -> None:
        into.wal_bytes = after.lsn - before.lsn
        into.wal = {key: after.wal[key] - before.wal[key] for key in after.wal}
        into.rows = {
            table: {key: after.rows[table][key] - before.rows.get(table, {}).get(key, 0) for key in after.rows[table]}
            for table in after.rows
        }
        into.commits = after.commits - before.commits
        into.pg_cpu = after.pg_cpu - before.pg_cpu

    # --- one layout ----------------------------------------------------------------------

    def measure(self, label: str) -> tuple[Measured, Measured]:
        from benchmarks import engine

        label, count, extra = LAYOUTS[label]
        engine.reset()
        self.query("VACUUM ANALYZE pgflow_run, pgflow_step, pgflow_event")
        start = Measured(f"{label}: start", workers=count)
        before = self.snapshot()
        began = time.monotonic()
        engine.enqueue(self.args.runs)
        start.seconds = time.monotonic() - began
        time.sleep(1.2)  # backends flush their table counters at most once a second
        after = self.snapshot()
        self.difference(before, after, start)
        start.steps = self.args.runs  # "per step" of a start is per run started
        engine.analyze()
        processes = count * (int(extra[1]) if extra else 1)
        drain = Measured(label, workers=processes)  # connections are counted per worker process
        before = self.snapshot()
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
            "PGFLOW_TEST_DB_NAME": DATABASE,
            "PGFLOW_LOG_LEVEL": "WARNING",
            "PGFLOW_POLL_SECONDS": "5",
            "DEBUG": "false",
        }
        argv = [sys.executable, str(ROOT / "manage.py"), "pgflow_worker", "-v", "0", "--burst"]
        procs = [
            subprocess.Popen([*argv, "--concurrency", str(CONCURRENCY), *extra], cwd=ROOT, env=env)
            for _ in range(count)
        ]
        done = threading.Event()
        peak = [0]

        def sample() -> None:
            import psycopg

            assert self.cluster is not None
            url = self.cluster.url.rsplit("/", 1)[0] + "/postgres"
            with psycopg.connect(url, autocommit=True) as conn:
                while not done.is_set():
                    row = conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend' "
                        "AND pid <> pg_backend_pid()",
                        [DATABASE],
                    ).fetchone()
                    peak[0] = max(peak[0], int(row[0]) - 1 if row else 0)  # less this script's own connection
                    time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            for proc in procs:
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
                drain.worker_cpu += usage.ru_utime + usage.ru_stime
        finally:
            done.set()
            for proc in procs:
                if proc.returncode is None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
        sampler.join(5)
        time.sleep(1.2)
        after = self.snapshot()
        self.difference(before, after, drain)
        drain.peak_connections = peak[0]
        finished = engine.finished_runs()
        if finished != self.args.runs:
            raise SystemExit(f"{label}: only {finished} of {self.args.runs} runs finished")
        drain.steps, drain.seconds = engine.step_window()
        return start, drain


def per(value: float, steps: int, digits: int = 2) -> str:
    return f"{value / steps:.{digits}f}"


def rows_text(measured: Measured) -> str:
    parts = []
    for table in TABLES:
        counts = measured.rows.get(table)
        if not counts:
            continue
        words = [
            f"{kind} {counts[key] / measured.steps:.2f}"
            for key, kind in (("ins", "ins"), ("upd", "upd"), ("del", "del"))
            if counts[key] / measured.steps >= 0.005  # the worker's own row, once a start: not per step
        ]
        if counts["hot"] / measured.steps >= 0.005:
            words.append(f"(HOT {counts['hot'] / measured.steps:.2f})")
        if counts["vacuums"] or counts["analyzes"]:  # autovacuum's WAL and CPU fell in the window
            words.append(f"[autovacuum {counts['vacuums']}, autoanalyze {counts['analyzes']}]")
        if words:
            parts.append(f"{table.removeprefix('pgflow_')}: {' '.join(words)}")
    return "; ".join(parts)


def table(results: list[tuple[Measured, Measured]]) -> str:
    lines = [
        "| layout | steps/s here | PG CPU ms/step | steps/s per PG core | worker CPU ms/step | "
        "WAL bytes/step | WAL records (FPI)/step | WAL syncs/step | commits/step | peak connections/worker process |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for _, drain in results:
        lines.append(
            f"| {drain.label} | {drain.steps / drain.seconds:,.0f} | {1000 * drain.pg_cpu / drain.steps:.3f} | "
            f"{drain.steps / drain.pg_cpu:,.0f} | {1000 * drain.worker_cpu / drain.steps:.3f} | "
            f"{drain.wal_bytes / drain.steps:,.0f} | {per(drain.wal['records'], drain.steps, 1)} "
            f"({per(drain.wal['fpi'], drain.steps)}) | {per(drain.wal['syncs'], drain.steps, 3)} | "
            f"{per(drain.commits, drain.steps, 3)} | {drain.peak_connections / drain.workers:.1f} |"
        )
    lines.append("")
    lines.append("Rows written per step (the drain; pg_stat_user_tables):")
    lines.append("")
    for _, drain in results:
        lines.append(f"- {drain.label}: {rows_text(drain)}")
    start = results[0][0]
    lines.append("")
    lines.append(
        f"A start (per run, {start.steps} started in one transaction): {start.wal_bytes / start.steps:,.0f} WAL "
        f"bytes, {per(start.wal['records'], start.steps, 1)} WAL records, {1000 * start.pg_cpu / start.steps:.3f} "
        f"ms of PostgreSQL CPU; rows {rows_text(start)}."
    )
    return "\n".join(lines)


def machine() -> str:
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in lines if "model name" in line), "?")
    return f"{os.cpu_count()} cores ({cpu}), load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"


def write(text: str, args: argparse.Namespace, context: str) -> None:
    current = RESULTS.read_text()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    body = (
        f"{SECTION}\n\n"
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC at {commit.strip()} by "
        f"`.venv/bin/python benchmarks/capacity.py --runs {args.runs} --write` on {context}. Each layout "
        f"drains {args.runs} runs of three no-op steps (`--concurrency {CONCURRENCY}`, `--burst`) started "
        f"beforehand in one transaction; the figures are differences of the server's own counters around "
        f"the drain, divided by the steps ended (method: the script's docstring; what they mean: "
        f'docs/scaling.md, "Capacity model").\n\n{text}\n'
    )
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    if pattern.search(current):
        updated = pattern.sub(lambda _: body + "\n", current)
    else:
        updated = current.rstrip("\n") + "\n\n" + body
    RESULTS.write_text(updated)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3000, help="3-step runs per layout (default 3000)")
    parser.add_argument("--only", default=",".join(LAYOUTS), help=f"layouts, among: {', '.join(LAYOUTS)}")
    parser.add_argument("--write", action="store_true", help='write the section "Capacity model" of RESULTS.md')
    args = parser.parse_args()
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in LAYOUTS]
    if unknown:
        parser.error(f"--only: unknown {', '.join(unknown)}; choose among {', '.join(LAYOUTS)}")
    context = machine()
    bench = Bench(args)
    try:
        bench.start()
        [(version, settings)] = bench.query(
            "SELECT current_setting('server_version'), string_agg(name || '=' || setting, ', ' ORDER BY name) "
            "FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers')"
        )
        if "fsync=on" not in settings or "synchronous_commit=on" not in settings:
            raise SystemExit(f"the cluster in {PG_DIR} is not durable ({settings}): stop it and run again")
        context += f"; PostgreSQL {version} ({settings})"
        results = [bench.measure(label) for label in chosen]
    finally:
        bench.stop()
    text = table(results)
    print(context)
    print(text)
    if args.write:
        write(text, args, context)
        print(f"written to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
