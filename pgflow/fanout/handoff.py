"""How a fan-out hands its members out: one small interface, one implementation per kind.

A member is a child run (``batch.add_run``, or a task of pgflow's own backend: the store starts
it), a django-q2 task (:mod:`.djangoq`), or a task of another ``django.tasks`` backend
(:mod:`.djangotasks`). Each kind that is not a child run says:

- ``enqueue_now(batch_id)``: hand its members out inside the transaction that opens the batch
  (a backend that stores its tasks in the same database: its rows exist only if ours commit).
  Returns True when that finished the batch (every member failed to enqueue);
- ``enqueue_after_commit(batch_id)``: hand them out once that transaction committed (django-q2:
  a broker outside our transaction must never run a task for a batch a rollback undid);
- ``repair(at=..., grace=...)``: the sweep's share: count members whose result was missed.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Protocol


class Handoff(Protocol):
    kind: str  # Member.handoff of the members it hands out

    def enqueue_now(self, batch_id: uuid.UUID) -> bool: ...

    def enqueue_after_commit(self, batch_id: uuid.UUID) -> int: ...

    def repair(self, *, at: datetime, grace: timedelta) -> int: ...


def handoffs() -> dict[str, Handoff]:
    """Every kind, by ``Member.handoff``."""
    from .djangoq import DJANGO_Q  # cycle: djangoq -> here
    from .djangotasks import DJANGO_TASKS  # cycle: djangotasks -> djangoq -> here

    return {h.kind: h for h in (DJANGO_TASKS, DJANGO_Q)}


def used(kinds: set[str]) -> list[Handoff]:
    """The handoffs of these members' kinds (a child run has none)."""
    known = handoffs()
    return [known[kind] for kind in sorted(kinds) if kind in known]
