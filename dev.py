#!/usr/bin/env python3
"""The README's two commands, with nothing but Python 3.11+ installed by hand.

    python3 dev.py demo    install into .venv, then run the demo (worker, django-q2, admin)
    python3 dev.py test    install into .venv, then run the whole test suite on a real PostgreSQL

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
MIN_PYTHON = (3, 11)


def say(message: str) -> None:
    print(f"[pgflow] {message}", flush=True)


def run(argv: list[str | Path], **kwargs: object) -> int:
    return subprocess.call([str(a) for a in argv], cwd=ROOT, **kwargs)  # type: ignore[arg-type]


def venv(folder: str, python: str, extras: str, django: str | None = None) -> Path:
    """Create (or reuse) a virtualenv and install the project into it; returns its python."""
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


def newer_python() -> str | None:
    """A Python 3.12+ for the Django 6 run, under pyenv or on the PATH, that really runs
    (a pyenv shim for a version that is not selected exists but fails)."""
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")), reverse=True)
    candidates += [found for name in ("python3.13", "python3.12") if (found := shutil.which(name))]
    for candidate in candidates:
        probe = subprocess.run([candidate, "-c", "import sys, venv; print(sys.version_info >= (3, 12))"],
                               capture_output=True, text=True, check=False)
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    return None


def test(args: list[str]) -> int:
    python = venv(".venv", sys.executable, "dev")
    say("checks: ruff, mypy, makemigrations --check, system checks")
    for argv in (
        [python, "-m", "ruff", "check", "."],
        [python, "-m", "mypy", "pgflow", "pgflow_dashboard"],
        [python, "manage.py", "makemigrations", "--check", "--dry-run"],
        [python, "manage.py", "check", "--fail-level", "WARNING"],
    ):
        if run(argv) != 0:
            say(f"FAILED: {' '.join(str(a) for a in argv[1:])}")
            return 1
    say("tests on Django 5.2 (Python {}.{})".format(*sys.version_info[:2]))
    status = run([python, "-m", "pytest", *args])
    if status != 0:
        return status
    newer = newer_python()
    if newer is None:
        say("no Python 3.12+ found: the Django 6 run is skipped")
        return 0
    python6 = venv(".venv-django6", newer, "dev", "Django>=6.0,<6.1")
    say(f"tests on Django 6 ({newer}): unit and integration")
    return run([python6, "-m", "pytest", "tests/unit", "tests/integration", *args])


def demo(args: list[str]) -> int:
    python = venv(".venv", sys.executable, "dev,demo")
    say("starting the demo (the first start also writes a week of history for the dashboard)")
    return run([python, "manage.py", "pgflow_demo", *args])


def main() -> int:
    if sys.version_info < MIN_PYTHON:
        sys.exit("[pgflow] needs Python {}.{} or newer".format(*MIN_PYTHON))
    commands = {"test": test, "demo": demo}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: python3 dev.py {{{'|'.join(commands)}}} [args]")
    try:
        return commands[sys.argv[1]](sys.argv[2:])
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
