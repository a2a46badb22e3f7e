"""One virtualenv per peer under benchmarks/.work/peers-venv/, from PyPI, pinned.

The peers never touch the project's own environment, and one peer's dependencies never
constrain another's. A venv whose recorded requirements match is reused as it is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TextIO

PSYCOPG = "psycopg[binary]==3.3.9"
# The versions measured in benchmarks/RESULTS.md; bump them here, deliberately.
REQUIREMENTS: dict[str, list[str]] = {
    "celery": ["celery[redis]==5.7.0"],
    "procrastinate": ["procrastinate==3.10.0", PSYCOPG],
    "dbos": ["dbos==3.4.0", PSYCOPG],
    "django-q2": ["django-q2==1.11.1", "Django==5.2.19", PSYCOPG],
}


class InstallError(RuntimeError):
    """A peer's venv could not be made; the message is one line."""


def python(root: Path, peer: str) -> Path:
    return root / peer / "bin" / "python"


def ensure(root: Path, peer: str, log: Path) -> Path:
    """The python of ``peer``'s venv, created and installed when needed."""
    folder = root / peer
    wanted = "\n".join(REQUIREMENTS[peer]) + "\n"
    marker = folder / "requirements.installed"
    if python(root, peer).exists() and marker.exists() and marker.read_text() == wanted:
        return python(root, peer)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        _run([sys.executable, "-m", "venv", "--clear", str(folder)], out, "venv")
        _run(
            [
                str(python(root, peer)),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--quiet",
                *REQUIREMENTS[peer],
            ],
            out,
            "pip install",
        )
    marker.write_text(wanted)
    return python(root, peer)


def _run(argv: list[str], out: TextIO, what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    print(result.stdout, result.stderr, sep="\n", file=out)
    if result.returncode != 0:
        lines = [
            line.strip()
            for line in result.stderr.splitlines()
            if line.strip() and not line.startswith("WARNING: Location")
        ]
        raise InstallError(f"{what} failed: {lines[-1] if lines else 'exit ' + str(result.returncode)}"[:200])
