"""A claim locks what it can take: each kind's due attempts up to its free slots, so another
worker's claim finds the rest unlocked."""

from __future__ import annotations

import pytest
from django.db import transaction

from pgflow import store
from pgflow.store.claims import Kinds
from tests import workflows as wf
from tests.connections import other_connection

pytestmark = pytest.mark.django_db(transaction=True)

# A worker that knows an async step (any, here one that is never due): its claims have async slots.
ASYNC_SLOTS = Kinds(threads=1, awaiting=100, async_steps=frozenset({"tests.async_workflows.Unused:step"}))


def unlocked_for_another_worker() -> int:
    with other_connection(autocommit=True) as other:
        (count,) = other.execute(
            "SELECT count(*) FROM (SELECT id FROM pgflow_step WHERE status = 'scheduled' FOR UPDATE SKIP LOCKED) AS s"
        ).fetchone()
    return int(count)


def test_a_claim_for_one_free_thread_locks_one_attempt_not_the_async_slots_share():
    for _ in range(20):
        wf.ThreeSteps.start()
    with transaction.atomic():  # the claim's row locks last until this ends
        claimed = store.claim(worker="w1", queues=["workflows"], limit=101, kinds=ASYNC_SLOTS)
        assert len(claimed) == 1
        assert unlocked_for_another_worker() == 19


def test_a_claim_with_free_threads_takes_and_locks_as_many_as_are_free():
    for _ in range(20):
        wf.ThreeSteps.start()
    kinds = Kinds(threads=5, awaiting=100, async_steps=ASYNC_SLOTS.async_steps)
    with transaction.atomic():
        claimed = store.claim(worker="w1", queues=["workflows"], limit=105, kinds=kinds)
        assert len(claimed) == 5
        assert unlocked_for_another_worker() == 15
