"""Queues: an operator's pause and resume of one (which queues hold work: pgflow.backlog).

A paused queue's attempts stay scheduled and their runs keep their state; no worker claims
them (``store.claim`` leaves the queue out) until it is resumed. The row of a queue keeps who
paused or resumed it last (``user:<name>`` or ``system``, as the audit trail names actors), and when.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from . import db
from .core.definitions import QUEUE_RULE, valid_queue
from .core.events import actor_name
from .models import QueueState
from .store import notify


def _set(queue: str, *, paused: bool, actor: Any) -> QueueState:
    if not isinstance(queue, str) or not valid_queue(queue):
        raise ValueError(f"queue must be {QUEUE_RULE}, got {queue!r}")
    with db.atomic():
        state, _ = QueueState.objects.update_or_create(
            queue=queue, defaults={"paused": paused, "changed_at": timezone.now(), "changed_by": actor_name(actor)}
        )
        if not paused:
            notify(queue)  # its due attempts are claimable again: wake the workers now
    return state


def pause_queue(queue: str, *, actor: Any = None) -> QueueState:
    """Stop the claims of ``queue``: its attempts wait, scheduled, until ``resume_queue``."""
    return _set(queue, paused=True, actor=actor)


def resume_queue(queue: str, *, actor: Any = None) -> QueueState:
    """Let the workers claim ``queue``'s attempts again."""
    return _set(queue, paused=False, actor=actor)


def paused_queues() -> list[str]:
    return sorted(QueueState.objects.filter(paused=True).values_list("queue", flat=True))
