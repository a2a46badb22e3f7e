"""Schedules: sync the declared ones, claim due ticks, start their runs.

The one writer of ``Schedule`` and ``ScheduleTick`` rows. A worker's schedule thread calls
:func:`fire_due`: it claims due schedules with ``FOR UPDATE SKIP LOCKED`` and, in the same
short transaction, starts each due tick's run through the public start API with the key
``schedule:<id>:<tick in UTC ISO>``, records the tick and stores the next one. A racing
worker skips the locked row, and finds the tick gone once the lock is released, so each
tick starts one run; the run key would refuse a second one even so.

The arithmetic (which tick is next, which due ticks start or are missed, what overlap
does) is ``pgflow.core.ticks``; this module carries it out.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError
from django.db.models import Min, Q
from django.utils.module_loading import autodiscover_modules

from . import db, registry, store, tenants
from .conf import pgflow_settings
from .core import jsonvalue, ticks
from .core.states import RunStatus
from .db import connection
from .exceptions import DefinitionError, InvalidTransition, PgflowError
from .models import Schedule, ScheduleTick, WorkflowRun

if TYPE_CHECKING:
    from .workflow import Workflow

logger = logging.getLogger("pgflow")

BATCH = 50  # schedules claimed per transaction: short transactions, even with 1,000 due
MAX_SLEEP = 5.0  # seconds: the schedule thread looks again at least this often (buffer_one, new rows)
# Seconds: a tick still due after a pass is another worker's, firing it now, or one whose
# statement was stopped (a lock or statement timeout, a cancel): looked at again after this.
STILL_DUE = 1.0
_SYNC_LOCK = 0x70676673  # advisory lock key ("pgfs"): one sync at a time across workers
_OPEN = [RunStatus.RUNNING, RunStatus.PAUSED]


def run_key(schedule_id: int, tick: datetime) -> str:
    """The key of a tick's run: ``schedule:<id>:<tick in UTC ISO>``."""
    return f"schedule:{schedule_id}:{tick.astimezone(UTC).isoformat()}"


def parse_key(key: str | None) -> tuple[int, str] | None:
    """``(schedule id, tick or "now:…")`` from a run key made here, else None."""
    if not key or not key.startswith("schedule:"):
        return None
    _, ident, rest = (key.split(":", 2) + ["", ""])[:3]
    return (int(ident), rest) if ident.isdigit() and rest else None


# --- sync: the declared schedules into the table ----------------------------------------------


def declared(workflows: Iterable[type[Workflow]] | None = None) -> dict[tuple[str, str], ticks.Schedule]:
    """``{(workflow path, name): Schedule}`` over the registered workflow classes, after
    importing each installed app's ``workflows`` module (as the admin finds ``admin.py``)."""
    if workflows is None:
        workflows = workflow_classes()
    found: dict[tuple[str, str], ticks.Schedule] = {}
    for workflow in workflows:
        for declaration in workflow._pgflow_schedules:
            found[(workflow.workflow_path(), declaration.name)] = declaration
    return found


def workflow_classes() -> list[type[Workflow]]:
    """The workflow classes a schedule may start: every registered one, after importing
    each installed app's ``workflows`` module."""
    autodiscover_modules("workflows")
    return registry.registered()


def sync(*, now: datetime | None = None, **_: Any) -> dict[str, int]:
    """Bring the code's schedules into the table: create new ones, update changed ones,
    disable (never delete) those whose declaration left the code. Admin-made rows are left
    alone. Returns ``{"created", "updated", "disabled"}``. Safe to call from many workers
    at once (an advisory lock takes turns); also runs after ``migrate``."""
    at = now or store.now()
    wanted = declared()
    counts = {"created": 0, "updated": 0, "disabled": 0}
    with db.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_SYNC_LOCK])
        rows = {
            (row.workflow_class, row.name): row
            for row in Schedule.objects.select_for_update().filter(origin=Schedule.Origin.CODE)
        }
        for key, declaration in wanted.items():
            row = rows.pop(key, None)
            if row is None:
                taken = Schedule.objects.filter(workflow_class=key[0], name=key[1]).first()
                if taken is not None:  # an admin-made schedule holds the name: the code's wins
                    row = taken
                    row.origin = Schedule.Origin.CODE
                else:
                    row = Schedule(workflow_class=key[0], name=key[1], origin=Schedule.Origin.CODE, created_at=at)
            if _apply(row, declaration, at):
                counts["created" if row.pk is None else "updated"] += 1
                row.updated_at = at
                row.save()
        for stale in rows.values():
            found = _declaration_of(stale)
            if found is not None:  # its module was not imported yet, but it is there
                if _apply(stale, found, at):
                    stale.updated_at = at
                    stale.save()
                    counts["updated"] += 1
            elif stale.enabled:
                stale.enabled = False
                stale.disabled_reason = f"removed from the code (synced {at:%Y-%m-%d %H:%M} UTC)"
                stale.updated_at = at
                stale.save(update_fields=["enabled", "disabled_reason", "updated_at"])
                counts["disabled"] += 1
                logger.warning(
                    "schedule %s of %s is no longer declared: disabled, not deleted",
                    stale.name,
                    stale.workflow_class,
                    extra={"action": "schedule_disabled", "schedule": stale.pk},
                )
    if any(counts.values()):
        logger.info(
            "schedules synced: %s",
            ", ".join(f"{k}={v}" for k, v in counts.items() if v),
            extra={"action": "schedule_sync", **{f"schedules_{k}": v for k, v in counts.items()}},
        )
    return counts


def _declaration_of(row: Schedule) -> ticks.Schedule | None:
    """The row's declaration, its class imported from its path now: a class that nothing
    imported yet is not a removed one."""
    try:
        workflow = registry.resolve(row.workflow_class)
    except PgflowError:
        return None
    return next((item for item in workflow._pgflow_schedules if item.name == row.name), None)


def _apply(row: Schedule, declaration: ticks.Schedule, at: datetime) -> bool:
    """Copy ``declaration`` onto ``row``; True when anything changed. A changed rule, or a
    declaration back after it was removed, recomputes the next tick; paused stays the
    operator's choice."""
    rule_changed = (row.cron, row.every, row.timezone) != (
        declaration.cron or "",
        declaration.every,
        declaration.timezone,
    )
    values = {
        "cron": declaration.cron or "",
        "every": declaration.every,
        "timezone": declaration.timezone,
        "input": dict(declaration.input),
        "overlap": declaration.overlap,
        "catch_up": declaration.catch_up,
        "tenant": declaration.tenant,
        "enabled": True,
        "disabled_reason": "",
    }
    changed = row.pk is None or any(getattr(row, name) != value for name, value in values.items())
    # Declared again after it left the code: the ticks due while it was disabled are not
    # caught up, as a resumed schedule's are not.
    declared_again = row.pk is not None and not row.enabled
    for name, value in values.items():
        setattr(row, name, value)
    if rule_changed or declared_again or row.next_tick_at is None:
        row.next_tick_at = declaration.rule.next_after(at)
        changed = True
    return changed


# --- admin-made schedules ---------------------------------------------------------------------


# What the ticks write on a schedule, never an operator's form.
TICK_FIELDS = ("next_tick_at", "last_tick_at", "last_run_id", "buffered_tick_at")


def save(row: Schedule, *, now: datetime | None = None) -> Schedule:
    """Save an admin-made (or edited) schedule; a new or changed rule recomputes its next tick.
    Fields a declared ``pgflow.Schedule`` would refuse raise DefinitionError naming them."""
    at = now or store.now()
    found = ticks.problems(
        name=row.name,
        cron=row.cron or None,
        every=row.every,
        timezone=row.timezone,
        input=row.input,
        overlap=row.overlap,
        catch_up=row.catch_up,
        max_bytes=pgflow_settings.MAX_INPUT_BYTES,
    )
    if found:  # what a declared pgflow.Schedule refuses, refused here too
        raise DefinitionError(f"Schedule {row.name!r}: {'; '.join(found.values())}")
    try:  # its ticks start runs of this tenant: a key a run may have
        tenants.checked(row.tenant, "tenant")
    except (TypeError, ValueError) as exc:
        raise DefinitionError(f"Schedule {row.name!r}: {exc}") from None
    rule = row.rule()
    with db.atomic():
        before = None if row.pk is None else Schedule.objects.select_for_update().filter(pk=row.pk).first()
        if before is None:
            row.created_at = row.created_at or at
            row.next_tick_at = rule.next_after(at)
        else:
            # Under the row's lock, what the ticks wrote since the form was loaded is kept: a
            # tick fired meanwhile must not fire again, nor its open run be forgotten.
            for name in TICK_FIELDS:
                setattr(row, name, getattr(before, name))
            resumed = before.paused and not row.paused  # no catching up a pause
            if resumed or (before.cron, before.every, before.timezone) != (row.cron, row.every, row.timezone):
                row.next_tick_at = rule.next_after(at)
        row.updated_at = at
        row.save()
    return row


def delete(schedule_ids: Iterable[int]) -> int:
    """Delete these schedules and their ticks; returns how many were deleted. Each row's lock
    is taken first (in id order): a tick firing now holds it, so the delete waits for it to
    commit and then collects its tick too, instead of deleting the ticks it saw, then the
    row, and failing on the tick that committed meanwhile (an IntegrityError). A schedule
    deleted first is skipped by the workers' tick claim (SKIP LOCKED), and is gone after."""
    with db.atomic():
        locked = list(
            Schedule.objects.select_for_update()
            .filter(pk__in=list(schedule_ids))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        Schedule.objects.filter(pk__in=locked).delete()
    return len(locked)


def set_paused(schedule_id: int, paused: bool, *, now: datetime | None = None) -> Schedule:
    """Pause or resume a schedule. Resuming moves the next tick past ``now``: ticks due
    while paused are not caught up."""
    at = now or store.now()
    with db.atomic():
        row = Schedule.objects.select_for_update().get(pk=schedule_id)
        if row.paused != paused:
            row.paused = paused
            if not paused:
                row.next_tick_at = row.rule().next_after(at)
            row.updated_at = at
            row.save(update_fields=["paused", "next_tick_at", "updated_at"])
    return row


def start_now(schedule_id: int, *, actor: Any = None, now: datetime | None = None) -> WorkflowRun:
    """Start a run of the schedule at once, outside its ticks, with a key of its own
    (``schedule:<id>:now:<time>:<nonce>``); recorded as a ``manual`` tick."""
    at = now or store.now()
    with db.atomic():
        row = Schedule.objects.select_for_update().get(pk=schedule_id)
        workflow = registry.resolve(row.workflow_class)
        key = f"schedule:{row.pk}:now:{at.astimezone(UTC).isoformat()}:{uuid.uuid4().hex[:8]}"
        with tenants.acting_for(row.tenant):
            run = workflow.start(input=dict(row.input), key=key)
        ScheduleTick.objects.create(
            schedule=row,
            tick_at=at,
            outcome=ScheduleTick.Outcome.MANUAL,
            run=run,
            started_at=store.now(),
            details={"actor": store.actor_name(actor)},
        )
        row.last_run = run
        row.save(update_fields=["last_run"])
    return run


# --- ticks ------------------------------------------------------------------------------------


def next_due() -> datetime | None:
    """The earliest next tick of the enabled, unpaused schedules (one index probe)."""
    return Schedule.objects.filter(enabled=True, paused=False).aggregate(at=Min("next_tick_at"))["at"]


def _due(at: datetime) -> Q:
    held = Q(buffered_tick_at__isnull=False) & (Q(last_run__isnull=True) | ~Q(last_run__status__in=_OPEN))
    return Q(enabled=True, paused=False) & (Q(next_tick_at__lte=at) | held)


def fire_due(*, now: datetime | None = None, limit: int = BATCH) -> int:
    """Claim up to ``limit`` due schedules and act on their due ticks, in one transaction,
    each schedule in a savepoint of its own: one that cannot fire never holds up the others.
    Returns how many schedules were claimed (call again while it returns ``limit``)."""
    with db.atomic():
        at = now or store.now()
        rows = list(
            Schedule.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(_due(at))
            .order_by("next_tick_at")[:limit]
        )
        for row in rows:
            _fire_alone(row, at)
    return len(rows)


def fire(schedule_id: int, *, now: datetime | None = None) -> list[WorkflowRun]:
    """Act on one schedule's due ticks as of ``now`` (blocking on its lock); the runs started."""
    with db.atomic():
        row = Schedule.objects.select_for_update(of=("self",)).get(pk=schedule_id)
        return _fire_alone(row, now or store.now())


def _fire_alone(row: Schedule, at: datetime) -> list[WorkflowRun]:
    """``_fire`` in a savepoint. A refused start is already a recorded tick (``_start``); this
    catches the rest (a row whose rule no longer reads, a failing write): the schedule's work
    is rolled back, the failure recorded as a skipped tick and its next tick moved on, so it
    is not first in line again at the next look and the batch's other schedules still fire.
    A statement stopped (``db.stopped``) is no failure of the schedule's: its work is rolled
    back and its ticks stay due, to fire at the next look."""
    try:
        with db.atomic():
            return _fire(row, at)
    except Exception as exc:  # noqa: BLE001 - one schedule's failure is recorded on that schedule
        # (a lost connection fails the writes below too, and that reaches the caller)
        problem = exc
    if db.stopped(problem):
        logger.warning(
            "schedule %s of %s: a statement was stopped (%s); its due ticks are tried again",
            row.name,
            row.workflow_class,
            " ".join(str(problem).split()),
            extra={"action": "schedule_stopped", "schedule": row.pk},
        )
        row.refresh_from_db()  # the savepoint's rollback undid what _fire wrote; so must the instance
        return []
    logger.error(
        "schedule %s of %s could not fire: %s: %s",
        row.name,
        row.workflow_class,
        type(problem).__name__,
        problem,
        extra={"action": "schedule_failed", "schedule": row.pk},
    )
    row.refresh_from_db()  # the savepoint's rollback undid what _fire wrote; so must the instance
    with db.atomic():
        try:
            nxt: datetime | None = row.rule().next_after(at)
        except DefinitionError:
            nxt = None  # no next tick to compute: out of rotation until the row is fixed
        _record(row, row.next_tick_at or at, ScheduleTick.Outcome.SKIPPED, reason=_refusal(problem, "the tick failed"))
        row.next_tick_at, row.buffered_tick_at = nxt, None
        row.save(update_fields=["next_tick_at", "buffered_tick_at"])
    return []


def _refusal(exc: BaseException, what: str = "the start was refused") -> str:
    """A refused tick's reason, as PostgreSQL can store it."""
    return str(jsonvalue.storable(f"{what}: {type(exc).__name__}: {exc}"))


def _fire(row: Schedule, at: datetime) -> list[WorkflowRun]:
    """Under the schedule's lock: start the held buffer_one tick if its run ended, then the
    due ticks by ``ticks.plan`` and the overlap policy; store the next tick."""
    started: list[WorkflowRun] = []
    try:
        workflow = registry.resolve(row.workflow_class)
    except PgflowError as exc:
        workflow = None
        problem = str(exc)
    open_run = row.last_run_id is not None and WorkflowRun.objects.filter(pk=row.last_run_id, status__in=_OPEN).exists()
    if row.buffered_tick_at is not None and not open_run and workflow is not None:
        run = _start(row, workflow, row.buffered_tick_at, buffered=True)
        row.buffered_tick_at = None
        if run is not None:
            started.append(run)
            open_run = True
    if row.next_tick_at is None or row.next_tick_at > at:
        row.save(update_fields=["buffered_tick_at", "last_run", "last_tick_at"])
        return started
    plan = ticks.plan(row.rule(), next_tick=row.next_tick_at, now=at, catch_up=row.catch_up)
    if plan.missed:
        _record(
            row,
            plan.first_missed,
            ScheduleTick.Outcome.MISSED,
            count=plan.missed,
            last=plan.last_missed.isoformat() if plan.last_missed else None,
        )
    for tick in plan.start:
        if workflow is None:
            _record(row, tick, ScheduleTick.Outcome.SKIPPED, reason=problem)
            continue
        action = ticks.overlap_action(row.overlap, previous_open=open_run, buffered=row.buffered_tick_at is not None)
        if action == ticks.SKIP:
            _record(
                row, tick, ScheduleTick.Outcome.SKIPPED, reason="the previous run is open", previous=row.last_run_id
            )
        elif action == ticks.BUFFER:
            row.buffered_tick_at = tick
            _record(row, tick, ScheduleTick.Outcome.BUFFERED, previous=row.last_run_id)
        else:
            if action == ticks.CANCEL_AND_START and row.last_run_id is not None:
                _cancel_previous(row, tick)
            run = _start(row, workflow, tick)
            if run is not None:
                started.append(run)
                open_run = True
        row.last_tick_at = tick
    row.next_tick_at = plan.next_tick
    row.save(update_fields=["next_tick_at", "last_tick_at", "last_run", "buffered_tick_at"])
    return started


def _start(row: Schedule, workflow: type[Workflow], tick: datetime, *, buffered: bool = False) -> WorkflowRun | None:
    """Start the tick's run in a savepoint; a start that raises (a Singleton(on_conflict="skip")
    whose key an open run holds, an input over MAX_INPUT_BYTES, a key method that fails) is
    recorded as a skipped tick with the reason, and None is returned."""
    details: dict[str, Any] = {"buffered": True} if buffered else {}
    try:
        with db.atomic(), tenants.acting_for(row.tenant):
            run = workflow.start(input=dict(row.input), key=run_key(row.pk, tick))
    except Exception as exc:  # noqa: BLE001 - whatever refused the start is the tick's reason
        # (the savepoint is rolled back; a lost connection fails this write too, and that
        # reaches the caller with the tick still due)
        if db.stopped(exc):
            raise  # a lock or statement timeout, a cancel: not the tick's refusal (_fire_alone)
        _record(row, tick, ScheduleTick.Outcome.SKIPPED, reason=_refusal(exc), **details)
        return None
    # The tick's key may name a run started before this transaction: held while it is linked.
    store.hold_run(run.pk, by=f"schedule {row.pk}'s tick at {tick.isoformat()}")
    ScheduleTick.objects.create(
        schedule=row,
        tick_at=tick,
        outcome=ScheduleTick.Outcome.STARTED,
        run=run,
        started_at=run.created_at,
        details=details,
    )
    row.last_run = run
    return run


def _cancel_previous(row: Schedule, tick: datetime) -> None:
    try:
        store.cancel(row.last_run_id, actor=f"schedule:{row.pk}")  # type: ignore[arg-type]
    except InvalidTransition:
        return  # it ended on its own meanwhile
    _record(row, tick, ScheduleTick.Outcome.CANCELLED_PREVIOUS, run_id=row.last_run_id)


def _record(row: Schedule, tick: datetime | None, outcome: str, *, run_id: int | None = None, **details: Any) -> None:
    ScheduleTick.objects.create(
        schedule=row,
        tick_at=tick or store.now(),
        outcome=outcome,
        run_id=run_id,
        started_at=store.now(),
        details=details,
    )


# --- the worker's schedule thread -------------------------------------------------------------


def tick_loop(stopping: threading.Event) -> None:
    """Sync, then fire due ticks until ``stopping`` is set, sleeping until the next tick
    (at most MAX_SLEEP). Database errors are logged and retried; the caller closes nothing."""
    synced = False
    while not stopping.is_set():
        wait = MAX_SLEEP
        try:
            if not synced:
                sync()
                synced = True
            began = store.now()
            while fire_due() == BATCH and not stopping.is_set():
                pass
            nxt = next_due()
            if nxt is not None and nxt <= began:  # due before the pass, still due: not ours just now
                wait = STILL_DUE
            elif nxt is not None:
                wait = max(0.0, min(MAX_SLEEP, (nxt - store.now()).total_seconds()))
        except DatabaseError as exc:
            logger.warning("schedules failed: %s", " ".join(str(exc).split()), extra={"action": "schedules_failed"})
            connection.close()
        except Exception:
            logger.exception("schedules failed", extra={"action": "schedules_failed"})
        stopping.wait(wait)


def upcoming(row: Schedule, count: int = 5, *, now: datetime | None = None) -> list[datetime]:
    """The next ``count`` ticks of ``row`` from its next tick on (for the admin's preview)."""
    start = row.next_tick_at or row.rule().next_after(now or store.now())
    return [start, *row.rule().upcoming(start, count - 1)]


__all__ = [
    "declared",
    "delete",
    "workflow_classes",
    "fire",
    "fire_due",
    "next_due",
    "parse_key",
    "run_key",
    "save",
    "set_paused",
    "start_now",
    "sync",
    "tick_loop",
    "upcoming",
]
