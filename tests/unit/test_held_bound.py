"""runtime.held.Held: a slot is free when its body ends, and a kind takes no more claims while
HELD_PER_SLOT times its bound are held (awaiting their commits)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pgflow.runtime.held import HELD_PER_SLOT, SYNC, Held
from pgflow.store import Claim


def claim() -> Claim:
    return Claim(
        step_id=1,
        run_id=1,
        step_name="one",
        attempt=1,
        token=uuid.uuid4(),
        started_at=datetime(2026, 12, 6, tzinfo=UTC),
    )


def test_a_slot_is_free_when_its_body_ends_until_the_held_bound():
    held = Held(concurrency=2, async_concurrency=1)
    awaiting_commit = []
    for _ in range(HELD_PER_SLOT * 2 - 1):
        attempt = claim()
        held.hold(attempt, SYNC)
        with held.lock:
            held.body_over(attempt.token)  # its body ended: it awaits its commit
        awaiting_commit.append(attempt)
    assert held.free().threads == 1  # one short of the bound: one more may be claimed
    last = claim()
    held.hold(last, SYNC)
    with held.lock:
        held.body_over(last.token)
    assert held.free().threads == 0  # the bound: none until a commit answers
    with held.lock:
        held.release(awaiting_commit[0].token)
    assert held.free().threads == 1


def test_running_bodies_take_their_slots():
    held = Held(concurrency=2, async_concurrency=1)
    held.hold(claim(), SYNC)
    held.hold(claim(), SYNC)
    assert held.free().threads == 0
