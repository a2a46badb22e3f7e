"""The worker's held attempts and its slots by kind.

An attempt is held from its claim until its transition committed (the heartbeat keeps its
lease, the drain waits for it). While its body runs it takes one slot of its kind, sync (a
step thread's, ``--concurrency``) or async (one on the event loop, ``--async-concurrency``),
so the bodies of each kind running at once stay within its bound. The slot is free when the
body ends: the attempt then awaits its group commit, still held (and in_progress), while the
slot runs the next body; freeing it only once the commit answered turned a slot over once
per durable commit, far fewer steps/s (benchmarks/RESULTS.md, issue 35 part A).
The claim takes only for free slots of each kind (store.claims.Kinds): a claim of sync steps
beyond the free threads left them in_progress here waiting for a thread (30 with
--concurrency 2), unavailable to other workers; and it takes none of a kind while four times
its bound are held, so those awaiting their commit are bounded too (in_progress <= 4x each
bound). Twice the bound held a busy worker back: the attempts awaiting a commit filled it
while the commit waited for its WAL flush (benchmarks/RESULTS.md, issue 35 part K).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .. import tenants
from ..evaluation import is_async, reads_outputs
from ..registry import registered
from ..store import Claim
from ..store.claims import Kinds

SYNC, ASYNC = (False,), (True,)  # the slots an attempt holds: a thread's, or an async one's
HELD_PER_SLOT = 4  # attempts held of a kind, at most, per slot: its body's and those awaiting their commit


class Held:
    """Held attempts by claim token and the slots they take; ``lock`` guards all of it."""

    def __init__(self, *, concurrency: int, async_concurrency: int) -> None:
        self.concurrency = concurrency
        self.async_concurrency = async_concurrency
        self.lock = threading.Lock()
        self.running: dict[Any, Claim] = {}
        # Those whose body is still running in a thread, or awaiting on the loop.
        self.bodies: set[Any] = set()
        self.awaiting: set[Any] = set()
        self.async_steps = async_steps()
        self.readers = output_readers()
        self._kind: dict[Any, tuple[bool, ...]] = {}  # every held attempt's kinds
        self._in_body: dict[Any, tuple[bool, ...]] = {}  # the slots taken by bodies still running
        self.counts = {False: 0, True: 0}  # slots taken (bodies running), by kind
        self.held = {False: 0, True: 0}  # attempts held (claimed, not yet committed), by kind

    def _room(self, kind: bool) -> int:
        bound = self.async_concurrency if kind else self.concurrency
        return min(bound - self.counts[kind], HELD_PER_SLOT * bound - self.held[kind])

    def free(self) -> Kinds:
        """Free slots by kind: none of a kind while HELD_PER_SLOT times its bound are held."""
        with self.lock:
            threads = self._room(False)
            awaiting = self._room(True) if self.async_steps else 0
        return Kinds(
            threads=max(0, threads), awaiting=max(0, awaiting), async_steps=self.async_steps, readers=self.readers
        )

    def slots_for(self, held: Claim, free: Kinds, body_is_async: Callable[[Claim], bool]) -> tuple[bool, ...]:
        """The slots ``held`` takes: the one of the kind the claim counted it as. An async body
        of a class the claim did not know (first imported since the worker started) was
        counted as sync: it takes an async slot instead while one is free (the thread it was
        counted in was never used), or runs in that thread (run_body awaits it there) holding
        an async slot too, so neither bound is passed; the next claims know its steps."""
        # A tenant's async body runs in a step thread, in its tenant's context there (its
        # sync_to_async calls come back to that thread, and its connection): the loop's one
        # thread for sync code is every body's, and can be in one tenant's schema at a time.
        in_thread = tenants.in_context(held.run_fields.get("tenant"))
        if free.is_async(held):
            return (False, True) if in_thread else ASYNC
        if not body_is_async(held):
            return SYNC
        self.async_steps = async_steps()
        self.readers = output_readers()
        with self.lock:
            room = self._room(True) > 0
        return ASYNC if room and not in_thread else (False, True)

    def hold(self, held: Claim, slots: tuple[bool, ...]) -> None:
        with self.lock:
            self.running[held.token] = held
            self._kind[held.token] = slots
            self._in_body[held.token] = slots
            for kind in slots:
                self.counts[kind] += 1
                self.held[kind] += 1
            (self.awaiting if slots == ASYNC else self.bodies).add(held.token)

    def body_over(self, token: Any) -> None:
        """The body of ``token`` is over (caller holds ``lock``): its slot is free; the
        attempt stays held until its commit answered."""
        self.bodies.discard(token)
        self.awaiting.discard(token)
        for kind in self._in_body.pop(token, ()):
            self.counts[kind] -= 1

    def release(self, token: Any) -> None:
        """The attempt ``token`` is no longer held (caller holds ``lock``)."""
        self.body_over(token)
        if self.running.pop(token, None) is not None:
            for kind in self._kind.pop(token, ()):
                self.held[kind] -= 1


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
