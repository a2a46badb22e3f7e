"""What every system's benchmark driver shares: stamps, worker processes, memory, the measurement.

Standard library only: a driver runs in the project's venv (pgflow) or in a peer's own venv
(benchmarks/.work/peers-venv/<peer>), and this module is imported by both.

A driver (``python -m benchmarks.peers.<system> --db URL --work DIR ...``) does, for one system:

1. throughput: a fresh store, RUNS chains of three no-op steps enqueued with the worker
   stopped, then the worker started; steps/s = 3 x RUNS / (last step - first step), read
   from the stamps the step bodies append to a file (pgflow: from its step rows);
2. idle latency: with that worker now idle, SAMPLES times a 1-step job is enqueued and
   committed, and we wait for its body to stamp; latency = body start - before the enqueue call;
3. memory: the worker's process tree is sampled every 100 ms from its start to its stop;
   peak RSS is the largest sum of VmRSS over the tree (PSS likewise, from smaps_rollup).

It prints one line ``RESULT {json}`` on stdout; anything else goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent.parent
STAMPS_ENV = "BENCH_STAMPS_DIR"
CHAIN = "chain"
LATENCY = "latency"

# ---------------------------------------------------------------------------------------
# Stamps: a step body appends its start time to a file. O_APPEND writes of one short line
# are atomic on Linux, so every process of a worker tree can write to the same file, and
# the cost (one write(2)) is the same for every system.

_fds: dict[str, int] = {}


def stamp(kind: str) -> None:
    """Record, from inside a job body, that a body of ``kind`` starts now."""
    now = time.time()
    fd = _fds.get(kind)
    if fd is None:
        fd = os.open(Path(os.environ[STAMPS_ENV]) / kind, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fds[kind] = fd
    os.write(fd, b"%.6f\n" % now)


def stamp_file(work: Path, kind: str) -> Path:
    return work / "stamps" / kind


def read_stamps(path: Path) -> list[float]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [float(line) for line in text.splitlines() if line.strip()]


def count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as handle:
            return handle.read().count(b"\n")
    except FileNotFoundError:
        return 0


# ---------------------------------------------------------------------------------------
# Processes. Every worker gets its own session (process group) so that it and all of its
# children can be stopped together; its group id is written under WORK/pgids so that
# run.py can still kill it if this driver itself dies.


class Workers:
    """Worker processes this driver started; stops them (the whole group) on exit."""

    def __init__(self, work: Path, log: Path) -> None:
        self.work = work
        self.log = log
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            proc = subprocess.Popen(
                list(argv),
                cwd=ROOT,
                env={**os.environ, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        pgids = self.work / "pgids"
        pgids.mkdir(parents=True, exist_ok=True)
        (pgids / str(proc.pid)).touch()
        self.procs.append(proc)
        return proc

    def check_alive(self) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited with {proc.returncode}: {last_line(self.log)}")

    def stop(self, grace: float = 10.0) -> None:
        for proc in self.procs:
            signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs:
            # Children (a prefork pool) may outlive their parent: kill what is left of the group.
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            (self.work / "pgids" / str(proc.pid)).unlink(missing_ok=True)
        self.procs.clear()
        reap_orphans()


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except FileNotFoundError:
        return "(no output)"
    return lines[-1][:300] if lines else "(no output)"


def become_subreaper() -> None:
    """Adopt our workers' orphans (prctl PR_SET_CHILD_SUBREAPER), so that we reap them.

    A pool child whose parent died first would otherwise go to init: it would escape the
    memory sampler, and its CPU time would not be counted as the benchmark's own.
    """
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def reap_orphans(timeout: float = 5.0) -> None:
    """Wait for every child left (adopted orphans included), up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > deadline:
                for child in tree([os.getpid()])[1:]:  # still alive, in a group of its own: end it
                    try:
                        os.kill(child, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                deadline = time.monotonic() + timeout
            time.sleep(0.05)


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so that ``finally`` blocks stop the workers."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


# ---------------------------------------------------------------------------------------
# Memory of a process tree, from /proc.


def tree(roots: Iterable[int]) -> list[int]:
    """The pids of ``roots`` and all their descendants (through every thread's children)."""
    found: list[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.append(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as handle:
                    todo.extend(int(child) for child in handle.read().split())
            except OSError:
                continue
    return found


def _kib(path: str, field: str) -> int:
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class MemorySampler(threading.Thread):
    """Samples the summed RSS and PSS of a process tree every ``interval`` seconds."""

    def __init__(self, roots: Callable[[], list[int]], interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.roots = roots
        self.interval = interval
        self.peak_rss_kib = 0
        self.peak_pss_kib = 0
        self.peak_hwm_kib = 0  # sum of each process's own VmHWM: an upper bound, for comparison
        self._stop_event = threading.Event()

    def sample(self) -> None:
        pids = tree(self.roots())
        rss = sum(_kib(f"/proc/{pid}/status", "VmRSS:") for pid in pids)
        hwm = sum(_kib(f"/proc/{pid}/status", "VmHWM:") for pid in pids)
        pss = sum(_kib(f"/proc/{pid}/smaps_rollup", "Pss:") for pid in pids)
        self.peak_rss_kib = max(self.peak_rss_kib, rss)
        self.peak_pss_kib = max(self.peak_pss_kib, pss)
        self.peak_hwm_kib = max(self.peak_hwm_kib, hwm)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.sample()

    def finish(self) -> dict[str, float]:
        self.sample()
        self._stop_event.set()
        self.join()
        return {
            "peak_rss_mb": self.peak_rss_kib / 1024,
            "peak_pss_mb": self.peak_pss_kib / 1024,
            "sum_hwm_mb": self.peak_hwm_kib / 1024,
        }


# ---------------------------------------------------------------------------------------
# The measurement.


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def wait_until(
    done: Callable[[], bool], timeout: float, what: str, check: Callable[[], None] | None = None, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not done within {timeout:.0f} s")
        time.sleep(interval)


def file_throughput(work: Path, runs: int, workers: Workers, timeout: float) -> dict[str, Any]:
    """Wait for 3 x runs chain stamps; steps/s from the first to the last."""
    path = stamp_file(work, CHAIN)
    expected = 3 * runs
    try:
        wait_until(lambda: count_lines(path) >= expected, timeout, f"{expected} steps", workers.check_alive, 0.1)
        partial = False
    except TimeoutError:
        partial = True  # report the rate over what did finish, marked as partial
    stamps = read_stamps(path)
    if len(stamps) < 2:
        raise RuntimeError(f"only {len(stamps)} of {expected} steps ran within {timeout:.0f} s")
    seconds = max(stamps) - min(stamps)
    return {
        "steps": len(stamps),
        "seconds": seconds,
        "steps_per_s": len(stamps) / seconds,
        "partial": partial or len(stamps) < expected,
    }


def file_latency(
    work: Path, samples: int, enqueue: Callable[[], None], workers: Workers, timeout: float = 15.0
) -> list[float]:
    """From before an enqueue call (its commit included) to the body's stamp, in ms, SAMPLES times.

    The clock starts before the call, as a caller's would: the whole enqueue (its Python,
    its round trip, a durable commit's wait for the disk) counts, and a body may start before
    the call returns (seen with Redis and with NOTIFY). One job enqueued and run first, not
    counted: the driver's first enqueue of this kind pays its process's one-time costs (a
    statement compiled and prepared, a client's first use), which a long-lived caller pays
    once, not once in every SAMPLES.
    """
    path = stamp_file(work, LATENCY)
    rng = random.Random(11)
    found: list[float] = []
    for index in range(samples + 1):
        before = time.time()
        enqueue()
        wait_until(
            lambda index=index: count_lines(path) > index,
            timeout,
            f"latency sample {index}",
            workers.check_alive,
            0.001,
        )
        if index:  # the first is the warm-up
            found.append((read_stamps(path)[index] - before) * 1000)
        # A random pause, so that samples do not lock into the phase of a polling loop.
        time.sleep(rng.uniform(0.05, 0.25))
    return found


def summarise_latency(values: list[float]) -> dict[str, Any]:
    return {
        "latency_ms": values,
        "latency_median_ms": statistics.median(values),
        "latency_p99_ms": percentile(values, 0.99),
    }


def parser(description: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--db", required=True, help="a postgres:// URL of the server (any database name)")
    parser.add_argument("--work", required=True, type=Path, help="a scratch folder for stamps and logs")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--workers", type=int, default=1, help="worker processes (latency only with 1)")
    parser.add_argument("--timeout", type=float, default=180.0, help="cap on the throughput phase, seconds")
    parser.add_argument("--redis", default=None)
    parser.add_argument("--processes", type=int, default=1, help="pgflow only: pgflow_worker --processes")
    parser.add_argument("--concurrency", type=int, default=None, help="pgflow only: pgflow_worker --concurrency")
    parser.add_argument(
        "--workflow",
        choices=("no-op", "realistic"),
        default="no-op",
        help="pgflow only: ThreeNoops, or Realistic (the middle step reads an output, each step logs a line)",
    )
    parser.add_argument("--label", default="run", help="names the log file")
    return parser


def fresh_stamps(work: Path) -> None:
    folder = work / "stamps"
    folder.mkdir(parents=True, exist_ok=True)
    for kind in (CHAIN, LATENCY):
        (folder / kind).unlink(missing_ok=True)
    os.environ[STAMPS_ENV] = str(folder)


def database_url(server_url: str, name: str) -> str:
    """``server_url`` with its database replaced by ``name``."""
    parts = urlsplit(server_url)
    return parts._replace(path=f"/{name}").geturl()


def conninfo(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    return {
        "host": parts.hostname,
        "port": parts.port or 5432,
        "user": parts.username,
        "password": parts.password,
        "dbname": parts.path.lstrip("/"),
    }


def recreate_database(server_url: str, name: str) -> str:
    """Drop and create database ``name`` on the server (psycopg); return its URL."""
    import psycopg

    params = {key: value for key, value in conninfo(server_url).items() if value is not None}
    params["dbname"] = "postgres"
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return database_url(server_url, name)


def analyze_server(server_url: str) -> int:
    """ANALYZE every database of the benchmark's server; returns how many.

    Each measurement starts from freshly emptied tables and a bulk enqueue, which leaves
    PostgreSQL planning with no statistics (or those of the emptied tables) until
    autovacuum gets to them, a few seconds into the run: then any system's plans may read
    whole tables. A deployed queue's tables have statistics, so every system gets them
    before its workers start. A system without psycopg here (Celery) keeps nothing in
    PostgreSQL and is skipped."""
    try:
        import psycopg
    except ImportError:
        return 0
    params = {key: value for key, value in conninfo(server_url).items() if value is not None}
    params["dbname"] = "postgres"
    with psycopg.connect(**params, autocommit=True) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate"
            ).fetchall()
        ]
    for name in names:
        with psycopg.connect(**{**params, "dbname": name}, autocommit=True) as conn:
            conn.execute("ANALYZE")
    return len(names)


def versions(*names: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "?"
    return found


def emit(result: dict[str, Any]) -> None:
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def log(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------
# One system's measurement, the same for every system.


class System:
    """One system under test; a driver module subclasses it and calls :func:`main`."""

    name = "system"

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def config(self) -> str:
        """One line: how the worker is set up."""
        return ""

    def versions(self) -> dict[str, str]:
        return {}

    def prepare(self) -> None:
        """A fresh, empty store."""

    def enqueue_chains(self, runs: int) -> None:
        """RUNS chains of three no-op steps, committed, with no worker running."""
        raise NotImplementedError

    def worker_argv(self) -> list[str]:
        raise NotImplementedError

    def worker_env(self) -> dict[str, str]:
        return {}

    def throughput(self, workers: Workers) -> dict[str, Any]:
        return file_throughput(self.args.work, self.args.runs, workers, self.args.timeout)

    def enqueue_latency_job(self) -> None:
        """Enqueue one 1-step job whose body stamps LATENCY; return once it is committed."""
        raise NotImplementedError

    def discard_backlog(self) -> bool:
        """Drop the chains a capped throughput phase left queued, so that latency is measured idle.

        False: this system cannot, and its latency is not measured after a capped phase.
        """
        return False

    def close(self) -> None:
        pass


def main(system_class: type[System], description: str | None = None) -> None:
    args = parser(description).parse_args()
    args.work = args.work.resolve()
    exit_on_sigterm()
    become_subreaper()
    fresh_stamps(args.work)
    system = system_class(args)
    workers = Workers(args.work, args.work / "logs" / f"{system.name}-{args.label}.log")
    result: dict[str, Any] = {"system": system.name, "workers": args.workers, "runs": args.runs}
    try:
        result["versions"] = system.versions()
        result["config"] = system.config()
        system.prepare()
        started = time.monotonic()
        system.enqueue_chains(args.runs)
        log(f"{system.name}: {args.runs} chains enqueued in {time.monotonic() - started:.1f} s")
        analyze_server(args.db)
        for _ in range(args.workers):
            workers.start(system.worker_argv(), system.worker_env())
        sampler = MemorySampler(lambda: [proc.pid for proc in workers.procs])
        sampler.start()
        result.update(system.throughput(workers))
        log(f"{system.name}: {result['steps']} steps in {result['seconds']:.2f} s")
        idle = not result["partial"] or system.discard_backlog()
        if args.workers == 1 and args.samples and idle:
            time.sleep(2.0 if result["partial"] else 1.0)  # the worker has drained the chains and is idle now
            result.update(summarise_latency(file_latency(args.work, args.samples, system.enqueue_latency_job, workers)))
        elif args.workers == 1 and args.samples:
            log(f"{system.name}: latency not measured, chains are still queued")
        result.update(sampler.finish())
    except Exception as exc:  # noqa: BLE001 - the one-line reason is the driver's answer
        traceback.print_exc()
        log(f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300])
        raise SystemExit(1) from exc
    finally:
        workers.stop()
        try:
            system.close()
        except Exception as exc:  # noqa: BLE001 - closing must not hide the measurement or its failure
            log(f"closing {system.name}: {type(exc).__name__}: {exc}")
    emit(result)
