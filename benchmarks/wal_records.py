#!/usr/bin/env python
"""What one worker's drain writes to the WAL, record by record, on a durable cluster.

    .venv/bin/python benchmarks/wal_records.py [--runs 1500] [--concurrency 32]

RUNS three-step no-op runs (benchmarks/workflows.py's ThreeNoops) are started with no worker
up, the tables ANALYZEd, a CHECKPOINT taken; then one ``pgflow_worker --burst`` drains them.
``pg_waldump`` of the WAL between the two positions gives, per step: records and bytes, and
the records on ``pgflow_step`` by kind (LOCK, UPDATE, INSERT), split between the claims'
transactions (they insert no row) and the others (the group commit's: outcomes and next
attempts). The cluster is benchmarks/realistic.py's (benchmarks/.work/pg-durable-realistic,
fsync on), stopped at the end. Runs as root: pg_waldump runs as the server's user.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
os.environ.setdefault("DEBUG", "false")

from example_project import pgcluster  # noqa: E402

WORK = ROOT / "benchmarks" / ".work"
CLUSTER = WORK / "pg-durable-realistic"
DATABASE = "pgflow_bench_wal"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1500)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--fillfactor", type=int, default=None, help="pgflow_step's fillfactor for this drain (an A/B)")
    args = parser.parse_args()
    with pgcluster.durable(CLUSTER):
        measure(args.runs, args.concurrency, args.fillfactor)


def measure(runs: int, concurrency: int, fillfactor: int | None) -> None:
    from benchmarks import engine

    engine.setup_django(DATABASE)
    from django.db import connection

    with connection.cursor() as cursor:  # the TRUNCATE below makes new pages, which take it
        cursor.execute(f"ALTER TABLE pgflow_step SET (fillfactor = {int(fillfactor or 100)})")

    engine.reset()
    engine.enqueue(runs)
    engine.analyze()
    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")
        cursor.execute(
            "SELECT pg_current_wal_lsn(), pg_relation_filenode('pgflow_step'), current_setting('data_directory')"
        )
        start, filenode, data_dir = cursor.fetchone()
    connection.close()
    argv, env = engine.worker_command(concurrency, "--burst")
    subprocess.run(argv, cwd=ROOT, env={**os.environ, **env, "PGFLOW_TEST_DB_NAME": DATABASE}, check=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn(), count(*) FROM pgflow_step WHERE status = 'completed'")
        end, steps = cursor.fetchone()
    connection.close()
    dump = subprocess.run(
        ["runuser", "-u", "postgres", "--", str(waldump()), "-p", f"{data_dir}/pg_wal", "-s", start, "-e", end],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    report(dump, str(filenode), steps, concurrency, fillfactor)


def waldump() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_waldump"))
    if not found:
        raise SystemExit("no pg_waldump under /usr/lib/postgresql")
    return found[-1]


def report(dump: str, filenode: str, steps: int, concurrency: int, fillfactor: int | None) -> None:
    records = total_bytes = 0
    kinds: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in dump.splitlines():
        sized = re.search(r"len \(rec/tot\):\s+\d+/\s*(\d+), tx:\s+(\d+).*desc: ([A-Z_]+)", line)
        if not sized:
            continue
        records += 1
        total_bytes += int(sized.group(1))
        if re.search(rf"rel \d+/\d+/{filenode}( |$|,)", line) and line.startswith("rmgr: Heap "):
            kinds[sized.group(2)][sized.group(3)] += 1
    claims = {tx: c for tx, c in kinds.items() if not c["INSERT"]}
    others = {tx: c for tx, c in kinds.items() if c["INSERT"]}

    def per_step(txs: dict[str, collections.Counter[str]], kind: str) -> str:
        return f"{sum(c[kind] for c in txs.values()) / steps:.2f}"

    print(f"{steps} steps, one worker, --concurrency {concurrency}, pgflow_step fillfactor {fillfactor or 100}")
    print(f"WAL per step: {records / steps:.1f} records, {total_bytes / steps:,.0f} bytes")
    print("| pgflow_step records per step | LOCK | UPDATE | INSERT |")
    print("| --- | ---: | ---: | ---: |")
    for name, txs in (("claims (no insert)", claims), ("the other transactions", others)):
        print(f"| {name} | {per_step(txs, 'LOCK')} | {per_step(txs, 'UPDATE')} | {per_step(txs, 'INSERT')} |")


if __name__ == "__main__":
    main()
