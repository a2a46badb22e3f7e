"""The worker's held attempts and its slots by kind.

An attempt is held from its claim until its transition committed (the heartbeat keeps its
lease, the drain waits for it). While its body runs it takes one slot of its kind, sync (a
step thread's, ``--concurrency``) or async (one on the event loop, ``--async-concurrency``),
so the bodies of each kind running at once stay within its bound. The slot is free when the
body ends: the attempt then awaits its group commit, still held (and in_progress), while the
slot runs the next body; freeing it only once the commit answered turned a slot over once
per durable commit, far fewer steps/s (benchmarks/RESULTS.md, issue 35 part A).
The claim takes for the free slots of each kind (store.claims.Kinds), not for all it could
hold: a claim of sync steps far beyond the free threads left them in_progress here waiting
for a thread (30 with --concurrency 2), unavailable to other workers; and it takes none of
a kind while four times its bound are held, so those awaiting their commit are bounded too
(in_progress <= 4x each bound). Twice the bound held a busy worker back: the attempts awaiting a commit filled it
while the commit waited for its WAL flush (benchmarks/RESULTS.md, issue 35 part K).

A claim of sync steps also takes ahead, for the threads its bodies are expected to free
while the claim is answered: the bodies running times the claim's round trip over a slot's
turn (from its attempt's hold to its body's end, or the oldest running body's age when
longer), each a moving average, at most the slots taken, and never more than
``--concurrency`` attempts waiting for a thread. Short bodies turn a slot over several times
a claim, and a claim for the threads free when it was sent left them idle until the next
one (benchmarks/RESULTS.md, issue 35 part L); a long body makes it take next to none ahead,
so an attempt waits in a worker for about a claim's round trip at most while another worker
could have run it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .. import registry, tenants
from ..evaluation import is_async, reads_outputs
from ..store import Claim
from ..store.claims import Kinds

SYNC, ASYNC = (False,), (True,)  # the slots an attempt holds: a thread's, or an async one's
HELD_PER_SLOT = 4  # attempts held of a kind, at most, per slot: its body's and those awaiting their commit
SMOOTHING = 0.1  # the weight of the newest figure in the moving averages of a claim and of a turn


class Held:
    """Held attempts by claim token and the slots they take; ``lock`` guards all of it."""

    def __init__(
        self, *, concurrency: int, async_concurrency: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.concurrency = concurrency
        self.async_concurrency = async_concurrency
        self.lock = threading.Lock()
        self.running: dict[Any, Claim] = {}
        # Those whose body is still running in a thread, or awaiting on the loop.
        self.bodies: set[Any] = set()
        self.awaiting: set[Any] = set()
        self._registered = registry.changes()
        self.async_steps = async_steps()
        self.readers = output_readers()
        self._kind: dict[Any, tuple[bool, ...]] = {}  # every held attempt's kinds
        self._in_body: dict[Any, tuple[bool, ...]] = {}  # the slots taken by bodies still running
        self.counts = {False: 0, True: 0}  # slots taken (bodies running, or waiting for a thread), by kind
        self.held = {False: 0, True: 0}  # attempts held (claimed, not yet committed), by kind
        self._clock = clock
        self._held_at: dict[Any, float] = {}  # the sync attempts whose body has not ended: when held
        self._turn: float | None = None  # a sync slot's turn, seconds (moving average)
        self._claim: float | None = None  # a claim's round trip, seconds (moving average)

    def _room(self, kind: bool) -> int:
        if kind:
            bound = self.async_concurrency
            return min(bound - self.counts[True], HELD_PER_SLOT * bound - self.held[True])
        bound, taken = self.concurrency, self.counts[False]
        return min(bound - taken + self._ahead(), 2 * bound - taken, HELD_PER_SLOT * bound - self.held[False])

    def _ahead(self) -> int:
        """The sync slots taken now whose bodies are expected to end while a claim is answered.
        A body held longer than the average turn makes it that body's age: the bodies have
        grown longer than the average says, and next to nothing is taken ahead."""
        if not self._turn or self._claim is None or not self._held_at:
            return 0
        oldest = next(iter(self._held_at.values()))  # held first, body not over: the oldest
        turn = max(self._turn, self._clock() - oldest)
        taken = min(self.counts[False], self.concurrency)
        return min(taken, int(taken * self._claim / turn))

    def claim_took(self, seconds: float) -> None:
        """A claim of sync steps was answered in ``seconds``."""
        with self.lock:
            self._claim = _averaged(self._claim, seconds)

    def free(self) -> Kinds:
        """Free slots by kind: none of a kind while HELD_PER_SLOT times its bound are held."""
        changes = registry.changes()
        if changes != self._registered:  # a class imported since: its steps that read outputs
            self._registered = changes
            self.readers = output_readers()
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
            if slots == SYNC:
                self._held_at[held.token] = self._clock()
            (self.awaiting if slots == ASYNC else self.bodies).add(held.token)

    def body_over(self, token: Any) -> None:
        """The body of ``token`` is over (caller holds ``lock``): its slot is free; the
        attempt stays held until its commit answered."""
        self.bodies.discard(token)
        self.awaiting.discard(token)
        if (held_at := self._held_at.pop(token, None)) is not None:
            self._turn = _averaged(self._turn, self._clock() - held_at)
        for kind in self._in_body.pop(token, ()):
            self.counts[kind] -= 1

    def release(self, token: Any) -> None:
        """The attempt ``token`` is no longer held (caller holds ``lock``)."""
        self.body_over(token)
        if self.running.pop(token, None) is not None:
            for kind in self._kind.pop(token, ()):
                self.held[kind] -= 1


def _averaged(average: float | None, figure: float) -> float:
    return figure if average is None else average + SMOOTHING * (figure - average)


def async_steps() -> frozenset[str]:
    """The ``async def`` steps of the registered workflow classes, as the claim counts them
    ("workflow path:step name"; a fan_out's body runs in a thread)."""
    return frozenset(
        f"{workflow.workflow_path()}:{definition.name}"
        for workflow in registry.registered()
        for definition in workflow.steps()
        if not definition.fans_out and is_async(workflow, definition)
    )


def output_readers() -> frozenset[str]:
    """The steps of the registered workflow classes whose claims bring the run's outputs
    (``evaluation.reads_outputs``), as the claim names them ("workflow path:step name"). A
    class first imported since the worker started (its first attempt's claim imports it) is
    among them from the next claim on (``Held.free``): the attempts claimed before then read
    ``self.outputs`` with one query."""
    return frozenset(
        f"{workflow.workflow_path()}:{definition.name}"
        for workflow in registry.registered()
        for definition in workflow.steps()
        if reads_outputs(workflow, definition)
    )
