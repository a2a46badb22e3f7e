"""start() on the latency path: a plain start (no key, no singleton, a first step due now)
is one statement, so an autocommit start() is one round trip and one commit; the rows and
the NOTIFY are those of the general path."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from pgflow import store
from pgflow.models import Step, WorkflowRun
from tests import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


def listener() -> psycopg.Connection:
    params = {
        k: v
        for k, v in connection.get_connection_params().items()
        if k in ("host", "port", "dbname", "user", "password")
    }
    conn = psycopg.connect(**params, autocommit=True)
    conn.execute(f"LISTEN {store.CHANNEL}")
    return conn


def test_a_plain_start_is_one_statement_with_its_rows_and_notify():
    with listener() as conn:
        with CaptureQueriesContext(connection) as queries:
            run = wf.ThreeSteps.start(input={"a": 1})
        notes = [n.payload for n in conn.notifies(timeout=2.0, stop_after=1)]
    assert len(queries) == 1, [q["sql"] for q in queries]
    (step,) = Step.objects.filter(run=run)
    assert notes == [f"workflows {step.pk}"]  # the queue and the attempt, for a claim by its id
    run.refresh_from_db()
    assert (run.status, run.current_step, run.input, run.key) == ("running", "one", {"a": 1}, None)
    assert (step.step_name, step.attempt, step.status, step.queue, step.gated) == (
        "one",
        1,
        "scheduled",
        "workflows",
        False,
    )
    assert step.scheduled_at == step.created_at == run.created_at
    (started,) = run.events.all()
    assert (started.event, started.actor, started.details, started.step_id) == (
        "started",
        "system",
        {"workflow": "tests.workflows.ThreeSteps", "key": None},
        None,
    )


def test_a_start_with_a_key_keeps_its_savepoint_path():
    first = wf.ThreeSteps.start(key="k-1")
    assert wf.ThreeSteps.start(key="k-1").pk == first.pk
    assert Step.objects.filter(run=first).count() == 1


def prepared_starts() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%%pg_notify%%'")
        return cursor.fetchone()[0]


def test_the_plain_start_is_prepared_once_and_seen_as_any_query():
    connection.ensure_connection()
    assert connection.connection.prepare_threshold is not None  # the project's OPTIONS
    seen = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        runs = [wf.ThreeSteps.start() for _ in range(3)]
    assert len(seen) == 3 and all("pg_notify" in sql for sql in seen)  # execute wrappers see it
    assert prepared_starts() == 1  # one statement, prepared on the first start
    assert Step.objects.filter(run__in=runs, status="scheduled").count() == 3


def test_where_django_prepares_nothing_the_start_is_not_prepared():
    connection.close()
    connection.ensure_connection()
    connection.connection.prepare_threshold = None  # Django's default: a transaction-mode pooler
    try:
        runs = [wf.ThreeSteps.start() for _ in range(3)]
        assert prepared_starts() == 0
        assert Step.objects.filter(run__in=runs, status="scheduled").count() == 3
    finally:
        connection.close()


def test_a_plain_start_in_a_transaction_marked_for_rollback_is_refused_as_any_query():
    with pytest.raises(TransactionManagementError), transaction.atomic():
        transaction.set_rollback(True)
        wf.ThreeSteps.start()
    assert not WorkflowRun.objects.exists()
