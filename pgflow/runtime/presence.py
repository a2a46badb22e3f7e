"""Live workers: each ``pgflow_worker`` keeps one ``Worker`` row (the only writer of that table).

The row is inserted at start, updated once per heartbeat interval with the worker's
counters (one UPDATE, whatever the number of steps run since), and deleted on a clean
stop. A row is matched on (name, host, pid), so a second worker started with the same
``--name`` takes the row over instead of deleting its twin's on stop. A row whose
heartbeat is older than the lease is a worker that is gone; the sweep forgets it after
:data:`FORGET_AFTER`.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta
from importlib import metadata

from ..models import Worker

FORGET_AFTER = timedelta(hours=1)  # a gone worker's row stays this long, so operators see it went


def version() -> str:
    try:
        return metadata.version("django-pgflow")
    except metadata.PackageNotFoundError:
        return "unknown"


def register(*, name: str, queues: list[str], concurrency: int, at: datetime) -> None:
    Worker.objects.update_or_create(
        name=name,
        defaults={
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": list(queues),
            "concurrency": concurrency,
            "version": version(),
            "started_at": at,
            "heartbeat_at": at,
            "steps_run": 0,
            "steps_in_progress": 0,
        },
    )


def beat(*, name: str, queues: list[str], concurrency: int, steps_run: int, in_progress: int, at: datetime) -> None:
    """The heartbeat's one UPDATE; a row the sweep forgot meanwhile (a long outage) comes back."""
    updated = Worker.objects.filter(name=name, host=socket.gethostname(), pid=os.getpid()).update(
        heartbeat_at=at, steps_run=steps_run, steps_in_progress=in_progress
    )
    if not updated:
        register(name=name, queues=queues, concurrency=concurrency, at=at)
        Worker.objects.filter(name=name).update(steps_run=steps_run, steps_in_progress=in_progress)


def unregister(*, name: str) -> None:
    Worker.objects.filter(name=name, host=socket.gethostname(), pid=os.getpid()).delete()


def forget_gone(*, at: datetime) -> int:
    """Delete the rows of workers gone for longer than FORGET_AFTER (the sweep calls this)."""
    deleted, _ = Worker.objects.filter(heartbeat_at__lt=at - FORGET_AFTER).delete()
    return deleted
