"""The worker's held attempts and its slots by kind.

An attempt is held from its claim until its transition committed (the heartbeat keeps its
lease, the drain waits for it) and takes one slot of its kind, sync (a step thread's,
``--concurrency``) or async (one on the event loop, ``--async-concurrency``), so each kind
stays within its bound at every instant. The claim takes only for free slots of each kind
(store.claims.Kinds): a claim of sync steps beyond the free threads left them in_progress
here waiting for a thread (30 with --concurrency 2), unavailable to other workers. An
attempt whose body is over keeps its slot until its outcome committed: it is in_progress
until then.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from ..evaluation import is_async, reads_outputs
from ..registry import registered
from ..store import Claim
from ..store.claims import Kinds
from .committer import MAX_BATCH

# TEMPORARY (issue #35 A/B of f27ae2f, benchmarks/realistic.py --finding8): "1" frees a slot
# when its body ends, not when its commit answered, with at most 2 batches awaiting their
# commit, as before f27ae2f; "2" the same with at most --concurrency awaiting their commit.
FREE_AT_BODY_END = os.environ.get("PGFLOW_BENCH_FREE_AT_BODY_END", "") in ("1", "2")
_AWAITING_COMMIT_BOUND_IS_CONCURRENCY = os.environ.get("PGFLOW_BENCH_FREE_AT_BODY_END") == "2"
SYNC, ASYNC = (False,), (True,)  # the slots an attempt holds: a thread's, or an async one's


class Held:
    """Held attempts by claim token and the slots they take; ``lock`` guards all of it."""

    def __init__(self, *, concurrency: int, async_concurrency: int) -> None:
        self.concurrency = concurrency
        self.async_concurrency = async_concurrency
        self.lock = threading.Lock()
        self.running: dict[Any, Claim] = {}
        # Those whose body is still running: they take the concurrency slots.
        self.bodies: set[Any] = set()
        # Async bodies awaiting on the loop.
        self.awaiting: set[Any] = set()
        self.async_steps = async_steps()
        self.readers = output_readers()
        self._kind: dict[Any, tuple[bool, ...]] = {}
        self.counts = {False: 0, True: 0}

    def free(self) -> Kinds:
        """Free slots by kind: each attempt held (claimed, and not yet committed) takes one."""
        with self.lock:
            threads = self.concurrency - self.counts[False]
            if FREE_AT_BODY_END:  # as before f27ae2f: at most 2 batches awaiting their commit
                allowance = self.concurrency if _AWAITING_COMMIT_BOUND_IS_CONCURRENCY else 2 * MAX_BATCH
                threads = min(threads, self.concurrency + allowance - len(self.running))
            awaiting = self.async_concurrency - self.counts[True] if self.async_steps else 0
        return Kinds(
            threads=max(0, threads), awaiting=max(0, awaiting), async_steps=self.async_steps, readers=self.readers
        )

    def slots_for(self, held: Claim, free: Kinds, body_is_async: Callable[[Claim], bool]) -> tuple[bool, ...]:
        """The slots ``held`` takes: the one of the kind the claim counted it as. An async body
        of a class the claim did not know (first imported since the worker started) was
        counted as sync: it takes an async slot instead while one is free (the thread it was
        counted in was never used), or runs in that thread (run_body awaits it there) holding
        an async slot too, so neither bound is passed; the next claims know its steps."""
        if free.is_async(held):
            return ASYNC
        if not body_is_async(held):
            return SYNC
        self.async_steps = async_steps()
        self.readers = output_readers()
        with self.lock:
            room = self.counts[True] < self.async_concurrency
        return ASYNC if room else (False, True)

    def hold(self, held: Claim, slots: tuple[bool, ...]) -> None:
        with self.lock:
            self.running[held.token] = held
            self._kind[held.token] = slots
            for kind in slots:
                self.counts[kind] += 1
            (self.awaiting if slots == ASYNC else self.bodies).add(held.token)

    def release(self, token: Any) -> None:
        """The attempt ``token`` is no longer held (caller holds ``lock``): its slots are free."""
        if self.running.pop(token, None) is not None:
            for kind in self._kind.pop(token, ()):
                self.counts[kind] -= 1

    def body_over(self, token: Any) -> None:
        """The body of ``token`` is over and its commit pending (caller holds ``lock``): with
        FREE_AT_BODY_END (the behaviour before f27ae2f, for benchmarks/realistic.py's A/B
        only), its slot is free now; otherwise it stays held until the commit answered."""
        if FREE_AT_BODY_END and token in self.running:
            for kind in self._kind.pop(token, ()):
                self.counts[kind] -= 1


def async_steps() -> frozenset[str]:
    """The ``async def`` steps of the registered workflow classes, as the claim counts them
    ("workflow path:step name"; a fan_out's body runs in a thread)."""
    return frozenset(
        f"{workflow.workflow_path()}:{definition.name}"
        for workflow in registered()
        for definition in workflow.steps()
        if not definition.fans_out and is_async(workflow, definition)
    )


def output_readers() -> frozenset[str]:
    """The steps of the registered workflow classes whose claims bring the run's outputs
    (``evaluation.reads_outputs``), as the claim names them ("workflow path:step name"). A
    class first imported since the worker started is not among them until they are worked
    out again (with the async steps): its bodies read ``self.outputs`` with one query."""
    return frozenset(
        f"{workflow.workflow_path()}:{definition.name}"
        for workflow in registered()
        for definition in workflow.steps()
        if reads_outputs(workflow, definition)
    )
