"""Locking a run, and the writes every transition shares: the audit trail and NOTIFY."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from .. import db
from ..core.events import SYSTEM as SYSTEM  # store.starting reads it here
from ..core.events import EventKind, actor_name
from ..core.states import OPEN_STEP
from ..db import connection
from ..models import Event, Step, WorkflowRun

if TYPE_CHECKING:
    pass

logger = logging.getLogger("pgflow")


CHANNEL = "pgflow"  # the NOTIFY channel; its payloads: read_note()
TESTING_WORKER = "pgflow.testing"  # the worker name of attempts pgflow.testing runs in-process
OPEN_STEP_VALUES = sorted(s.value for s in OPEN_STEP)


def now() -> datetime:
    return timezone.now()


# --- locking ---------------------------------------------------------------------------------


@contextmanager
def locked(run_id: int) -> Iterator[WorkflowRun]:
    """A transaction holding the run's row lock; raises WorkflowRun.DoesNotExist for no run."""
    with db.atomic():
        yield WorkflowRun.objects.select_for_update().get(pk=run_id)


def open_attempt(run: WorkflowRun) -> Step | None:
    """The run's open attempt (at most one), locked. Call under ``locked``."""
    return Step.objects.live().select_for_update().filter(run=run, status__in=OPEN_STEP_VALUES).first()


def event(
    run: WorkflowRun,
    kind: EventKind,
    /,
    *,
    step: Step | None = None,
    actor: Any = None,
    at: datetime | None = None,
    **details: Any,
) -> Event:
    """Write one audit-trail entry; ``details`` must be JSON-serialisable."""
    return Event.objects.create(
        run=run, step=step, event=str(kind), actor=actor_name(actor), details=details, created_at=at or now()
    )


def read_note(payload: str) -> tuple[str, int | None, str]:
    """A notification on CHANNEL: the queue with an attempt due now, the attempt's id when one
    start made it (``"<queue> <id>"``), and what follows the id when the start handed the
    attempt to an idle worker (its claim as JSON, ``offers.read_handed``; "" otherwise). A
    commit or an operator names the queue alone."""
    queue, _, rest = payload.partition(" ")
    step, _, handed = rest.partition(" ")
    if not step.isdecimal():
        return queue, None, ""
    return queue, int(step), handed


def notify(queue: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, queue])
