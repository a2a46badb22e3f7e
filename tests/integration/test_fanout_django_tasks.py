"""A fan-out's django-tasks-db members are enqueued in the transaction that opens the batch:
a rolled-back opening leaves no task row behind, and a committed one has one per member."""

from __future__ import annotations

import pytest
from django.db import connections, transaction

from pgflow import store
from pgflow.models import BatchMember, Step
from pgflow.runtime.runner import Runner
from tests import django_tasks as t

pytest.importorskip("django_tasks_db", reason="django-tasks-db is in the dev extras")


def rows_seen_elsewhere() -> int:
    # A second connection: what another process (a db_worker) would see.
    from django_tasks_db.models import DBTaskResult  # lazy: installed with the dev extras only

    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {DBTaskResult._meta.db_table}")  # noqa: S608
            return int(cursor.fetchone()[0])
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
def test_the_tasks_exist_only_if_the_batch_commits():
    from django_tasks_db.models import DBTaskResult  # lazy: installed with the dev extras only

    run = t.DbTaskFanOut.start(input={"numbers": [1, 2]})
    held = store.claim_step(Step.objects.get(run=run, status="scheduled").pk, worker="tests")
    assert held is not None
    with pytest.raises(RuntimeError), transaction.atomic():
        assert Runner().execute(held).outcome == "parked"
        assert DBTaskResult.objects.count() == 2  # enqueued in this transaction
        assert rows_seen_elsewhere() == 0  # and not visible before it commits
        raise RuntimeError("the transaction that opened the batch rolls back")
    assert DBTaskResult.objects.count() == 0 and not BatchMember.objects.exists()

    assert Runner().execute(held).outcome == "parked"
    assert rows_seen_elsewhere() == 2
    members = list(BatchMember.objects.filter(batch__run=run).order_by("position"))
    assert sorted(m.task_id for m in members) == sorted(
        str(pk) for pk in DBTaskResult.objects.values_list("pk", flat=True)
    )
    assert [m.status for m in members] == ["pending", "pending"] and all(m.enqueued_at for m in members)
