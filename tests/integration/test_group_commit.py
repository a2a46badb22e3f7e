"""store.finish_many: the worker's group commit applies exactly what finish would."""

from __future__ import annotations

import psycopg
import pytest

from pgflow import store
from pgflow.core.flow import Outcome
from pgflow.models import Step, WorkflowRun
from tests import workflows as wf
from tests.connections import other_connection

pytestmark = pytest.mark.django_db


def claim_all():
    return {c.run_id: c for c in store.claim(worker="t", queues=["workflows"], limit=100)}


@pytest.mark.parametrize(
    "where",
    [
        "in the caller's atomic()",
        pytest.param("on its own (the worker's committer)", marks=pytest.mark.django_db(transaction=True)),
    ],
)
def test_a_batch_applies_each_outcome_as_finish_would(where):
    advancing = wf.ThreeSteps.start()
    last = wf.FlowVerbs.start()
    paused_meanwhile = wf.ThreeSteps.start()
    skipped = wf.ThreeSteps.start()
    taken_over = wf.ThreeSteps.start()
    held = claim_all()
    # `last` finishes its first step now, so its batch item completes its final step
    store.finish(held[last.pk], Outcome(kind="complete"), output={"attempt": 1})
    held[last.pk] = store.claim(worker="t", queues=["workflows"], limit=1)[0]
    paused_meanwhile.pause(actor="ops")
    stale = held[taken_over.pk]
    Step.objects.filter(pk=stale.step_id).update(claim_token=None, status="failed")  # the sweep took it over
    items = [
        store.Finished(claim=held[advancing.pk], outcome=Outcome(kind="complete"), output={"n": 1}),
        store.Finished(claim=held[last.pk], outcome=Outcome(kind="complete"), output="after"),
        store.Finished(claim=held[paused_meanwhile.pk], outcome=Outcome(kind="complete"), output={"n": 1}),
        store.Finished(claim=held[skipped.pk], outcome=Outcome(kind="skip")),
        store.Finished(claim=stale, outcome=Outcome(kind="complete"), output="late"),
    ]
    assert store.finish_many(items) == [True, True, True, True, False]

    def state(run):
        run = WorkflowRun.objects.get(pk=run.pk)
        return run.status, run.current_step, list(run.steps.values_list("step_name", "status", "output"))

    assert state(advancing) == ("running", "two", [("one", "completed", {"n": 1}), ("two", "scheduled", None)])
    assert state(last) == ("finished", None, [("decide", "completed", {"attempt": 1}), ("after", "completed", "after")])
    assert state(paused_meanwhile) == ("paused", "two", [("one", "completed", {"n": 1})])
    assert state(skipped) == ("running", "two", [("one", "skipped", None), ("two", "scheduled", None)])
    assert state(taken_over)[2] == [("one", "failed", None)]
    assert list(WorkflowRun.objects.get(pk=last.pk).events.values_list("event", flat=True)) == [
        "started",
        "step_completed",
        "step_completed",
        "finished",
    ]
    assert list(WorkflowRun.objects.get(pk=advancing.pk).events.values_list("event", "actor")) == [
        ("started", "system"),
        ("step_completed", "system"),
    ]


def test_an_output_of_none_is_stored_as_null_and_the_next_delay_queue_and_priority_apply():
    run = wf.ThenWait.start()
    (held,) = claim_all().values()
    before = store.now()
    assert store.finish_many([store.Finished(claim=held, outcome=Outcome(kind="complete"), output="now")]) == [True]
    later = Step.objects.get(run=run, step_name="later")
    assert (later.queue, later.priority, later.attempt, later.status) == ("mail", 3, 1, "scheduled")
    assert 119 < (later.scheduled_at - before).total_seconds() < 125  # the wait read self.outputs
    null = wf.ThreeSteps.start()
    (held,) = claim_all().values()
    assert store.finish_many([store.Finished(claim=held, outcome=Outcome(kind="complete"))]) == [True]
    assert Step.objects.get(pk=held.step_id).output is None
    assert Step.objects.filter(pk=held.step_id, output__isnull=True).exists()
    assert null.pk == held.run_id


@pytest.fixture
def committer():
    from pgflow.runtime.committer import Committer

    running = Committer()
    yield running
    running.stop()


@pytest.mark.django_db(transaction=True)
def test_a_returned_body_frees_its_thread_before_the_commit_and_settles_once_committed(committer):
    from pgflow.runtime.runner import Runner

    runner = Runner(finish=committer.submit, finish_later=committer.submit_later)
    advancing, cancelled = wf.ThreeSteps.start(), wf.ThreeSteps.start()
    held = claim_all()
    store.cancel(cancelled.pk, actor="ops")  # between the claim and the body: its commit must be ignored

    result = runner.execute(held[advancing.pk])
    assert result.pending is not None and result.pending.result(timeout=10) is True
    assert result.settled(True).outcome == "completed"
    assert list(Step.objects.filter(run=advancing).values_list("step_name", "status")) == [
        ("one", "completed"),
        ("two", "scheduled"),
    ]

    late = runner.execute(held[cancelled.pk])
    assert late.pending is not None and late.pending.result(timeout=10) is False
    assert late.settled(False).outcome == "ignored"
    assert WorkflowRun.objects.get(pk=cancelled.pk).status == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_a_failed_body_waits_for_its_commit_so_errors_are_reported_after_it(committer):
    from pgflow.runtime.runner import Runner

    runner = Runner(finish=committer.submit, finish_later=committer.submit_later)
    run = wf.Failing.start()
    (held,) = claim_all().values()
    result = runner.execute(held)
    assert (result.pending, result.applied, result.outcome) == (None, True, "paused")
    assert WorkflowRun.objects.get(pk=run.pk).status == "paused"


@pytest.mark.django_db(transaction=True)
def test_a_batch_notifies_each_queue_with_a_step_due_now_once_and_no_queue_of_a_delayed_one():
    listener = other_connection(autocommit=True)
    try:
        listener.execute(f"LISTEN {store.CHANNEL}")
        due_now = [wf.ThreeSteps.start(), wf.ThreeSteps.start()]
        delayed = wf.ThenWait.start()  # its next step waits 120 s, on the "mail" queue
        held = claim_all()
        list(listener.notifies(timeout=0.2))  # the starts' own notifications
        items = [
            store.Finished(claim=held[run.pk], outcome=Outcome(kind="complete"), output="now")
            for run in (*due_now, delayed)
        ]
        assert store.finish_many(items) == [True, True, True]
        payloads = [note.payload for note in listener.notifies(timeout=0.5)]
    finally:
        listener.close()
    assert payloads == ["workflows"]
    assert Step.objects.filter(run__in=due_now, step_name="two", status="scheduled").count() == 2


@pytest.mark.django_db(transaction=True)
def test_two_committing_threads_apply_every_outcome_once():
    """A busy worker's committer: two threads take batches off one queue at once."""
    from concurrent.futures import ThreadPoolExecutor

    from pgflow.runtime.committer import Committer
    from tests.invariants import assert_exactly_once

    runs = [wf.ThreeSteps.start() for _ in range(120)]
    held = list(claim_all().values())
    held += store.claim(worker="t", queues=["workflows"], limit=100)  # claim_all takes 100 at most
    assert len(held) == 120
    committer = Committer(threads=2)
    assert len(committer._threads) == 2
    try:
        # Submitted from eight threads at once, twice each (a completion and a crossing
        # duplicate): each attempt's first outcome is applied, its second ignored.
        items = [store.Finished(claim=c, outcome=Outcome(kind="complete"), output={"n": c.run_id}) for c in held]
        with ThreadPoolExecutor(max_workers=8) as pool:
            futures = list(pool.map(committer.submit_later, items + items))
        results = [future.result(timeout=30) for future in futures]
    finally:
        committer.stop()
    assert sum(results) == 120
    for run in runs:
        steps = list(Step.objects.filter(run=run).order_by("id").values_list("step_name", "status", "output"))
        assert steps == [("one", "completed", {"n": run.pk}), ("two", "scheduled", None)]
    assert_exactly_once([run.pk for run in runs])


def round_trips(action):
    """What ``action`` sent on this thread's connection: the statements and the times it
    waited for the server (a pipeline's Sync, a simple query), read from libpq's own trace."""
    import tempfile

    from django.db import connection

    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            result = action()
        finally:
            pgconn.untrace()
        trace.seek(0)
        sent = [line.split("\t") for line in trace.read().splitlines() if line.startswith("F")]
    waits = sum(1 for part in sent if part[2].startswith(("Sync", "Query")))
    statements = [  # unnamed or newly prepared ones (Parse), and simple queries (Query)
        part[3].split('"')[3] if part[2].startswith("Parse") else part[3].split('"')[1]
        for part in sent
        if part[2].startswith(("Parse", "Query"))
    ]
    return result, waits, statements


@pytest.mark.django_db(transaction=True)
def test_on_its_own_a_plain_batch_takes_two_round_trips_and_commits():
    from django.db import connection

    runs = [wf.ThreeSteps.start() for _ in range(3)]
    items = [store.Finished(claim=c, outcome=Outcome(kind="complete"), output={"n": 1}) for c in claim_all().values()]
    applied, waits, statements = round_trips(lambda: store.finish_many(items))
    assert applied == [True, True, True]
    # BEGIN with the locks, then the statements with COMMIT: Django's atomic() took four.
    assert waits == 2
    assert statements[0] == "BEGIN" and statements[-1] == "COMMIT"
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with other_connection(autocommit=True) as other:  # committed: another session sees it
        rows = other.execute(
            "SELECT count(*) FROM pgflow_step_live"
            " WHERE run_id = ANY(%s) AND step_name = 'two' AND status = 'scheduled'",
            [[run.pk for run in runs]],
        ).fetchone()
    assert rows == (3,)


@pytest.mark.django_db(transaction=True)
def test_on_its_own_a_batch_with_an_item_apply_takes_is_applied_whole_in_an_atomic():
    plain, skipped = wf.ThreeSteps.start(), wf.ThreeSteps.start()
    held = claim_all()
    items = [
        store.Finished(claim=held[plain.pk], outcome=Outcome(kind="complete"), output={"n": 1}),
        store.Finished(claim=held[skipped.pk], outcome=Outcome(kind="skip")),  # through apply
    ]
    applied, _, statements = round_trips(lambda: store.finish_many(items))
    assert applied == [True, True]
    # The two-trip transaction rolled back before writing anything, then atomic() from the start.
    begins = [index for index, text in enumerate(statements) if text == "BEGIN"]
    assert len(begins) == 2 and begins[0] < statements.index("ROLLBACK") < begins[1], statements
    assert list(Step.objects.filter(run=plain).order_by("id").values_list("step_name", "status")) == [
        ("one", "completed"),
        ("two", "scheduled"),
    ]
    assert list(Step.objects.filter(run=skipped).order_by("id").values_list("step_name", "status")) == [
        ("one", "skipped"),
        ("two", "scheduled"),
    ]


@pytest.mark.django_db(transaction=True)
def test_on_its_own_a_batch_postgresql_refuses_writes_nothing_and_leaves_the_connection_clean():
    from django.db import DataError, connection

    refused, healthy = wf.ThreeSteps.start(), wf.ThreeSteps.start()
    held = claim_all()
    bad = store.Finished(claim=held[refused.pk], outcome=Outcome(kind="complete"), output={"text": "a\u0000b"})
    with pytest.raises(DataError):  # jsonb holds no NUL character
        store.finish_many([bad, store.Finished(claim=held[healthy.pk], outcome=Outcome(kind="complete"))])
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert set(Step.objects.filter(run__in=[refused, healthy]).values_list("step_name", "status")) == {
        ("one", "in_progress")
    }
    # The same connection applies the next batch.
    assert store.finish_many([store.Finished(claim=held[healthy.pk], outcome=Outcome(kind="complete"))]) == [True]
    assert WorkflowRun.objects.get(pk=healthy.pk).current_step == "two"
