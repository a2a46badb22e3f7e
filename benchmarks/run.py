#!/usr/bin/env python
"""pgflow next to its peers and to PostgreSQL's own ceiling, in one run on this machine.

    /tmp/venv311/bin/python benchmarks/run.py                 # the full run (~15-20 min on 2 cores)
    /tmp/venv311/bin/python benchmarks/run.py --quick         # a smoke run: fewer runs, 1 round (~3 min)
    /tmp/venv311/bin/python benchmarks/run.py --only pgflow,celery
    /tmp/venv311/bin/python benchmarks/run.py --only pgflow,celery --latency-only --samples 100

What it starts, and stops again on the way out (Ctrl-C included): a private PostgreSQL
(example_project/pgcluster.py, in benchmarks/.work/pg-durable) on PostgreSQL's durable
defaults (fsync, synchronous_commit and full_page_writes on: every commit waits for the
disk), or with --fsync-off the tests' cluster (benchmarks/.work/pg, all three off), whose
figures go to a section of their own labelled as an extra; a Redis
on a free port of 127.0.0.1 for Celery, and one virtualenv per peer under
benchmarks/.work/peers-venv/ installed from PyPI (pinned in benchmarks/peers/venvs.py).

What it measures, per round (at least 3 full rounds, interleaved: every system once per
round, in a rotated order, so drift and noise from elsewhere spread over all of them):

- the ceiling: pgbench running the least SQL one step needs (benchmarks/peers/ceiling.py)
  at 1, 2 and 4 clients, in transactions (= steps) per second;
- for pgflow (one worker process, two, one worker command with --processes 2, and one worker
  with --concurrency 8 and 64) and for
  Celery + Redis, Procrastinate, DBOS and django-q2 (one worker each): RUNS chains of three
  no-op steps enqueued with the worker stopped, then drained; steps/s = 3 x RUNS / (last
  step - first step);
- pgflow with realistic bodies (benchmarks/workflows.py's Realistic: the middle step reads an
  output, each step logs a line) at --concurrency 8 and 64, next to the no-op rows;
- idle latency: with the one worker idle, from before the call that enqueues a 1-step job
  (its commit included) to its body starting, SAMPLES times (median and p99);
- the worker's peak memory: the process tree's summed RSS, sampled every 100 ms (PSS too,
  which counts pages shared by forked children once).

The drivers are benchmarks/peers/<system>_peer.py (see common.py for the method). It prints
one table of the medians over the rounds, then issue #35's ratios (realistic ÷ no-op,
pgflow ÷ the best ceiling, pgflow's latency ÷ Celery's), each divided within a round first,
and, unless --quick (or with --write), writes them with the machine, the versions and the
command into the section "Peers, side by side" of benchmarks/RESULTS.md, leaving the file's
other sections as they are. A peer that cannot be
installed or run is reported as "failed: <reason>"; the run goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.peers import ceiling, report, venvs  # noqa: E402 - after the path is set
from benchmarks.peers.common import signal_group  # noqa: E402
from example_project import pgcluster  # noqa: E402

WORK = ROOT / "benchmarks" / ".work"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
PEERS = ["celery", "procrastinate", "dbos", "django-q2"]
SYSTEMS = ["pgflow", *PEERS]
MODULES = {
    "pgflow": "pgflow_peer",
    "celery": "celery_peer",
    "procrastinate": "procrastinate_peer",
    "dbos": "dbos_peer",
    "django-q2": "djangoq_peer",
}
LABELS = {
    "pgflow": "pgflow, 1 worker",
    "pgflow-2w": "pgflow, 2 workers",
    "pgflow-2p": "pgflow, 1 worker, --processes 2",
    "pgflow-64": "pgflow, 1 worker, --concurrency 64",
    "pgflow-8": "pgflow, 1 worker, --concurrency 8",
    "pgflow-real-8": "pgflow, realistic bodies, --concurrency 8",
    "pgflow-real-64": "pgflow, realistic bodies, --concurrency 64",
    "celery": "Celery + Redis",
    "procrastinate": "Procrastinate",
    "dbos": "DBOS",
    "django-q2": "django-q2 (ORM broker)",
}
CLIENTS = [1, 2, 4]
PGFLOW_VARIANTS = ("pgflow-2w", "pgflow-2p", "pgflow-64", "pgflow-8", "pgflow-real-8", "pgflow-real-64")
CONCURRENCY = {"pgflow-64": 64, "pgflow-8": 8, "pgflow-real-8": 8, "pgflow-real-64": 64}


class Stopped(Exception):
    """SIGTERM: leave through the finally blocks, like Ctrl-C."""


def main() -> None:
    args = parse_args()
    started_at = datetime.now(UTC)
    load_before = report.load_average()
    if float(load_before.split()[0]) > 1.0:
        say(f"warning: load average {load_before} before the start: other processes are busy, figures will be noisy")

    def on_sigterm(signum: int, frame: object) -> None:
        raise Stopped

    signal.signal(signal.SIGTERM, on_sigterm)
    # Ctrl-C raises KeyboardInterrupt even where SIGINT came in ignored (a background job of a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    bench = Bench(args)
    try:
        bench.run()
    except (KeyboardInterrupt, Stopped):
        say("interrupted: stopping what was started")
        bench.stop()
        raise SystemExit(130) from None
    except pgcluster.ClusterError as exc:
        raise SystemExit(f"cannot start PostgreSQL: {exc}") from None
    finally:
        bench.stop()
    text = bench.table()
    print()
    print(text)
    if args.write:
        section = bench.section(text, started_at, load_before, report.load_average())
        report.replace_section(RESULTS, section)  # re-reads the file right before writing
        say(f"written to {RESULTS.relative_to(ROOT)}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 300 runs, 20 samples, 1 round, no file")
    parser.add_argument(
        "--only",
        default=",".join(SYSTEMS),
        help=f"comma-separated systems among {','.join(SYSTEMS)} (the ceiling always runs)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3, --quick 1)")
    parser.add_argument("--runs", type=int, default=None, help="3-step chains per measurement (default 2000)")
    parser.add_argument("--samples", type=int, default=None, help="idle-latency samples (default 50)")
    parser.add_argument("--ceiling-seconds", type=float, default=None, help="pgbench time per client count")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="cap on one throughput phase, seconds; a slower system is measured on what it did",
    )
    parser.add_argument(
        "--fsync-off",
        action="store_true",
        help="measure on a cluster with fsync, synchronous_commit and full_page_writes off (an extra)",
    )
    parser.add_argument(
        "--latency-only",
        action="store_true",
        help="idle latency only: no ceiling, one pgflow row, --runs 50 chains to warm each worker, no file",
    )
    parser.add_argument(
        "--write",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write the RESULTS.md section (default: yes, but not with --quick)",
    )
    args = parser.parse_args()
    quick = args.quick
    args.rounds = args.rounds or (1 if quick else 3)
    args.runs = args.runs or (300 if quick else 50 if args.latency_only else 2000)
    args.samples = args.samples if args.samples is not None else (20 if quick else 50)
    args.ceiling_seconds = args.ceiling_seconds or (2.0 if quick else 5.0)
    args.timeout = args.timeout or (60.0 if quick else 100.0)
    args.write = (not quick and not args.latency_only) if args.write is None else args.write
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(args.only) - set(SYSTEMS))
    if unknown:
        parser.error(f"--only: unknown {', '.join(unknown)}; choose among {', '.join(SYSTEMS)}")
    args.command = " ".join(["/tmp/venv311/bin/python", "benchmarks/run.py", *map(shlex.quote, sys.argv[1:])])
    return args


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Bench:
    """The services, the rounds and the figures of one run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pg_dir = WORK / ("pg" if args.fsync_off else "pg-durable")
        self.heading = report.SECTION_FSYNC_OFF if args.fsync_off else report.SECTION
        self.logs = WORK / "logs"
        self.server_url = ""
        self.redis: subprocess.Popen[bytes] | None = None
        self.redis_url = ""
        self.child: subprocess.Popen[bytes] | None = None
        self.pg_started = False
        self.pythons: dict[str, Path] = {"pgflow": Path(sys.executable)}
        self.rows: dict[str, report.Row] = {}
        self.raw: list[dict[str, Any]] = []
        self.versions: dict[str, str] = {}
        self.configs: dict[str, str] = {}
        self.pgbench: Path | None = None
        self.ceiling_url = ""
        self.ceiling_scripts: dict[str, Path] = {}
        self.redis_log: Any = None
        self.others_share = 0.0
        self.pgflow_sources: set[str] = set()  # digests of pgflow/ as each pgflow measurement began

    # ---- services -------------------------------------------------------------------

    def start_postgres(self) -> None:
        WORK.mkdir(parents=True, exist_ok=True)
        os.chmod(WORK, 0o755)  # noqa: S103 - the postgres user must reach its data folder below it
        say("starting PostgreSQL" + (" (fsync off)" if self.args.fsync_off else " (durable: fsync on)"))
        os.environ[pgcluster.DURABLE_ENV] = "0" if self.args.fsync_off else "1"
        self.server_url = pgcluster.ensure(self.pg_dir)
        self.pg_started = True
        binaries = pgcluster._system_binaries()
        candidates = [binaries / "pgbench"] if binaries else []
        found = shutil.which("pgbench")
        candidates += [Path(found)] if found else []
        self.pgbench = next((path for path in candidates if path.exists()), None)
        import psycopg

        from benchmarks.peers.common import conninfo

        with psycopg.connect(**{k: v for k, v in conninfo(self.server_url).items() if v is not None}) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            self.versions["PostgreSQL"] = str(row[0]) if row else "?"
            settings = conn.execute(
                "SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings "
                "WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', "
                "'shared_buffers', 'max_connections')"
            ).fetchone()
            self.configs["PostgreSQL"] = str(settings[0]) if settings else ""
            durable = conn.execute(
                "SELECT count(*) = 3 FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', "
                "'full_page_writes') AND setting = 'on'"
            ).fetchone()
        if not self.args.fsync_off and not (durable and durable[0]):
            # A cluster left running in the folder with other settings would be reused.
            raise pgcluster.ClusterError(
                f"the benchmark's PostgreSQL in {self.pg_dir} is not durable ({self.configs['PostgreSQL']}): "
                f"stop it (python example_project/pgcluster.py stop {self.pg_dir}) and run again"
            )

    def start_redis(self) -> None:
        server = shutil.which("redis-server")
        if server is None and os.geteuid() == 0:
            say("installing redis-server (apt-get)")
            with open(self.logs / "apt-redis.log", "w") as out:
                subprocess.run(
                    ["apt-get", "install", "-y", "redis-server"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    check=False,
                    timeout=600,
                )
            server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("no redis-server (apt-get install -y redis-server)")
        port = free_port()
        self.redis_log = open(self.logs / "redis.log", "wb")  # noqa: SIM115 - open for the server's life
        self.redis = subprocess.Popen(
            [
                server,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ],
            stdout=self.redis_log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while not ping_redis(port):
            if self.redis.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {report_last_line(self.logs / 'redis.log')}")
            time.sleep(0.05)
        self.redis_url = f"redis://127.0.0.1:{port}/0"
        version = subprocess.run([server, "--version"], capture_output=True, text=True, check=False).stdout.split()
        self.versions["redis-server"] = next((part[2:] for part in version if part.startswith("v=")), "?")

    def others_cpu(self) -> report.OthersCpu:
        """A meter, started now, of the CPU that processes outside this benchmark use."""
        try:
            postmaster = int((self.pg_dir / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            postmaster = 0
        meter = report.OthersCpu([os.getpid(), postmaster, self.redis.pid if self.redis else 0])
        meter.begin()
        return meter

    def stop(self) -> None:
        """Stop everything this run started; safe to call twice."""
        if self.child is not None and self.child.poll() is None:
            signal_group(self.child.pid, signal.SIGTERM)  # the driver stops its workers on SIGTERM
            try:
                self.child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            signal_group(self.child.pid, signal.SIGKILL)
            self.child.wait()
        self.child = None
        # Workers of a driver that could not clean up: each is a process group named by a file.
        for marker in WORK.glob("runs/*/pgids/*"):
            signal_group(int(marker.name), signal.SIGKILL)
            marker.unlink(missing_ok=True)
        if self.redis is not None:
            signal_group(self.redis.pid, signal.SIGTERM)
            try:
                self.redis.wait(timeout=10)
            except subprocess.TimeoutExpired:
                signal_group(self.redis.pid, signal.SIGKILL)
                self.redis.wait()
            self.redis = None
            self.redis_log.close()
        if self.pg_started:
            self.pg_started = False
            try:
                pgcluster.stop(self.pg_dir)
            except pgcluster.ClusterError as exc:
                say(f"could not stop PostgreSQL: {exc}")

    # ---- the run --------------------------------------------------------------------

    def run(self) -> None:
        args = self.args
        self.logs.mkdir(parents=True, exist_ok=True)
        systems = [name for name in SYSTEMS if name in args.only]
        for variant in [] if args.latency_only else ceiling.SCRIPTS:
            for clients in CLIENTS:
                key = f"ceiling-{variant}-{clients}"
                self.rows[key] = report.Row(
                    key, f"ceiling: {ceiling.TITLES[variant]}, {clients} client{'s' if clients > 1 else ''}"
                )
        for name in systems:
            self.rows[name] = report.Row(name, LABELS[name])
            if name == "pgflow" and not args.latency_only:
                for key in PGFLOW_VARIANTS:
                    self.rows[key] = report.Row(key, LABELS[key])
        self.start_postgres()
        for name in systems:
            if name in PEERS:
                say(f"virtualenv for {name}")
                try:
                    self.pythons[name] = venvs.ensure(WORK / "peers-venv", name, self.logs / f"venv-{name}.log")
                except (venvs.InstallError, OSError, subprocess.SubprocessError) as exc:
                    self.rows[name].failed = f"install: {one_line(exc)}"
        if "celery" in systems and not self.rows["celery"].failed:
            try:
                self.start_redis()
            except (RuntimeError, OSError) as exc:
                self.rows["celery"].failed = f"redis: {one_line(exc)}"
        if not args.latency_only:
            self.run_ceiling_setup()
        whole_run = self.others_cpu()
        # (system, worker processes started, row): pgflow also as two workers, as one worker
        # command running two processes (its --processes, as Celery's one worker runs a pool),
        # as one worker of 64 slots (its group commit's batches grow with the slots), and with
        # Realistic's bodies next to no-op ones at 8 and 64 slots (issue #35's ratios).
        pgflow_jobs = [("pgflow", 1, "pgflow")] + (
            [] if args.latency_only else [("pgflow", 2 if key == "pgflow-2w" else 1, key) for key in PGFLOW_VARIANTS]
        )
        jobs = [job for name in systems for job in (pgflow_jobs if name == "pgflow" else [(name, 1, name)])]
        for round_number in range(1, args.rounds + 1):
            say(f"round {round_number} of {args.rounds}")
            self.ceiling_round(round_number)
            shift = (round_number - 1) % len(jobs) if jobs else 0
            for name, workers, key in jobs[shift:] + jobs[:shift]:
                if self.rows[key].failed:
                    continue
                self.measure(key, name, workers, round_number)
        self.others_share = whole_run.share()  # now, while PostgreSQL and Redis still count as ours

    def run_ceiling_setup(self) -> None:
        ceilings = [row for key, row in self.rows.items() if key.startswith("ceiling-")]
        if self.pgbench is None:
            for row in ceilings:
                row.failed = "no pgbench found (apt-get install postgresql-client)"
            return
        try:
            self.ceiling_url = ceiling.prepare(self.server_url)
        except Exception as exc:  # noqa: BLE001 - a failed ceiling is reported, the peers still run
            for row in ceilings:
                row.failed = one_line(exc)
            return
        self.ceiling_scripts = {variant: ceiling.write_script(WORK / "ceiling", variant) for variant in ceiling.SCRIPTS}
        self.versions["pgbench"] = ceiling.version(self.pgbench).replace("pgbench (PostgreSQL) ", "")

    def ceiling_round(self, round_number: int) -> None:
        if self.pgbench is None:
            return
        for variant, script in self.ceiling_scripts.items():
            for clients in CLIENTS:
                row = self.rows[f"ceiling-{variant}-{clients}"]
                if row.failed:
                    continue
                ceiling.refill(self.ceiling_url)
                others = self.others_cpu()
                argv = ceiling.command(self.pgbench, self.ceiling_url, script, clients, self.args.ceiling_seconds)
                try:
                    result = ceiling.parse(self.child_output(argv, self.args.ceiling_seconds + 60))
                except (RuntimeError, subprocess.SubprocessError) as exc:
                    row.failed = one_line(exc)
                    continue
                row.add(result)
                row.config = (
                    f"benchmarks/peers/ceiling.py script '{variant}', --client {clients} --jobs {clients}, "
                    f"--protocol prepared, {self.args.ceiling_seconds:.0f} s"
                )
                self.raw.append({"round": round_number, "system": row.key, "others": others.share(), **result})
                say(f"  ceiling, {ceiling.TITLES[variant]}, {clients} client(s): {result['steps_per_s']:,.0f} steps/s")

    def measure(self, key: str, name: str, workers: int, round_number: int) -> None:
        args = self.args
        row = self.rows[key]
        argv = [
            str(self.pythons[name]),
            "-m",
            f"benchmarks.peers.{MODULES[name]}",
            "--db",
            self.server_url,
            "--work",
            str(WORK / "runs" / key),
            "--runs",
            str(args.runs),
            "--samples",
            str(args.samples if workers == 1 else 0),
            "--workers",
            str(workers),
            "--timeout",
            str(args.timeout),
            "--label",
            f"round{round_number}",
        ]
        if name == "celery":
            argv += ["--redis", self.redis_url]
        if key == "pgflow-2p":
            argv += ["--processes", "2"]
        if key in CONCURRENCY:
            argv += ["--concurrency", str(CONCURRENCY[key])]
        if key.startswith("pgflow-real"):
            argv += ["--workflow", "realistic"]
        log = self.logs / f"{key}-round{round_number}.log"
        others = self.others_cpu()
        say(f"  {row.label} ...")
        try:
            output = self.child_output(argv, args.timeout + args.samples * 2 + 180, stderr_log=log)
            result = next(json.loads(line[7:]) for line in output.splitlines() if line.startswith("RESULT "))
        except (StopIteration, RuntimeError, subprocess.SubprocessError) as exc:
            # A driver that exited says why in the last line of its stderr.
            reason = (
                one_line(exc) if isinstance(exc, RuntimeError) and "exit" not in str(exc) else report_last_line(log)
            )
            say(f"  {row.label}: failed: {reason}")
            if row.steps_per_s:
                row.errors.append(f"round {round_number}: {reason}")  # keep the rounds that worked
            else:
                row.failed = reason  # not tried again: a broken peer must not eat the time of three rounds
            return
        row.add(result)
        self.versions.update({k: v for k, v in (result.get("versions") or {}).items() if k != "pgflow sources"})
        self.raw.append(
            {
                **{k: v for k, v in result.items() if k not in ("latency_ms", "versions")},
                "round": round_number,
                "system": key,
                "others": others.share(),
            }
        )
        if name == "pgflow":
            self.pgflow_sources.add(str((result.get("versions") or {}).get("pgflow sources", "?")))
        latency = (
            f", latency median {result['latency_median_ms']:.1f} ms p99 {result['latency_p99_ms']:.1f} ms"
            if "latency_median_ms" in result
            else ""
        )
        say(
            f"  {row.label}: {result['steps_per_s']:,.0f} steps/s{' (partial)' if result.get('partial') else ''}"
            f"{latency}, peak RSS {result['peak_rss_mb']:.0f} MB"
        )

    def child_output(self, argv: list[str], timeout: float, stderr_log: Path | None = None) -> str:
        """Run a child in its own process group; its stdout, or RuntimeError naming why it failed."""
        err = open(stderr_log, "wb") if stderr_log else subprocess.DEVNULL  # noqa: SIM115 - closed below
        try:
            self.child = subprocess.Popen(
                argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True
            )
            try:
                out, _ = self.child.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.stop_child()
                raise RuntimeError(f"no result within {timeout:.0f} s") from None
            code = self.child.returncode
            self.child = None
        finally:
            if stderr_log:
                err.close()  # type: ignore[union-attr]
        text = out.decode(errors="replace")
        if code != 0:
            raise RuntimeError(f"exit {code}: {text.strip().splitlines()[-1] if text.strip() else ''}")
        return text

    def stop_child(self) -> None:
        if self.child is None:
            return
        signal_group(self.child.pid, signal.SIGTERM)
        try:
            self.child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            signal_group(self.child.pid, signal.SIGKILL)
            self.child.wait()
        self.child = None

    # ---- the report -----------------------------------------------------------------

    def table(self) -> str:
        return report.table(list(self.rows.values())) + "\n\n" + report.same_round_ratios(self.raw, RATIOS)

    def sources_note(self) -> str:
        if len(self.pgflow_sources) > 1:
            return (
                f"; pgflow's sources changed during the run (edited while it ran): "
                f"{len(self.pgflow_sources)} versions were measured ({', '.join(sorted(self.pgflow_sources))})"
            )
        if self.pgflow_sources:
            return f" (sources digest {next(iter(self.pgflow_sources))})"
        return ""

    def section(self, text: str, started_at: datetime, load_before: str, load_after: str) -> str:
        info = report.machine()
        self.versions.setdefault("Python", info["python"])
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "pgflow")
        lines = [
            self.heading,
            "",
            f"Measured {started_at:%Y-%m-%d %H:%M} UTC on {info['nproc']} cores ({info['cpu']}), {info['memory']} "
            f"of memory, Linux {info['kernel']}; load average {load_before} before, {load_after} after; "
            f"processes outside the benchmark (other engineers' test suites share this machine) used "
            f"{self.others_share:.0%} of its CPU during the rounds. pgflow at commit "
            f"{commit}{' with uncommitted changes to pgflow/' if dirty else ''}"
            f"{self.sources_note()}.",
            "",
            "```",
            self.args.command,
            "```",
            "",
            f"{self.args.rounds} interleaved round(s); every figure is the median over the rounds. "
            f"{self.args.runs:,} chains of 3 no-op steps per measurement, {self.args.samples} idle-latency "
            "samples per round.",
            "",
            text,
            "",
            "† partial: the system did not finish every chain within the cap on a throughput phase "
            f"({self.args.timeout:.0f} s); its rate is over the steps it did finish.",
            "",
            "### How each system runs the job",
            "",
        ]
        for row in self.rows.values():
            if row.config:
                errors = f" (failed in {'; '.join(row.errors)})" if row.errors else ""
                lines.append(f"- {row.label}: {row.config}{errors}")
        lines += [
            "",
            "### Versions",
            "",
            ", ".join(
                f"{name} {version}" for name, version in sorted(self.versions.items(), key=lambda item: item[0].lower())
            ),
            "",
            f"PostgreSQL settings: {self.configs.get('PostgreSQL', '?')}.",
            "",
            "### Method",
            "",
            *METHOD,
            "",
            "### Every round",
            "",
            '"others" is the share of the machine\'s CPU that processes outside this benchmark (other '
            "engineers' tests, mostly) used during the measurement: the busy time of /proc/stat minus the "
            "CPU time of this run's own processes, its PostgreSQL and its Redis.",
            "",
            "| round | system | others | steps/s | latency median | p99 | peak RSS | PSS |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for item in self.raw:

            def fmt(name: str, unit: str, item: dict[str, Any] = item) -> str:
                value = item.get(name)
                return f"{value:,.1f}{unit}" if isinstance(value, (int, float)) else "—"

            lines.append(
                f"| {item['round']} | {self.rows[item['system']].label} | {item.get('others', 0):.0%} | "
                f"{fmt('steps_per_s', '')} | "
                f"{fmt('latency_median_ms', ' ms')} | {fmt('latency_p99_ms', ' ms')} | "
                f"{fmt('peak_rss_mb', ' MB')} | {fmt('peak_pss_mb', ' MB')} |"
            )
        return "\n".join(lines) + "\n"


# Issue #35's ratios: (what, numerator row, denominator row or "ceiling", figure).
RATIOS = [
    ("realistic ÷ no-op, --concurrency 8", "pgflow-real-8", "pgflow-8", "steps_per_s"),
    ("realistic ÷ no-op, --concurrency 64", "pgflow-real-64", "pgflow-64", "steps_per_s"),
    ("no-op, --concurrency 64 ÷ best ceiling", "pgflow-64", "ceiling", "steps_per_s"),
    ("no-op, --processes 2 ÷ best ceiling", "pgflow-2p", "ceiling", "steps_per_s"),
    ("idle latency median, pgflow ÷ Celery + Redis", "pgflow", "celery", "latency_median_ms"),
    ("idle latency p99 ÷ its median, pgflow", "pgflow", "pgflow", "p99_over_median"),
]

METHOD = [
    "- Steps/s: the chains are enqueued and committed with no worker running, then one worker (pgflow: also "
    "two) drains them; 3 × chains ÷ seconds from the first step to the last. pgflow's seconds come from its "
    "step rows (first claim to last finish), the peers' from a line each step body appends to a file (first "
    "body start to last body start), which every peer pays alike. After the enqueue and before the workers "
    "start, every database of the server is ANALYZEd: the tables were just emptied and filled, and until "
    "autovacuum reaches them (seconds into a run) PostgreSQL plans with no statistics, which made some of "
    "pgflow's rounds run at a third of their speed for their first seconds; a deployed queue's tables have them.",
    "- Idle latency: the worker has drained the chains and idles for a second; then a 1-step job is enqueued "
    "(autocommit) and its body appends the time; latency is that time minus the time just before the enqueue "
    "call (the whole call counts, its commit included; a body can start before the call returns), with "
    "50–250 ms of random pause between samples so that none locks into a polling loop's phase. One job is "
    "enqueued and run before the samples and not counted, for every system: the driver's first enqueue of the kind "
    "pays one-time costs of its process (pgflow's first autocommit start compiles and prepares its statement), "
    "which a long-lived caller pays once. With 50 samples, p99 is the slowest one. Each worker loads its jobs' "
    "code when it starts: the peers' workers their task modules, "
    "pgflow's worker each installed app's workflows module (the benchmarks run as an app, benchmarks/settings.py), "
    "as in a project; before, pgflow's imported the latency workflow on its first claim, inside the first sample "
    "(10 ms of it). pgflow's driver and workers run on Django's default database OPTIONS, as a new project's "
    "(benchmarks/settings.py; BENCH_PREPARE_THRESHOLD=N sets psycopg's prepare_threshold). --latency-only "
    "measures only this, after 50 chains that warm each worker.",
    "- Realistic bodies (the rows 'realistic bodies'): benchmarks/workflows.py's Realistic, ThreeNoops as a "
    'project writes it: the middle step reads `self.outputs["a"]`, each step writes one INFO log line (to the '
    "worker's log file), two return a small dict; measured like the no-op rows, next to a no-op row of the same "
    "--concurrency. The ratios under the table divide figures of the same round, then take the median.",
    "- Memory: the worker's process tree (found through /proc/<pid>/task/*/children) is sampled every 100 ms "
    "from its start to its stop; the figure is the largest summed VmRSS. RSS counts pages that forked "
    "children share with their parent once per process, so the PSS beside it is the fairer figure for "
    "Celery's prefork pool and django-q2's processes.",
    "- The ceiling: benchmarks/peers/ceiling.py, pgbench on a step table holding 2,000 due rows. '1 statement "
    "a step' claims a due row (FOR UPDATE SKIP LOCKED), marks it done and inserts the next step in one "
    "prepared statement: no queue doing one transaction per step beats it here. 'claim + complete' is the "
    "least a worker taking one step at a time needs, since the body runs between the two: one transaction "
    "claims, a second completes and inserts the next. An engine that batches claims and outcomes can pass "
    'both. "÷ best ceiling" divides by the best ceiling figure of the run.',
    "- Every system uses the same PostgreSQL (its own database on it); Celery's broker is Redis. All log at "
    "WARNING. Each peer comes from PyPI into its own virtualenv (benchmarks/peers/venvs.py pins the versions).",
    "- PostgreSQL runs on its durable defaults (fsync, synchronous_commit and full_page_writes on): a commit "
    "waits for its WAL to reach the disk, as on a production server. (With --fsync-off, the project's test "
    "cluster, all three off: commits cost almost nothing, which flatters systems that make many small "
    "transactions; those figures are an extra, in their own section.)",
    "- Not equal, and worth knowing: the systems do not promise the same. pgflow, DBOS, Procrastinate and "
    "django-q2 keep every step's state in PostgreSQL; Celery here keeps its messages in a Redis that saves "
    "nothing, acknowledges a task when it starts (its default) and stores no results. Worker settings are "
    "each system's usual ones for throughput, not all defaults: pgflow 32 threads (a thread a slot; its "
    "group commit batches what ends together, so more slots mean bigger batches: its row with --concurrency "
    "64 shows by how much); Celery's prefork pool of "
    "one process a core (its default); Procrastinate 8 async jobs; DBOS 32 workflows a worker, its queue "
    "polled every 0.1 s (defaults, no limit and 1 s, gave ~235 steps/s and ~0.5 s of latency); django-q2 "
    "with save_limit 0 (see its line above). The chains are enqueued in whatever way is natural: pgflow's "
    "2,000 runs in one transaction, the others one call each; enqueueing is not timed.",
]


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def report_last_line(path: Path) -> str:
    from benchmarks.peers.common import last_line

    return last_line(path)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ping_redis(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def git(*argv: str) -> str:
    result = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, check=False)
    return result.stdout.strip()


if __name__ == "__main__":
    main()
