#!/usr/bin/env python3
"""The README's two commands, with nothing but Python 3.11+ installed by hand.

    python3 dev.py demo    install into .venv, then run the demo (worker, django-q2, admin)
    python3 dev.py test    install into .venv, then run the whole test suite on a real PostgreSQL

Standard library only: it runs before anything is installed.

With no DATABASE_URL, the command starts the project's private PostgreSQL (or reuses the
one already running) and says which server it is; when the command ends (done, Ctrl-C or
SIGTERM) it stops every process it started, and the cluster too if it started it.
PGFLOW_DEV_PYTHON=<python> skips the install and runs with that interpreter (the tests use it).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
MIN_PYTHON = (3, 11)


def say(message: str) -> None:
    print(f"[pgflow] {message}", flush=True)


class Terminated(Exception):
    """SIGTERM (docker stop, systemd, timeout): stop like Ctrl-C."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def run(argv: list[str | Path], env: dict[str, str] | None = None) -> int:
    """Run a child in a process group of its own, so that a signal reaches it once, from us:
    on Ctrl-C or SIGTERM (which `timeout` sends to our whole group) it gets SIGINT, stops as
    on Ctrl-C, and has a minute to do so."""
    child = subprocess.Popen([str(a) for a in argv], cwd=ROOT, env=env, process_group=0)
    try:
        return child.wait()
    except (KeyboardInterrupt, Terminated):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        raise


def venv(folder: str, python: str, extras: str, django: str | None = None) -> Path:
    """Create (or reuse) a virtualenv and install the project into it; returns its python."""
    if os.environ.get("PGFLOW_DEV_PYTHON"):
        return Path(os.environ["PGFLOW_DEV_PYTHON"])
    path = ROOT / folder
    bin_python = path / "bin" / "python"
    if not bin_python.exists():
        say(f"creating {folder} with {python}")
        if run([python, "-m", "venv", path]) != 0:
            sys.exit(f"[pgflow] could not create a virtualenv with {python}")
    say(f"installing django-pgflow[{extras}] into {folder} (first run takes a minute)")
    quiet = ["-q", "--disable-pip-version-check"]
    argv: list[str | Path] = [bin_python, "-m", "pip", "install", *quiet, "-e", f".[{extras}]"]
    if django:
        argv.append(django)
    if run(argv) != 0:
        sys.exit(f"[pgflow] pip install failed in {folder}")
    return bin_python


def find_python(preferred: tuple[int, int]) -> str | None:
    """A Python 3.12+ (Django 6's floor) for a Django 6 leg, under pyenv or on the PATH, that
    really runs (a pyenv shim for a version that is not selected exists but fails): the
    preferred minor version first, else any other, so a machine with only one of 3.12 / 3.13
    still runs every leg."""
    pyenv = os.path.expanduser("~/.pyenv/versions")
    major, minor = preferred
    candidates = sorted(glob.glob(f"{pyenv}/{major}.{minor}.*/bin/python3"), reverse=True)
    candidates += [found for found in [shutil.which(f"python{major}.{minor}")] if found]
    candidates += sorted(glob.glob(f"{pyenv}/3.1[2-9]*/bin/python3"), reverse=True)
    candidates += [found for name in ("python3.13", "python3.12") if (found := shutil.which(name))]
    for candidate in candidates:
        probe = subprocess.run(
            [candidate, "-c", "import sys, venv; print(sys.version_info >= (3, 12))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    return None


# The Django releases tested besides 5.2 LTS (which gets the whole suite, browser included,
# on the Python running dev.py): each in a virtualenv of its own, on the Python it is
# paired with. The newest release also runs the acceptance tests (real worker processes),
# less LTS_ONLY_ACCEPTANCE; the one between gets unit and integration, which keeps CI well
# inside its time budget.
NEWER_DJANGOS = (
    (".venv-django60", (3, 12), "Django>=6.0,<6.1", ["tests/unit", "tests/integration"]),
    (".venv-django61", (3, 13), "Django>=6.1,<6.2", ["tests/unit", "tests/integration", "tests/acceptance"]),
)

# The acceptance files only the 5.2 leg runs: load, crashes, leases, limits, schedules and
# process supervision, whose subject is the engine's SQL and the operating system, not
# anything a Django or Python release changes (unit and integration cover that code on every
# leg). They are half the acceptance time. The rest also runs on the newest Django: the
# django.tasks backend, async bodies, the dashboard and the MCP over HTTP, migrate and the
# checks, django-tenants, Django's connection handling through a restart, a silent socket and
# PgBouncer, logging, deferred fields. A new acceptance file runs on both until it is listed.
LTS_ONLY_ACCEPTANCE = (
    "tests/acceptance/test_adversarial.py",
    "tests/acceptance/test_composition.py",
    "tests/acceptance/test_failover.py",
    "tests/acceptance/test_flow_control.py",
    "tests/acceptance/test_processes.py",
    "tests/acceptance/test_promises.py",
    "tests/acceptance/test_readonly.py",
    "tests/acceptance/test_reliability.py",
    "tests/acceptance/test_schedules.py",
    "tests/acceptance/test_worker_presence.py",
    "tests/acceptance/test_workers.py",
)


def leg_arguments(paths: list[str]) -> list[str]:
    """pytest's paths for a newer Django's leg: its folders, less the LTS-only acceptance files."""
    if "tests/acceptance" not in paths:
        return list(paths)
    return [*paths, *(f"--ignore={path}" for path in LTS_ONLY_ACCEPTANCE)]


def timed(label: str, argv: list[str | Path], env: dict[str, str]) -> int:
    """run(), then say how long it took: CI has a time budget, and each leg's share shows."""
    started = time.monotonic()
    status = run(argv, env)
    minutes, seconds = divmod(int(time.monotonic() - started), 60)
    say(f"{label}: {'passed' if status == 0 else 'FAILED'} in {minutes}m{seconds:02d}s")
    return status


class Database:
    """The DATABASE_URL for a command's children: the configured one, or the private
    cluster, started here (and so stopped here) unless it was already running."""

    def __init__(self, python: Path) -> None:
        self.python = python
        self.started = False

    def __enter__(self) -> dict[str, str]:
        env = dict(os.environ)
        result = subprocess.run(
            [str(self.python), "-m", "example_project.pgcluster", "start"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            sys.exit(f"[pgflow] cannot start the private PostgreSQL: {result.stderr.strip()}")
        cluster = json.loads(result.stdout)
        if cluster["url"] is None:
            say("PostgreSQL: DATABASE_URL (the private cluster is not used)")
            return env
        say(f"PostgreSQL: {cluster['description']}")
        self.started = cluster["started"]
        env["DATABASE_URL"] = cluster["url"]
        return env

    def __exit__(self, *exc: object) -> None:
        if not self.started:
            return
        # A second Ctrl-C or SIGTERM must not cut the stop short.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            result = subprocess.run(
                [str(self.python), "-m", "example_project.pgcluster", "stop"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
            )
            say((result.stdout or result.stderr).strip())
        finally:
            signal.signal(signal.SIGINT, previous[0])
            signal.signal(signal.SIGTERM, previous[1])


def test(args: list[str]) -> int:
    python = venv(".venv", sys.executable, "dev,demo")
    say("checks: ruff, mypy, makemigrations --check, system checks")
    for argv in (
        [python, "-m", "ruff", "check", "."],
        [python, "-m", "ruff", "format", "--check", "."],
        [python, "-m", "mypy", "pgflow", "pgflow_dashboard"],
        [python, "manage.py", "makemigrations", "--check", "--dry-run"],
        [python, "manage.py", "check", "--fail-level", "WARNING"],
    ):
        if run(argv) != 0:
            say(f"FAILED: {' '.join(str(a) for a in argv[1:])}")
            return 1
    with Database(python) as env:
        label = "Django 5.2, Python {}.{}: the whole suite".format(*sys.version_info[:2])
        say(f"tests on {label}")
        status = timed(label, [python, "-m", "pytest", *args], env)
        if status != 0:
            return status
        for folder, minor, django, paths in NEWER_DJANGOS:
            found = find_python(minor)
            if found is None:
                if os.environ.get("PGFLOW_REQUIRE_ALL_DJANGOS"):  # CI: a leg never skips unseen
                    say(f"FAILED: no Python 3.12+ found for the {django} run")
                    return 1
                say(f"no Python 3.12+ found: the {django} run is skipped")
                continue
            python_n = venv(folder, found, "dev,demo", django)
            label = f"{django}, {found}: {', '.join(paths)}"
            if "tests/acceptance" in paths:
                label += f" (less {len(LTS_ONLY_ACCEPTANCE)} acceptance files only 5.2 runs)"
            say(f"tests on {label}")
            status = timed(label, [python_n, "-m", "pytest", *leg_arguments(paths), *args], env)
            if status != 0:
                return status
        return 0


def demo(args: list[str]) -> int:
    python = venv(".venv", sys.executable, "dev,demo")
    with Database(python) as env:
        say("starting the demo (the first start also writes a week of history for the dashboard)")
        return run([python, "manage.py", "pgflow_demo", *args], env)


def main() -> int:
    if sys.version_info < MIN_PYTHON:
        sys.exit("[pgflow] needs Python {}.{} or newer".format(*MIN_PYTHON))
    commands = {"test": test, "demo": demo}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: python3 dev.py {{{'|'.join(commands)}}} [args]")
    # Both set here: a command started in the background inherits SIGINT ignored, and a
    # handler (unlike "ignored") is not passed on to the children, which then stop on Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return commands[sys.argv[1]](sys.argv[2:])
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 143


if __name__ == "__main__":
    sys.exit(main())
