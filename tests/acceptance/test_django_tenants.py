"""pgflow in a django-tenants project (a PostgreSQL schema per tenant), as real processes:
``migrate_schemas``, a shell that makes two tenants with their own rows and starts runs in
each, and a burst worker. Each run's body, condition, wait and async bodies read their own
tenant's rows, never the other's (tests/tenants_settings.py, tests/tenants_app)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from tests.acceptance.conftest import ROOT

pytestmark = pytest.mark.timeout(600)

SHELL = """
from django_tenants.utils import schema_context
from tests.tenants_app.customers.models import Client, Domain
from tests.tenants_app.notes.models import Note
from tests.tenants_app.workflows import ReadsNotes

for schema in ("acme", "globex"):
    client = Client.objects.create(schema_name=schema, name=schema)  # its schema and tables
    Domain.objects.create(domain=f"{schema}.localhost", tenant=client, is_primary=True)
    with schema_context(schema):
        Note.objects.create(text=f"{schema}'s note")
        runs = [ReadsNotes.start() for _ in range(2)]
        print("RUNS", schema, " ".join(str(run.pk) for run in runs))
print("RUNS public", ReadsNotes.start().pk)  # no tenant current: a run without one
"""


def _server() -> dict[str, object]:
    params = connection.get_connection_params()
    return {k: v for k, v in params.items() if k in ("host", "port", "user", "password")}


@pytest.fixture
def tenants_db(transactional_db: None) -> Iterator[str]:
    name = f"{connection.settings_dict['NAME']}_tenants"
    with psycopg.connect(**_server(), dbname="postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(**_server(), dbname="postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage(database: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.tenants_settings",
            "PGFLOW_TENANTS_DB_NAME": database,
            "PYTHONUNBUFFERED": "1",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}"
    return done


def test_each_tenants_steps_read_their_own_schema(tenants_db):
    manage(tenants_db, "migrate_schemas", "--shared", "--noinput")
    started = manage(tenants_db, "shell", "-c", SHELL)
    # Each schema's creation prints its migrations: the runs are on the lines marked RUNS.
    lines = dict(line.split(" ", 2)[1:] for line in started.stdout.splitlines() if line.startswith("RUNS "))
    ids = {schema: [int(pk) for pk in lines[schema].split()] for schema in ("acme", "globex", "public")}

    manage(tenants_db, "pgflow_worker", "--burst")

    with psycopg.connect(**_server(), dbname=tenants_db) as conn:
        runs = dict(conn.execute("SELECT id, tenant FROM pgflow_run").fetchall())
        status = dict(conn.execute("SELECT id, status FROM pgflow_run").fetchall())
        errors = conn.execute(
            "SELECT run_id, step_name, error_class, error_message FROM pgflow_step WHERE error_class IS NOT NULL"
        ).fetchall()
        outputs = {
            (run, name): output
            for run, name, output in conn.execute(
                "SELECT run_id, step_name, output FROM pgflow_step WHERE status = 'completed'"
            ).fetchall()
        }
        notes = {
            schema: sorted(text for (text,) in conn.execute(f"SELECT text FROM {schema}.notes_note").fetchall())
            for schema in ("acme", "globex")
        }
        public_notes = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_name = 'notes_note'"
        ).fetchone()[0]
    assert public_notes == 0  # the notes are the tenants' own
    for schema, other in (("acme", "globex"), ("globex", "acme")):
        for run in ids[schema]:
            assert runs[run] == schema
            assert status[run] == "finished", (status, errors)
            # The body and the async bodies see the tenant's note and what its wait wrote,
            # in its own schema, and nothing of the other tenant's.
            assert outputs[(run, "body")] == {"notes": [f"{schema}'s note"]}
            for name in ("after_wait", "async_body", "async_through_sync"):
                seen = outputs[(run, name)]["notes"]
                assert f"{schema}'s note" in seen and f"{other}'s note" not in seen, (name, seen)
                assert f"wait of run {run}" in seen
        assert notes[schema] == sorted([f"{schema}'s note", *(f"wait of run {run}" for run in ids[schema])])
    # A run started in the public schema has no tenant and enters no tenant's schema: its
    # cancel_if finds no notes table in the public schema, so none of its bodies ran.
    (public,) = ids["public"]
    assert runs[public] is None
    assert status[public] != "finished" and not [name for run, name in outputs if run == public]
