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


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def every_thread_busy(*, turn: float, claim_took: float | None) -> tuple[Held, Clock]:
    """A worker of four threads whose slots each ran one body of ``turn`` seconds, now
    running four more; ``claim_took``: a claim's round trip measured, if any."""
    clock = Clock()
    held = Held(concurrency=4, async_concurrency=1, clock=clock)
    done = [claim() for _ in range(held.concurrency)]
    for attempt in done:
        held.hold(attempt, SYNC)
    clock.now += turn
    with held.lock:
        for attempt in done:
            held.release(attempt.token)
    if claim_took is not None:
        held.claim_took(claim_took)
    for _ in range(held.concurrency):
        held.hold(claim(), SYNC)
    return held, clock


def test_a_claim_takes_ahead_for_the_short_bodies_it_will_outlast():
    held, _ = every_thread_busy(turn=0.001, claim_took=None)
    assert held.free().threads == 0  # no claim answered yet: nothing ahead
    held.claim_took(0.002)  # two turns a claim: every running body ends meanwhile
    assert held.free().threads == 4
    for _ in range(4):
        held.hold(claim(), SYNC)
    assert held.free().threads == 0  # --concurrency attempts wait for a thread: no more


def test_a_claim_takes_ahead_only_the_share_of_bodies_ending_meanwhile():
    # Half a turn a claim: half the running bodies end while it is answered.
    held, _ = every_thread_busy(turn=0.004, claim_took=0.002)
    assert held.free().threads == 2


def test_a_body_running_longer_than_the_average_turn_stops_taking_ahead():
    held, clock = every_thread_busy(turn=0.001, claim_took=0.002)
    assert held.free().threads == 4
    clock.now += 1.0  # the bodies now run for a second: the average turn is out of date
    assert held.free().threads == 0
