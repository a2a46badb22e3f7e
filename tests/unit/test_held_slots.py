"""The worker's slots, without a database: runtime.held.Held frees a slot when its body ends
and takes no more claims of a kind while HELD_PER_SLOT times its bound are held (awaiting
their commits); store.claims.Kinds.filled_by says whether a claim filled the free slots of a kind
(more may be due: the worker claims again at once) or found all there was (drained)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pgflow.runtime.held import HELD_PER_SLOT, SYNC, Held
from pgflow.store import Claim
from pgflow.store.claims import Kinds

ASYNC_STEP = "shop.Orders:fetch"


def claim(step_name: str = "pack") -> Claim:
    return Claim(
        step_id=1,
        run_id=1,
        step_name=step_name,
        attempt=1,
        token=uuid.uuid4(),
        started_at=datetime(2026, 12, 6, tzinfo=UTC),
        run_fields={"workflow_class": "shop.Orders"},
    )


def ended(held: Held) -> Claim:
    """An attempt held whose body ended: it awaits its commit."""
    attempt = claim()
    held.hold(attempt, SYNC)
    with held.lock:
        held.body_over(attempt.token)
    return attempt


def test_a_slot_is_free_when_its_body_ends_until_the_held_bound():
    held = Held(concurrency=2, async_concurrency=1)
    awaiting_commit = [ended(held) for _ in range(HELD_PER_SLOT * 2 - 1)]
    assert held.free().threads == 1  # one short of the bound: one more may be claimed
    ended(held)
    assert held.free().threads == 0  # the bound: none until a commit answers
    with held.lock:
        held.release(awaiting_commit[0].token)
    assert held.free().threads == 1


def test_running_bodies_take_their_slots():
    held = Held(concurrency=2, async_concurrency=1)
    held.hold(claim(), SYNC)
    held.hold(claim(), SYNC)
    assert held.free().threads == 0


def test_sync_claims_that_fill_the_threads_are_filled_though_async_slots_stay_free():
    # A project with one async step keeps async slots free while its sync steps drain: the
    # claim filled the threads, so a backlog of sync steps may remain.
    free = Kinds(threads=3, awaiting=100, async_steps=frozenset({ASYNC_STEP}))
    assert free.filled_by([claim()] * 3)
    assert not free.filled_by([claim()] * 2)


def test_async_claims_that_fill_the_async_slots_are_filled():
    free = Kinds(threads=4, awaiting=2, async_steps=frozenset({ASYNC_STEP}))
    assert free.filled_by([claim("fetch"), claim("fetch")])
    assert not free.filled_by([claim("fetch"), claim("pack")])


def test_one_kind_free():
    assert Kinds(threads=2, awaiting=0).filled_by([claim()] * 2)
    assert not Kinds(threads=2, awaiting=0).filled_by([claim()])
