"""A project left on startproject's SQLite: `check` refuses it with pgflow.E004 and
`migrate` stops before it writes anything (it used to die half-way through with
"add_index() got an unexpected keyword argument 'concurrently'"). Real processes, a real
settings module."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SETTINGS = """
from example_project.settings import *  # noqa: F403

DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": {name!r}}}}}
"""


def manage(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "sqlite_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *argv], env=env, capture_output=True, text=True, timeout=120
    )


def test_check_and_migrate_refuse_sqlite_before_writing(tmp_path):
    database = tmp_path / "db.sqlite3"
    (tmp_path / "sqlite_settings.py").write_text(textwrap.dedent(SETTINGS.format(name=str(database))))
    checked = manage(tmp_path, "check")
    assert checked.returncode != 0
    assert "pgflow.E004" in checked.stderr and "pgflow needs PostgreSQL" in checked.stderr, checked.stderr
    migrated = manage(tmp_path, "migrate")
    assert migrated.returncode != 0
    assert "pgflow.E004" in migrated.stderr, migrated.stderr
    if database.exists():
        tables = sqlite3.connect(database).execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        assert tables == []
