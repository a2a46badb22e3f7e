"""A new project's first hour, with real worker processes on a database of its own: a
worker started before migrate, a project without django-q2, a run whose class does not
import."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pgflow
from tests.acceptance.conftest import ROOT, query

WITHOUT_DJANGO_Q = "tests.acceptance.settings_without_django_q"


def manage(
    database: str, *args: str, settings: str = "example_project.settings", timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PGFLOW_TEST_DB_NAME": database,
        "DJANGO_SETTINGS_MODULE": settings,
        "PGFLOW_SWEEP_SECONDS": "0.3",
        "PGFLOW_POLL_SECONDS": "0.5",
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_a_worker_started_before_migrate_says_so_and_exits(new_database: str) -> None:
    started = time.monotonic()
    done = manage(new_database, "pgflow_worker", timeout=60)
    assert done.returncode != 0
    assert time.monotonic() - started < 30  # no retrying for ever
    lines = [line for line in done.stderr.splitlines() if "manage.py migrate" in line]
    assert len(lines) == 1, done.stderr
    assert "pgflow.0001_initial" in lines[0] and "retrying" not in done.stderr


def test_a_worker_on_an_unapplied_pgflow_migration_names_it(new_database: str) -> None:
    # The database one migration behind pgflow's latest, whichever that is.
    *_, before, latest = sorted(path.stem for path in Path(pgflow.__file__).parent.glob("migrations/0*.py"))
    assert manage(new_database, "migrate", "pgflow", before, settings=WITHOUT_DJANGO_Q).returncode == 0
    done = manage(new_database, "pgflow_worker", settings=WITHOUT_DJANGO_Q, timeout=60)
    assert done.returncode != 0
    assert f"lacks 1 migration(s) (pgflow.{latest}): run `python manage.py migrate`" in done.stderr


def test_without_django_q_the_worker_runs_cleanly_and_names_a_class_that_does_not_import(new_database: str) -> None:
    assert manage(new_database, "migrate", settings=WITHOUT_DJANGO_Q).returncode == 0
    start = "from tests.workflows import ThreeSteps; ThreeSteps.start(); ThreeSteps.start(key='gone')"
    assert manage(new_database, "shell", "-c", start, settings=WITHOUT_DJANGO_Q).returncode == 0
    query(new_database, "UPDATE pgflow_run SET workflow_class = 'orders.flows.Checkout' WHERE key = 'gone'")
    env = {
        **os.environ,
        "PGFLOW_TEST_DB_NAME": new_database,
        "DJANGO_SETTINGS_MODULE": WITHOUT_DJANGO_Q,
        "PGFLOW_SWEEP_SECONDS": "0.3",
        "PGFLOW_POLL_SECONDS": "0.5",
        "PYTHONUNBUFFERED": "1",
    }
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "pgflow_worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            statuses = sorted(row[0] for row in query(new_database, "SELECT status FROM pgflow_run"))
            if statuses == ["finished", "paused"]:
                break
            time.sleep(0.2)
        assert statuses == ["finished", "paused"]
        time.sleep(1.5)  # several sweeps
    finally:
        worker.terminate()
        output = worker.communicate(timeout=60)[0]
    assert worker.returncode == 0, output
    assert "sweep failed" not in output and "django_q" not in output
    [line] = [line for line in output.splitlines() if "does not import" in line]
    assert " ERROR " in line
    assert "orders.flows.Checkout" in line and "ModuleNotFoundError: No module named 'orders'" in line
    assert "AppConfig.ready()" in line


def test_a_worker_whose_tables_went_missing_says_so_and_exits(new_database: str) -> None:
    # The migrations are recorded, the table is not there (restored from a partial dump, say).
    assert manage(new_database, "migrate", settings=WITHOUT_DJANGO_Q).returncode == 0
    query(new_database, "DROP TABLE pgflow_step CASCADE")
    done = manage(new_database, "pgflow_worker", settings=WITHOUT_DJANGO_Q, timeout=60)
    assert done.returncode == 1
    [line] = [line for line in done.stderr.splitlines() if "manage.py migrate" in line]
    assert "pgflow's tables are missing or out of date" in line and 'relation "pgflow_step_live" does not exist' in line
    assert "retrying" not in done.stderr
