"""start() on the latency path: a plain start (no key, no singleton, a first step due now)
is one statement; the rows and the NOTIFY are those of the general path. In autocommit its
commit wakes a worker before it reaches the disk (``PGFLOW["WAKE_BEFORE_FLUSH"]``), and
start() returns once a second statement's commit has flushed it."""

from __future__ import annotations

import logging
import threading
import time

import psycopg
import pytest
from django.db import DatabaseError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from pgflow import store
from pgflow.models import Step, WorkflowRun
from pgflow.store import cursors, starting
from tests import workflows as wf
from tests.connections import other_connection
from tests.rollback import RolledBack

pytestmark = pytest.mark.django_db(transaction=True)


def listener() -> psycopg.Connection:
    conn = other_connection(autocommit=True)
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


@pytest.fixture
def django_defaults():
    """A fresh connection with Django's default OPTIONS (psycopg prepares nothing), as a new
    project's; whatever a test made a pooler lose is forgotten after it."""
    connection.close()
    connection.ensure_connection()
    connection.connection.prepare_threshold = None
    yield
    connection.close()
    cursors._Lost.lost = False


def test_on_djangos_default_options_the_start_alone_is_prepared_from_its_second_run(django_defaults):
    runs = [wf.ThreeSteps.start()]
    assert prepared_starts() == 0  # a connection that runs one start pays no round trip to prepare it
    runs += [wf.ThreeSteps.start() for _ in range(2)]
    assert prepared_starts() == 1
    with connection.cursor() as cursor:  # Django's own statements stay unprepared
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone()[0] == 1
    assert Step.objects.filter(run__in=runs, status="scheduled").count() == 3


def test_prepare_start_false_sends_the_start_unprepared(django_defaults, settings):
    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "PREPARE_START": False}
    runs = [wf.ThreeSteps.start() for _ in range(3)]
    assert prepared_starts() == 0
    assert Step.objects.filter(run__in=runs, status="scheduled").count() == 3


def lose_the_prepared_start() -> None:
    """What a transaction-mode pooler without prepared statements does: the next start's
    server connection lacks the statement psycopg prepared on another (psycopg does not see
    a DEALLOCATE of one name, only of ALL)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements WHERE statement LIKE '%%pg_notify%%'")
        (name,) = cursor.fetchone()
        cursor.execute(f'DEALLOCATE "{name}"')


def test_an_autocommit_start_whose_prepared_statement_a_pooler_lost_runs_unprepared(django_defaults, caplog):
    zeroth, first = wf.ThreeSteps.start(), wf.ThreeSteps.start()
    lose_the_prepared_start()
    with caplog.at_level(logging.WARNING, logger="pgflow"):
        second = wf.ThreeSteps.start()
    assert "PGFLOW['PREPARE_START'] = False" in caplog.text
    third = wf.ThreeSteps.start()
    assert prepared_starts() == 0  # no start of this process is prepared again
    assert sorted(WorkflowRun.objects.values_list("pk", flat=True)) == sorted(
        [zeroth.pk, first.pk, second.pk, third.pk]
    )
    assert Step.objects.filter(run__in=[zeroth, first, second, third], status="scheduled").count() == 4


def test_a_start_in_a_transaction_whose_prepared_statement_a_pooler_lost_fails_and_writes_nothing(django_defaults):
    for _ in range(2):  # a start in a transaction has its own statement (its commit is the caller's)
        with transaction.atomic():
            wf.ThreeSteps.start()
    lose_the_prepared_start()
    with pytest.raises(DatabaseError, match="does not exist"), transaction.atomic():
        wf.ThreeSteps.start()
    assert WorkflowRun.objects.count() == 2
    later = wf.ThreeSteps.start()  # the next transaction's start, unprepared
    assert Step.objects.filter(run=later, status="scheduled").count() == 1
    assert prepared_starts() == 0


def test_a_start_whose_prepared_name_the_server_connection_already_has_runs_unprepared(django_defaults):
    # Another client of the pooler prepared psycopg's first name on this server connection.
    connection.connection.execute("PREPARE _pg3_0 AS SELECT 1", prepare=False)
    runs = [wf.ThreeSteps.start(), wf.ThreeSteps.start()]  # the second is prepared, as _pg3_0
    assert Step.objects.filter(run__in=runs, status="scheduled").count() == 2
    assert cursors._Lost.lost


def test_a_plain_start_in_a_transaction_marked_for_rollback_is_refused_as_any_query():
    with pytest.raises(TransactionManagementError), transaction.atomic():
        transaction.set_rollback(True)
        wf.ThreeSteps.start()
    assert not WorkflowRun.objects.exists()


def session_commits_durably() -> None:
    # The test cluster runs with synchronous_commit off: on for this session, so a setting
    # the start left behind would show.
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit TO on")


def synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def test_an_autocommit_start_wakes_a_worker_before_the_commit_that_makes_it_durable(monkeypatch):
    # The flush's statement made slow: the NOTIFY must come out before it, start() after it.
    monkeypatch.setattr(starting, "_FLUSH", f"SELECT pg_sleep(1), ({starting._FLUSH})")
    returned: list[float] = []
    after: list[str] = []

    def start() -> None:
        session_commits_durably()
        wf.ThreeSteps.start()
        returned.append(time.monotonic())
        after.append(synchronous_commit())
        connection.close()

    with listener() as conn:
        began = time.monotonic()
        thread = threading.Thread(target=start)
        thread.start()
        notes = [time.monotonic() for _ in conn.notifies(timeout=5.0, stop_after=1)]
        thread.join(10)
    assert notes and returned, (notes, returned)
    assert notes[0] - began < 0.9 < returned[0] - began  # woken at once; durable after the flush
    assert after == ["on"]  # the start's SET LOCAL ended with its transaction
    (run,) = WorkflowRun.objects.all()
    assert Step.objects.filter(run=run, status="scheduled").count() == 1


def test_wake_before_flush_false_commits_the_start_durably_first(monkeypatch, settings):
    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "WAKE_BEFORE_FLUSH": False}
    monkeypatch.setattr(starting, "_FLUSH", "SELECT pg_sleep(5)")  # never run on this path
    began = time.monotonic()
    run = wf.ThreeSteps.start()
    assert time.monotonic() - began < 4
    assert Step.objects.filter(run=run, status="scheduled").count() == 1


def test_a_start_in_a_transaction_keeps_the_callers_commit():
    # Inside atomic() the start's rows commit with the caller's, on the caller's terms.
    session_commits_durably()
    with transaction.atomic():
        run = wf.ThreeSteps.start()
        assert synchronous_commit() == "on"
    assert Step.objects.filter(run=run, status="scheduled").count() == 1


def test_a_start_in_a_rolled_back_transaction_leaves_nothing():
    # The waking path commits on its own: run inside the caller's atomic(), it would leave a
    # run that the caller's rollback cannot take back, and a NOTIFY already sent.
    with listener() as conn:
        with pytest.raises(RolledBack), transaction.atomic():
            assert wf.ThreeSteps.start().pk is not None
            raise RolledBack
        notes = list(conn.notifies(timeout=0.5, stop_after=1))
    assert notes == []
    assert not WorkflowRun.objects.exists() and not Step.objects.exists()


def test_the_plain_start_has_room_for_new_columns_within_psycopgs_cached_parameters():
    # psycopg parses a statement again on every execution past MAX_CACHED_STATEMENT_PARAMS
    # (50): the plain start's constants are literals, so a new column costs one of twenty spare.
    from psycopg._queries import MAX_CACHED_STATEMENT_PARAMS

    sql = starting._plain_start_statement().sql
    assert sql.count("%s") - sql.count("%%s") <= MAX_CACHED_STATEMENT_PARAMS - 20
