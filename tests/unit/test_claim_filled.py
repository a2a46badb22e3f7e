"""runtime.worker._filled: whether a claim filled the free slots of a kind (so more of it may
be due and the worker claims again at once) or found all there was (drained)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pgflow.runtime.worker import _filled
from pgflow.store import Claim
from pgflow.store.claims import Kinds

ASYNC_STEP = "shop.Orders:fetch"


def claim(step_name: str) -> Claim:
    return Claim(
        step_id=1,
        run_id=1,
        step_name=step_name,
        attempt=1,
        token=uuid.uuid4(),
        started_at=datetime(2026, 12, 6, tzinfo=UTC),
        run_fields={"workflow_class": "shop.Orders"},
    )


def test_sync_claims_that_fill_the_threads_are_filled_though_async_slots_stay_free():
    # A project with one async step keeps async slots free while its sync steps drain: the
    # claim filled the threads, so a backlog of sync steps may remain.
    free = Kinds(threads=3, awaiting=100, async_steps=frozenset({ASYNC_STEP}))
    assert _filled([claim("pack")] * 3, free)
    assert not _filled([claim("pack")] * 2, free)


def test_async_claims_that_fill_the_async_slots_are_filled():
    free = Kinds(threads=4, awaiting=2, async_steps=frozenset({ASYNC_STEP}))
    assert _filled([claim("fetch"), claim("fetch")], free)
    assert not _filled([claim("fetch"), claim("pack")], free)


def test_one_kind_free():
    assert _filled([claim("pack")] * 2, Kinds(threads=2, awaiting=0))
    assert not _filled([claim("pack")], Kinds(threads=2, awaiting=0))
    assert _filled([], Kinds(threads=0, awaiting=0))  # no slot free: none to find empty
