#!/usr/bin/env python
"""The cost of a Django task on pgflow: enqueue and drain of TASKS no-op ``@task``s on one
``pgflow_worker`` against django-tasks-db's ``db_worker``, on the same durable cluster, side by
side, in interleaved rounds (issue #36).

    .venv/bin/python benchmarks/tasks.py [--tasks 10000] [--rounds 3] [--concurrency 1,8]

Each measurement, per backend (benchmarks/task_bodies.py: ``pgflow_noop`` on TASKS["default"] =
pgflow.tasks.PgflowBackend, ``db_noop`` on TASKS["db"] = django_tasks_db.DatabaseBackend):

- enqueue: TASKS ``.enqueue()`` calls in one transaction, no worker up; the clock starts before
  the first call and stops when the commit returns (tasks/s = TASKS / that);
- single enqueue: SINGLES ``.enqueue()`` calls each in autocommit (each its own commit, so its
  fsync); the median per call;
- drain: one worker process started on the TASKS queued (``pgflow_worker --burst --concurrency N``;
  ``manage.py db_worker --batch --interval 0``, which runs one task at a time); tasks/s = TASKS /
  (last ``finished_at`` - first ``started_at``), read from each backend's rows (pgflow_step,
  django-tasks-db's DBTaskResult); "wall" = from the worker's Popen to its exit (start-up included).

Both workers run with benchmarks.settings (DEBUG off, Django's default database OPTIONS) in
the same project: pgflow installed, so the db_worker also runs pgflow's ``task_finished``
receiver (one indexed query per task: fan-out members are counted that way). Each round runs
every configuration once, in reversed order every other round; the ratios are pgflow ÷
django-tasks-db within a round, then their median. The cluster is durable (benchmarks/.work/
pg-durable-tasks: fsync, synchronous_commit and full_page_writes on), stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
os.environ.setdefault("DEBUG", "false")

from example_project import pgcluster  # noqa: E402

WORK = ROOT / "benchmarks" / ".work"
CLUSTER = WORK / "pg-durable-tasks"
DATABASE = "pgflow_bench_tasks"  # a database of its own: benchmarks/run.py truncates pgflow_bench
SINGLES = 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,8", help="comma-separated pgflow_worker --concurrency values")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    with pgcluster.durable(CLUSTER):
        run(args)


def run(args: argparse.Namespace) -> None:
    from benchmarks import engine

    engine.setup_django(DATABASE)
    engine.print_settings()
    configs = [("django-tasks-db", 1)] + [("pgflow", int(c)) for c in args.concurrency.split(",")]
    figures: dict[tuple[str, int], list[dict[str, float]]] = {config: [] for config in configs}
    logs = WORK / "tasks-logs"
    logs.mkdir(exist_ok=True)
    for round_number in range(1, args.rounds + 1):
        order = configs if round_number % 2 else list(reversed(configs))
        for backend, concurrency in order:
            log = logs / f"{backend}-{concurrency}-round{round_number}.log"
            found = measure(backend, concurrency, args.tasks, log, args.timeout)
            figures[(backend, concurrency)].append(found)
            print(
                f"round {round_number}: {backend:>15} (concurrency {concurrency}): enqueue {found['enqueue']:,.0f}/s, "
                f"single {found['single_ms']:.2f} ms, drain {found['drain']:,.0f}/s, wall {found['wall']:.1f} s",
                flush=True,
            )
    print()
    print(table(configs, figures, args.tasks))


def table(configs: list[tuple[str, int]], figures: dict[tuple[str, int], list[dict[str, float]]], tasks: int) -> str:
    base = figures[configs[0]]
    out = [
        f"| backend, worker | enqueue {tasks:,} in one transaction, tasks/s | one enqueue, own commit, median ms "
        f"| drain, tasks/s | drain wall, s | × django-tasks-db (enqueue / drain), per round, median |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for config in configs:
        rows = figures[config]

        def med(key: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(r[key] for r in rows)

        def each(key: str, rows: list[dict[str, float]] = rows) -> str:
            return ", ".join(f"{r[key]:,.0f}" for r in rows)

        enqueue_ratio = statistics.median(r["enqueue"] / b["enqueue"] for r, b in zip(rows, base, strict=True))
        drain_ratio = statistics.median(r["drain"] / b["drain"] for r, b in zip(rows, base, strict=True))
        name = "django-tasks-db, db_worker"
        if config[0] == "pgflow":
            name = f"pgflow, pgflow_worker --concurrency {config[1]}"
        out.append(
            f"| {name} | {med('enqueue'):,.0f} ({each('enqueue')}) | {med('single_ms'):.2f} "
            f"| {med('drain'):,.0f} ({each('drain')}) | {med('wall'):.1f} | {enqueue_ratio:.2f} / {drain_ratio:.2f} |"
        )
    return "\n".join(out)


def _db_table() -> str:
    from django_tasks_db.models import DBTaskResult  # lazy: the app loads with Django's setup

    return str(DBTaskResult._meta.db_table)


def reset() -> None:
    from django.db import connection

    from benchmarks import engine

    engine.reset()
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {_db_table()}")


def measure(backend: str, concurrency: int, tasks: int, log: Path, timeout: float) -> dict[str, float]:
    from django.db import connection, transaction

    from benchmarks import engine, task_bodies

    noop: Any = task_bodies.pgflow_noop if backend == "pgflow" else task_bodies.db_noop
    reset()
    for _ in range(SINGLES):  # each its own commit, as a view's one enqueue
        noop.enqueue()
    singles = []
    reset()
    for _ in range(SINGLES):
        began = time.perf_counter()
        noop.enqueue()
        singles.append(time.perf_counter() - began)
    reset()
    began = time.perf_counter()
    with transaction.atomic():
        for _ in range(tasks):
            noop.enqueue()
    enqueue_seconds = time.perf_counter() - began
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE pgflow_run, pgflow_step, {_db_table()}")
    if backend == "pgflow":
        argv, env = engine.worker_command(concurrency, "--burst")
    else:
        argv = [sys.executable, str(ROOT / "manage.py"), "db_worker", "--backend", "db", "--batch", "--interval", "0"]
        argv += ["--no-reload", "--no-startup-delay", "-v", "0"]
        env = {"DJANGO_SETTINGS_MODULE": "benchmarks.settings", "DEBUG": "false", "PGFLOW_LOG_LEVEL": "WARNING"}
    with open(log, "wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **env, "PGFLOW_TEST_DB_NAME": DATABASE}, stderr=err)
        try:
            proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        wall = time.perf_counter() - started
    table_name = "pgflow_step" if backend == "pgflow" else _db_table()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at)) FROM {table_name} "  # noqa: S608
            "WHERE finished_at IS NOT NULL"
        )
        done, seconds = cursor.fetchone()
    if done < tasks:
        raise RuntimeError(f"{backend}: only {done} of {tasks} tasks finished (see {log})")
    return {
        "enqueue": tasks / enqueue_seconds,
        "single_ms": statistics.median(singles) * 1000,
        "drain": tasks / float(seconds),
        "wall": wall,
    }


if __name__ == "__main__":
    main()
