#!/usr/bin/env python
"""Real bodies next to no-op ones: the realistic 3-step workflow against ThreeNoops, one
worker, in interleaved rounds on the durable cluster (issue #35).

    .venv/bin/python benchmarks/realistic.py [--runs 2000] [--rounds 3] [--concurrency 8,64] [--processes 1]

Each measurement: RUNS runs of one workflow started in one transaction with no worker up,
then one ``pgflow_worker --burst --concurrency N`` drains them; steps/s = finished steps /
(last step's ``finished_at`` - first step's ``started_at``), read from the rows, as
benchmarks/run.py measures pgflow. ``Realistic`` (benchmarks/workflows.py): the middle step
reads ``self.outputs["a"]``, every step writes one log line (to the worker's stderr, a file
here). Settings: benchmarks.settings (Django's default database OPTIONS, no
prepare_threshold), on a durable cluster as benchmarks/run.py starts one (benchmarks/.work/
pg-durable-realistic: fsync, synchronous_commit, full_page_writes on; stopped at the end). Each round runs every
configuration once, each concurrency's workloads back to back, in reversed order every other round;
the table gives each round's figures, their median, and each round's ratio to the no-op
figure of the same round and concurrency (the ratio to compare: the machine may be shared),
and the worker's CPU time (user + system) per step, less what a worker that finds nothing to
do spends starting and stopping: the figure a shared machine disturbs least. Beside it, what
the drain cost PostgreSQL per step: the CPU time of the cluster's processes (the postmaster's
children, those that exited during the drain included, background writers and autovacuum
too), the WAL it wrote (``pg_current_wal_lsn()`` before and after) and the steps a commit
(finished steps over the database's ``xact_commit``, claims' and heartbeats' transactions
counted too: how much each transaction is shared); and what filing the
drained runs into their day's partitions then cost it (pgflow.store.history.file_ended, the
sweep's work a minute after a run ends), per step.

(The f27ae2f A/B of benchmarks/RESULTS.md, --finding8 and --free-at-body-end, used a
temporary switch in pgflow/runtime/held.py, gone since a slot is free at body end.)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
os.environ.setdefault("DEBUG", "false")

from example_project import pgcluster  # noqa: E402

WORK = ROOT / "benchmarks" / ".work"
# --workloads: the workflows of benchmarks/workflows.py measured.
WORKLOADS = {"no-op": "ThreeNoops", "realistic": "Realistic", "reads-only": "ReadsOnly", "logs-only": "LogsOnly"}
# A database of its own on the durable cluster: benchmarks/run.py truncates pgflow_bench.
DATABASE = "pgflow_bench_realistic"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="8,64", help="comma-separated --concurrency values")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--workloads",
        default="no-op,realistic",
        help=f"comma-separated, the first the base of the ratios: {', '.join(WORKLOADS)}",
    )
    parser.add_argument(
        "--processes", type=int, default=1, help="pgflow_worker --processes: worker processes, each with --concurrency"
    )
    parser.add_argument(
        "--python-switch-interval",
        action="store_true",
        help="workers keep Python's own thread switch interval (5 ms), not pgflow_worker's SWITCH_INTERVAL",
    )
    args = parser.parse_args()
    # A durable cluster of its own: benchmarks/run.py stops pg-durable when it ends.
    with pgcluster.durable(WORK / "pg-durable-realistic"):
        run(args)


def run(args: argparse.Namespace) -> None:

    from benchmarks import engine

    engine.setup_django(DATABASE)
    engine.print_settings()
    concurrencies = [int(value) for value in args.concurrency.split(",")]
    variants: list[tuple[str, str, dict[str, str]]] = [
        (name, WORKLOADS[name], {}) for name in args.workloads.split(",")
    ]
    jobs = [(name, workflow, env, c) for c in concurrencies for name, workflow, env in variants]
    figures: dict[tuple[str, int], list[float]] = {(name, c): [] for name, _, _, c in jobs}
    cpu: dict[tuple[str, int], list[float]] = {(name, c): [] for name, _, _, c in jobs}
    server: dict[tuple[str, int], list[tuple[float, float, float]]] = {(name, c): [] for name, _, _, c in jobs}
    filing: dict[tuple[str, int], list[tuple[float, float]]] = {(name, c): [] for name, _, _, c in jobs}
    logs = WORK / "realistic-logs"
    logs.mkdir(exist_ok=True)
    extra = ("--processes", str(args.processes)) if args.processes > 1 else ()
    startup = startup_cpu(concurrencies[0], logs / "startup.log", args.timeout, extra)
    print(f"worker start and stop with nothing to do: {1000 * startup:.0f} ms CPU (taken off each figure)", flush=True)
    for round_number in range(1, args.rounds + 1):
        # Each concurrency's workloads back to back, reversed every other round: the machine's
        # noise moves more between minutes than between two neighbouring measurements.
        order = [job for c in concurrencies for job in jobs if job[3] == c]
        if round_number % 2 == 0:
            order = [job for c in concurrencies for job in reversed([j for j in order if j[3] == c])]
        for name, workflow, env, c in order:
            log = logs / f"{name}-{c}-round{round_number}.log"
            rate, cpu_ms, pg, filed = measure(
                workflow, args.runs, c, env, log, args.timeout, args.python_switch_interval, startup, extra
            )
            figures[(name, c)].append(rate)
            cpu[(name, c)].append(cpu_ms)
            server[(name, c)].append(pg)
            filing[(name, c)].append(filed)
            print(
                f"round {round_number}: {name:>10} --concurrency {c:>3}: {rate:,.0f} steps/s, "
                f"worker CPU {cpu_ms:.3f} ms/step, PostgreSQL CPU {pg[0]:.3f} ms/step, WAL {pg[1]:,.0f} B/step, "
                f"{pg[2]:.1f} steps/commit; "
                f"filing: PostgreSQL CPU {filed[0]:.3f} ms/step, WAL {filed[1]:,.0f} B/step",
                flush=True,
            )
    print()
    base = variants[0][0]
    print(
        f"| workload | --concurrency | steps/s per round | median | × {base}, per round | median of those "
        "| worker CPU ms/step (median) | PostgreSQL CPU ms/step (median) | WAL bytes/step (median) "
        "| steps a commit (median) "
        "| filing: PostgreSQL CPU ms/step, WAL bytes/step (median) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in concurrencies:
        for name, _, _ in variants:
            rates = figures[(name, c)]
            ratios = [rate / other for rate, other in zip(rates, figures[(base, c)], strict=True)]
            print(
                f"| {name} | {c} | {', '.join(f'{r:,.0f}' for r in rates)} | {statistics.median(rates):,.0f} "
                f"| {', '.join(f'{r:.2f}' for r in ratios)} | {statistics.median(ratios):.2f} "
                f"| {statistics.median(cpu[(name, c)]):.3f} "
                f"| {statistics.median(pg for pg, _, _ in server[(name, c)]):.3f} "
                f"| {statistics.median(wal for _, wal, _ in server[(name, c)]):,.0f} "
                f"| {statistics.median(batch for _, _, batch in server[(name, c)]):.1f} "
                f"| {statistics.median(pg for pg, _ in filing[(name, c)]):.3f}, "
                f"{statistics.median(wal for _, wal in filing[(name, c)]):,.0f} |"
            )


def measure(
    workflow: str,
    runs: int,
    concurrency: int,
    env: dict[str, str],
    log: Path,
    timeout: float,
    keep_switch: bool,
    startup: float,
    extra: tuple[str, ...] = (),
) -> tuple[float, float, tuple[float, float, float], tuple[float, float]]:
    """steps/s, the worker's CPU time (user + system, its whole process tree) per step (the
    figure a loaded machine disturbs least), PostgreSQL's CPU ms and WAL bytes per step and the
    steps a commit, and then what filing the drained runs into their day's partitions cost it
    per step (the sweep's work of a minute later, done here at once)."""
    from django.db import transaction

    from benchmarks import engine, workflows
    from pgflow import store
    from pgflow.store import history

    engine.reset()
    with transaction.atomic():
        for index in range(runs):
            getattr(workflows, workflow).start(input={"order": index})
    engine.analyze()
    argv, worker_env = engine.worker_command(concurrency, "--burst", *extra)
    if keep_switch:  # the command's sys.setswitchinterval made a no-op, then manage.py as usual
        argv = [
            argv[0],
            "-c",
            "import runpy, sys; sys.setswitchinterval = lambda interval: None; "
            f"sys.argv = {argv[1:]!r}; runpy.run_path(sys.argv[0], run_name='__main__')",
        ]
    server_before = server_cost()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env={**os.environ, **worker_env, "PGFLOW_TEST_DB_NAME": DATABASE, **env}, stderr=err
        )
        try:
            proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_after = server_cost()
    cpu_seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    time.sleep(0.1)
    steps, seconds = engine.step_window()
    if steps < 3 * runs:
        raise RuntimeError(f"{workflow}: only {steps} of {3 * runs} steps finished (see {log})")
    pg_cpu, wal, commits = (b - a for a, b in zip(server_before, server_after, strict=True))
    before_filing = server_cost()
    filed = history.file_ended(at=store.now() + history.SETTLE + timedelta(seconds=1), rounds=10**6)
    if filed != runs:
        raise RuntimeError(f"{workflow}: filed {filed} of {runs} runs")
    file_cpu, file_wal, _ = (b - a for a, b in zip(before_filing, server_cost(), strict=True))
    return (
        steps / seconds,
        1000 * (cpu_seconds - startup) / steps,
        (1000 * pg_cpu / steps, wal / steps, steps / commits),
        (1000 * file_cpu / steps, file_wal / steps),
    )


def server_cost() -> tuple[float, float, float]:
    """The cluster's CPU seconds so far (the postmaster's own and its exited children's, read
    from /proc, plus each live child's), its WAL position in bytes and the database's commits
    (a burst worker's statistics are flushed as it exits)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_backend_pid(), pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0'),"
            " (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())"
        )
        backend, wal, commits = cursor.fetchone()
    postmaster = _stat(backend)[1]
    tick = os.sysconf("SC_CLK_TCK")
    _, _, utime, stime, cutime, cstime = _stat(postmaster)
    seconds = (utime + stime + cutime + cstime) / tick
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                _, parent, utime, stime, _, _ = _stat(int(entry.name))
            except OSError:  # it exited meanwhile: the postmaster's cutime has it
                continue
            if parent == postmaster:
                seconds += (utime + stime) / tick
    return seconds, float(wal), float(commits)


def _stat(pid: int) -> tuple[int, int, int, int, int, int]:
    """pid, parent pid, utime, stime, cutime, cstime (clock ticks) of /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return pid, int(fields[1]), int(fields[11]), int(fields[12]), int(fields[13]), int(fields[14])


def startup_cpu(concurrency: int, log: Path, timeout: float, extra: tuple[str, ...] = ()) -> float:
    """The CPU seconds of a burst worker that finds nothing to do (Django's and pgflow's
    imports, connecting, stopping): the fixed part of every measurement, the median of three."""
    from benchmarks import engine

    engine.reset()
    argv, worker_env = engine.worker_command(concurrency, "--burst", *extra)
    samples = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(log, "wb") as err:
            subprocess.run(
                argv,
                cwd=ROOT,
                env={**os.environ, **worker_env, "PGFLOW_TEST_DB_NAME": DATABASE},
                stderr=err,
                timeout=timeout,
                check=True,
            )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        samples.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return statistics.median(samples)


if __name__ == "__main__":
    main()
