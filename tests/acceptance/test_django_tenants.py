"""pgflow in a django-tenants project (a PostgreSQL schema per tenant), as real processes:
``migrate_schemas``, a shell that makes two tenants with their own rows and starts runs in
each, and a burst worker. Each run's body, condition, wait and async bodies read their own
tenant's rows, never the other's (tests/tenants_settings.py, tests/tenants_app)."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from tests.acceptance.conftest import ROOT, query, server

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


def test_each_tenants_steps_read_their_own_schema(new_database):
    manage(new_database, "migrate_schemas", "--shared", "--noinput")
    started = manage(new_database, "shell", "-c", SHELL)
    # Each schema's creation prints its migrations: the runs are on the lines marked RUNS.
    lines = dict(line.split(" ", 2)[1:] for line in started.stdout.splitlines() if line.startswith("RUNS "))
    ids = {schema: [int(pk) for pk in lines[schema].split()] for schema in ("acme", "globex", "public")}

    manage(new_database, "pgflow_worker", "--burst")

    with psycopg.connect(**server(), dbname=new_database) as conn:
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
            # in its own schema, and nothing of the other tenant's. The body runs before its
            # own wait, but not always before the other run's of its tenant: that note it may see.
            own = {f"{schema}'s note", *(f"wait of run {r}" for r in ids[schema] if r != run)}
            body = outputs[(run, "body")]["notes"]
            assert f"{schema}'s note" in body and set(body) <= own, body
            for name in ("after_wait", "async_body", "async_through_sync"):
                seen = outputs[(run, name)]["notes"]
                assert f"{schema}'s note" in seen and f"{other}'s note" not in seen, (name, seen)
                assert f"wait of run {run}" in seen
        assert notes[schema] == sorted([f"{schema}'s note", *(f"wait of run {run}" for run in ids[schema])])
    # A run started in the public schema has no tenant and enters no tenant's schema: its
    # cancel_if finds no notes table in the public schema, so none of its bodies ran (what
    # the run should say then: the test below).
    (public,) = ids["public"]
    assert runs[public] is None
    assert status[public] != "finished" and not [name for run, name in outputs if run == public]


def test_a_public_schema_run_whose_cancel_if_fails_pauses_naming_the_error(new_database):
    manage(new_database, "migrate_schemas", "--shared", "--noinput")
    start = "from tests.tenants_app.workflows import ReadsNotes\nprint('RUN', ReadsNotes.start().pk)"
    started = manage(new_database, "shell", "-c", start)  # no tenant current: the public schema
    [run] = [int(line.split()[1]) for line in started.stdout.splitlines() if line.startswith("RUN ")]

    worker = manage(new_database, "pgflow_worker", "--burst")

    [(status, reason)] = query(new_database, f"SELECT status, paused_reason FROM pgflow_run WHERE id = {run}")
    [(step_status, error_class, message)] = query(
        new_database, f"SELECT status, error_class, error_message FROM pgflow_step WHERE run_id = {run}"
    )
    assert (status, step_status) == ("paused", "failed"), (status, step_status, worker.stderr[-3000:])
    assert reason.startswith("a cancel_if / skip_if of step 'body' failed: ProgrammingError: "), reason
    assert 'relation "notes_note" does not exist' in reason
    assert error_class.endswith("ProgrammingError") and 'relation "notes_note" does not exist' in message
    assert "current transaction is aborted" not in worker.stderr
