"""The sweep: repairs what no single worker can see. Each repair is its own short
transition under the run's lock; the housekeeping runs in one worker at a time, under an
advisory lock held for a transaction (:func:`leading`).

- attempts whose lease ran out (their worker died): a fresh attempt, or a pause after
  MAX_LOST_ATTEMPTS in a row;
- signal waits past their deadline: ``on_timeout``;
- fan-out steps whose batch callback was lost (only with django_q installed);
- the hourly rollup of the insights' figures: the hours closed since the last sweep
  (``pgflow.rollup.roll``, a bounded number per sweep);
- history: ended runs filed into their days' partitions, the partitions of the next day made
  ahead (``pgflow.store.history``);
- retention: finished and cancelled runs older than RETENTION, in batches for up to
  RETENTION_SECONDS, their days' partitions dropped whole, and the rollup's rows as old;
- the rows of workers gone for a while (``pgflow.runtime.presence``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

import psycopg

from .. import archive, fanout, rollup, store
from ..conf import pgflow_settings
from ..core.states import StepStatus
from ..db import connection
from ..models import Step
from ..observability import alerts
from ..signals import repair_waits
from ..store import history
from . import connections, presence

logger = logging.getLogger("pgflow")

LOCK_KEY = 0x7067_666C_6F77  # "pgflow" — the advisory lock only one sweeping worker holds
BATCH_SIZE = 100  # repairs of one kind per sweep
# Runs deleted per transaction: each batch's dozen statements cost the same whatever its
# size, so 2,000 purge 1.2x faster than 500 (benchmarks/RESULTS.md), in ~0.2 s a transaction.
RETENTION_BATCH = 2000
# Batches per sweep: enough to keep up with several thousand runs ending a second at the
# default SWEEP_INTERVAL, and few enough that one sweep ends (RETENTION_SECONDS bounds it too).
RETENTION_ROUNDS = 50
RETENTION_SECONDS = 5.0
FILE_ROUNDS = 100  # history.FILE_BATCH runs each


def run(*, worker: str = "sweep", at: datetime | None = None) -> dict[str, int]:
    """One sweep; returns how many of each repair it made.

    The repairs of attempts (lost leases, wait deadlines, stale waits) run in every
    worker's sweep, without the sweep lock: each is a transition that locks its run and
    checks again, so two sweeps cannot apply one twice, and a worker frozen in the middle of
    a sweep (its connection open, its lock held) cannot stop the others from
    recovering its attempts. Only the housekeeping (fan-out repairs, rollup, retention,
    gone workers) waits for the lock, to spare the database the same work twice.

    The lock's transaction opens before the pass reads its clock: the ends the pass stamps
    with ``at`` commit one by one, up to seconds later, and an open transaction begun before
    them is what tells the insights' kept parts they may still come (pgflow.rollup)."""
    with leading() as leader:
        at = at or store.now()
        counts = {
            "lost_leases": _each(_expired_leases(at), lambda step_id: store.recover_lost(step_id, at=at)),
            "wait_timeouts": _each(_past_deadline(at), lambda step_id: _time_out(step_id, at)),
            "stale_waits": _stage("repairing stale signal waits", repair_waits, at),
        }
        if not leader:
            return counts
        logger.debug("sweep: housekeeping began", extra={"action": "sweep_housekeeping"})
        # Each stage on its own: one that fails (a role that may not create the next day's
        # partitions, a row that cannot be stored) must not stop retention or the alerts.
        # (The rollup's hours missed are counted live by the insights until a sweep rolls them.)
        counts.update(
            {
                "fan_out_repairs": _stage("repairing fan-outs", _repair_fan_outs, at),
                "rolled_hours": _stage("rollup", rollup.roll, at),
                "filed_runs": _stage("filing history", _file, at),
                "purged_runs": _stage("retention", purge, at),
                "forgotten_workers": _stage("forgetting gone workers", presence.forget_gone, at),
                "alerts": _stage("alerts", alerts.run, at),
            }
        )
        logger.debug("sweep: housekeeping ended", extra={"action": "sweep_housekeeping"})
    return counts


@contextmanager
def leading() -> Iterator[bool]:
    """Whether this worker holds the sweep's lock, for the block: a transaction-level advisory
    lock, in a transaction of its own on a connection of its own, kept open (idle, holding no
    snapshot, writing nothing) while the pass runs its own short transactions beside it. A
    session lock would not do behind a transaction-mode pooler: its unlock may run on
    another server connection than its lock, which then stays locked for ever, taken again by
    whichever worker's statement lands there, two of them at once. The lock ends with the
    transaction: on a commit, a lost connection, or a worker that died."""
    # The thread's own settings (keepalives and timeouts included), on a fresh psycopg
    # connection: Django's wrapper is the thread's one connection, busy with the housekeeping.
    holder = psycopg.connect(**connection.get_connection_params())
    try:
        taken = holder.execute("SELECT pg_try_advisory_xact_lock(%s)", [LOCK_KEY]).fetchone()
        yield bool(taken and taken[0])
    finally:
        try:
            holder.rollback()  # releases the lock (nothing was written)
        finally:
            holder.close()


def _each(ids: list[int], repair: object) -> int:
    done = 0
    for step_id in ids:
        try:
            done += bool(repair(step_id))  # type: ignore[operator]
        except Exception as exc:
            if connections.away(exc):
                raise  # the database is away (or read-only): the others would fail the same way

            # One broken run must not stop the sweep for all the others.
            logger.exception("sweep: repair of step %s failed", step_id, extra={"action": "sweep_error"})
    return done


def _stage(name: str, stage: Callable[..., int], at: datetime) -> int:
    """What one stage of the sweep did; 0 when it failed, logged (``sweep_error``). With the
    database away the others would fail the same way: that reaches the caller."""
    try:
        return stage(at=at)
    except Exception as exc:
        if connections.away(exc):
            raise
        logger.exception("sweep: %s failed", name, extra={"action": "sweep_error"})
        return 0


def _expired_leases(at: datetime) -> list[int]:
    return list(
        Step.objects.live()
        .filter(status=StepStatus.IN_PROGRESS, lease_expires_at__lt=at)
        .order_by("lease_expires_at")
        .values_list("pk", flat=True)[:BATCH_SIZE]
    )


def _past_deadline(at: datetime) -> list[int]:
    return list(
        Step.objects.live()
        .filter(status=StepStatus.WAITING, deadline_at__lte=at, batch__isnull=True)
        .order_by("deadline_at")
        .values_list("pk", flat=True)[:BATCH_SIZE]
    )


def _time_out(step_id: int, at: datetime) -> bool:
    return store.time_out(step_id, at=at)


def _repair_fan_outs(*, at: datetime) -> int:
    # Child runs (batch.add_run) need no django-q2: an ended child whose member was not
    # counted, open children of a cancelled parent.
    done = store.repair_children(at=at, grace=timedelta(seconds=pgflow_settings.seconds("FAN_OUT_GRACE")))
    # Tasks of django.tasks backends need no django-q2 either: each kind's repair says whether
    # it applies (django-q2's reads its tables, which exist only with it installed).
    return done + fanout.repair_lost(at=at)


def _file(*, at: datetime) -> int:
    """Make the coming days' partitions, then file the ended runs into theirs."""
    history.make_ahead(at)
    return history.file_ended(at=at, rounds=FILE_ROUNDS)


def purge(*, at: datetime) -> int:
    """Delete finished and cancelled runs older than RETENTION (with their rows), the history
    partitions of the days wholly before it, and the rollup's rows of hours as old."""
    retention = pgflow_settings.RETENTION
    if retention is None:
        return 0
    cutoff = at - (retention if isinstance(retention, timedelta) else timedelta(seconds=retention))
    rollup.purge(cutoff)
    writer = archive.write if archive.configured() is not None else None  # PGFLOW["ARCHIVE"]: before the purge
    purged = store.purge_runs(
        cutoff, batch=RETENTION_BATCH, rounds=RETENTION_ROUNDS, seconds=RETENTION_SECONDS, archive=writer
    )
    history.drop_expired(cutoff)
    return purged
