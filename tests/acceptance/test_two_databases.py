"""pgflow in a database of its own (``PGFLOW["DATABASE"]``), the project's models in another:
real processes (migrate, a shell that starts and signals, a worker) on two real databases,
and not one of pgflow's tables in the project's."""

from __future__ import annotations

import os
import subprocess
import sys

from django.db import connection

from pgflow.models import WorkflowRun
from tests.acceptance.conftest import ROOT, query
from tests.invariants import assert_exactly_once


def manage(database: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.two_databases_settings",
            "PGFLOW_TEST_DB_NAME": connection.settings_dict["NAME"],
            "PGFLOW_PROJECT_DB_NAME": database,
            "PGFLOW_SWEEP_SECONDS": "0.5",
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=180,
    )


def tables(database: str) -> set[str]:
    return {str(name) for (name,) in query(database, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def test_runs_start_signal_and_finish_in_pgflows_own_database(new_database):
    migrated = manage(new_database, "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stderr
    project = tables(new_database)
    assert "auth_user" in project and "shop_order" in project  # the project's own tables are here
    assert not {name for name in project if name.startswith("pgflow_")}  # and none of pgflow's

    checked = manage(new_database, "check", "--fail-level", "ERROR")
    assert checked.returncode == 0, checked.stderr

    started = manage(
        new_database,
        "shell",
        "-c",
        "from tests import workflows as wf\n"
        "runs = [wf.ThreeSteps.start() for _ in range(20)] + [wf.WaitsForPayment.start()]\n"
        "print(' '.join(str(run.pk) for run in runs))",
    )
    assert started.returncode == 0, started.stderr
    ids = [int(pk) for pk in started.stdout.splitlines()[-1].split()]
    assert WorkflowRun.objects.filter(pk__in=ids).count() == 21  # in the test database: pgflow's

    drained = manage(new_database, "pgflow_worker", "--burst", "--concurrency", "4")
    assert drained.returncode == 0, drained.stderr
    signalled = manage(
        new_database,
        "shell",
        "-c",
        f"import pgflow\nfrom pgflow.models import WorkflowRun\n"
        f"pgflow.signal(WorkflowRun.objects.get(pk={ids[-1]}), 'payment', {{'amount': 5}})",
    )
    assert signalled.returncode == 0, signalled.stderr
    drained = manage(new_database, "pgflow_worker", "--burst", "--concurrency", "4")
    assert drained.returncode == 0, drained.stderr

    assert set(WorkflowRun.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"finished"}
    paid = WorkflowRun.objects.get(pk=ids[-1]).steps.get(step_name="charge").output
    assert paid == {"paid": {"amount": 5}}
    assert not {name for name in tables(new_database) if name.startswith("pgflow_")}
    assert assert_exactly_once() == 21


def test_a_missing_router_is_a_system_check_error(new_database):
    checked = manage(new_database, "check", env={"PGFLOW_NO_ROUTER": "1"})
    assert checked.returncode != 0
    assert "pgflow.E005" in checked.stderr
    assert "PGFLOW['DATABASE'] is 'pgflow', but DATABASE_ROUTERS send pgflow's models to 'default'" in checked.stderr
    assert "pgflow.db.Router" in checked.stderr


def test_the_dashboard_and_the_command_line_read_pgflows_database(new_database):
    assert manage(new_database, "migrate", "--no-input").returncode == 0
    # An operator in the project's database (auth is the project's), pages over pgflow's.
    pages = manage(
        new_database,
        "shell",
        "-c",
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "from tests import workflows as wf\n"
        "from tests.dashboard_support import changelist_url, insights_url, run_url\n"
        "from django.urls import reverse\n"
        "run = wf.WaitsForPayment.start()\n"
        "user = User.objects.create_superuser('ops', 'ops@example.com', 'pw')\n"
        "client = Client()\n"
        "client.force_login(user)\n"
        "for url in (changelist_url(), run_url(run), insights_url(), insights_url(as_json=True),\n"
        "            reverse('admin:pgflow_queuestate_changelist')):\n"
        "    response = client.get(url)\n"
        "    print(response.status_code, url, b'WaitsForPayment' in response.content)\n",
    )
    assert pages.returncode == 0, pages.stderr
    lines = [line.split() for line in pages.stdout.splitlines() if line[:3].isdigit()]
    assert [status for status, *_ in lines] == ["200"] * 5, pages.stdout
    assert lines[0][2] == lines[1][2] == "True"  # the run list and the run page show the run
    listed = manage(new_database, "pgflow", "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert '"tests.workflows.WaitsForPayment"' in listed.stdout
