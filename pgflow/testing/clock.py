"""Moving pgflow's time forward in a test, in the database (the ``pgflow_clock`` fixture).

pgflow compares its rows' times with the clock in Python (``timezone.now()``) and in SQL
(a ``now`` parameter), in this process and in every worker: freezing Python's clock moves
neither PostgreSQL's nor another process's. So :meth:`Clock.advance` moves the rows
instead: every time pgflow wrote, in pgflow's own tables only, goes back by the advance,
which is the same to every reader as the clock going forward by it. It moves in stops,
one at each moment something falls due within the advance, and at each runs, once, what
is due: the sweep (lost leases, wait timeouts, alerts, retention …), the schedules' ticks,
and the due steps, here in the test's process.

It changes no run's state itself, only times: every transition it causes is the sweep's
or a step's own, through ``pgflow.store`` as a worker would make it. It never touches a
table pgflow does not own, nor a column outside :data:`TIMES`, and it works in the test's
transaction (Django's ``TestCase``, pytest-django's ``db``) as on committed rows
(``transactional_db``, where a real worker sees the advance too).

A time read from a row written before an advance is that much earlier than it was; a
test compares times with :attr:`Clock.now` only for rows written since its last advance.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.db import OperationalError, connections, models, transaction
from django.db.models import Min

from .. import db, rollup, schedules, store
from ..core.states import RunStatus, StepStatus
from ..models import AlertDelivery, QueueState, Step
from ..observability import alerts
from ..runtime import sweep
from ..runtime.runner import Runner
from ..store import history
from .inline import run_inline

# What becomes of each column when the clock moves by D.
SHIFT = "shift"  # back by D
HOURS = "hours"  # back by D's whole hours: the rollup's rows sit on the hour
ELEMENTS = "elements"  # a timestamptz[]: each element back by D
KEEP = "keep"  # left alone (the reason is on the column)


@dataclass(frozen=True)
class Column:
    model: str  # a model of the pgflow app
    field: str
    how: str
    compared: str  # what compares it with the clock, or why it is kept


# Every time column of pgflow's models, and what compares it with the clock. A DateTimeField
# added to a pgflow model must be listed here (tests/integration/test_pytest_plugin.py
# fails until it is), or an advance would leave it behind.
TIMES: tuple[Column, ...] = (
    Column("WorkflowRun", "created_at", SHIFT, "insights windows, rollup"),
    Column("WorkflowRun", "updated_at", SHIFT, "the run list's order"),
    Column("WorkflowRun", "finished_at", SHIFT, "retention (RETENTION), rollup"),
    Column("Step", "created_at", SHIFT, "history order, insights"),
    Column("Step", "scheduled_at", SHIFT, "the claim: due when scheduled_at <= now (wait, wait_until, backoff)"),
    Column("Step", "started_at", SHIFT, "phases, the timeline"),
    Column("Step", "finished_at", SHIFT, "rollup, phases"),
    Column("Step", "waiting_since", SHIFT, "the waiting phase, phase_p95 alerts"),
    Column("Step", "deadline_at", SHIFT, "the sweep: a signal wait past it gets its on_timeout"),
    Column("Step", "lease_expires_at", SHIFT, "the sweep: an attempt past its lease is lost and re-run"),
    Column("Step", "throttled_until", SHIFT, "the throttled phase"),
    Column("Event", "created_at", SHIFT, "the audit trail's order"),
    Column("Signal", "received_at", SHIFT, "the mailbox's order"),
    Column("Signal", "consumed_at", SHIFT, "the signal list"),
    Column("Gate", "served_at", SHIFT, "the claim's round-robin between keys"),
    Column("Gate", "starts", ELEMENTS, "the claim: a Rate's starts within its window"),
    Column("QueueState", "changed_at", SHIFT, "the queues page"),
    Column("Batch", "created_at", SHIFT, "the batch list"),
    Column("Batch", "finished_at", SHIFT, "the sweep: a finished batch's lost callback after FAN_OUT_GRACE"),
    Column("BatchMember", "enqueued_at", SHIFT, "the sweep: members never enqueued, after FAN_OUT_GRACE"),
    Column("BatchMember", "finished_at", SHIFT, "the batch page"),
    Column("RollupState", "rolled_until", HOURS, "the rollup's watermark: the hours rolled"),
    Column("HistoryState", "filed_until", SHIFT, "the filing's watermark (an advance un-files history first)"),
    Column("RunRollup", "start", HOURS, "insights windows; retention"),
    Column("StepRollup", "start", HOURS, "insights windows; retention"),
    Column("FailureRollup", "start", HOURS, "insights windows; retention"),
    # A tick sits on a wall-clock grid (a cron expression, or an interval counted from the
    # epoch): shifted by an advance that is not a whole number of ticks it would fall off
    # the grid, and the next tick pgflow works out from it would be on neither. So a
    # schedule keeps the clock's own time, and the clock fires its ticks at Clock.now.
    Column("Schedule", "next_tick_at", KEEP, "fired at Clock.now: its tick due then starts"),
    Column("Schedule", "last_tick_at", KEEP, "in the clock's time, with next_tick_at"),
    Column("Schedule", "buffered_tick_at", KEEP, "in the clock's time, with next_tick_at"),
    Column("Schedule", "created_at", KEEP, "in the clock's time, with next_tick_at"),
    Column("Schedule", "updated_at", KEEP, "in the clock's time, with next_tick_at"),
    Column("ScheduleTick", "tick_at", KEEP, "in the clock's time, with next_tick_at"),
    Column("ScheduleTick", "started_at", KEEP, "in the clock's time, with next_tick_at"),
    Column("Worker", "started_at", SHIFT, "the workers page"),
    Column("Worker", "heartbeat_at", SHIFT, "live workers (LEASE), forgotten after an hour; a live one beats again"),
    Column("Offer", "until", KEEP, "in real time: a live worker renews its offer, and a start takes it until then"),
    Column("AccessToken", "created_at", SHIFT, "the tokens page"),
    Column("AccessToken", "last_used_at", SHIFT, "the tokens page"),
    Column("AccessToken", "revoked_at", SHIFT, "the tokens page"),
    Column("AlertRule", "muted_until", SHIFT, "alerts: a muted rule sends nothing until then"),
    Column("AlertRule", "created_at", SHIFT, "the rules page"),
    Column("Alert", "fired_at", SHIFT, "alerts: a rule's cooldown after its last firing"),
    Column("Alert", "resolved_at", SHIFT, "the alerts page"),
    Column("Alert", "acknowledged_at", SHIFT, "the alerts page"),
    Column("AlertDelivery", "next_at", SHIFT, "alerts: a delivery due (and its retries' backoff)"),
    Column("AlertDelivery", "delivered_at", SHIFT, "the alerts page"),
    Column("AlertDelivery", "created_at", SHIFT, "the alerts page"),
    Column("SavedView", "created_at", SHIFT, "the run list's saved views"),
)

HOUR = timedelta(hours=1)
MAX_ROUNDS = 1000  # passes over the due steps at one stop (one attempt of each run a pass)
MAX_STOPS = 1000  # stops of one advance
_PAST = timedelta(microseconds=1)  # a lease is lost once the clock is past its end
_RETRIES = 3  # a shift that meets a worker's locks in the other order (a deadlock) is tried again


def time_columns() -> list[tuple[str, str]]:
    """``(model, field)`` of every time column of pgflow's models: DateTimeFields and
    timestamptz arrays (what :data:`TIMES` must list)."""
    found = []
    for model in apps.get_app_config("pgflow").get_models():
        for column in model._meta.concrete_fields:
            if isinstance(column, models.DateTimeField) or getattr(column, "element", None) == "timestamptz":
                found.append((model.__name__, column.name))
    return found


@dataclass(frozen=True)
class Advanced:
    """What one :meth:`Clock.advance` did."""

    now: datetime  # Clock.now after it
    sweep: dict[str, int]  # the sweep's counts (lost_leases, wait_timeouts, purged_runs, alerts …)
    schedules: int  # schedules whose due ticks were acted on
    runs: list[int] = field(default_factory=list)  # the runs whose due steps ran here


class Clock:
    """pgflow's clock in a test: :attr:`now`, and :meth:`advance` to move it forward.

    Use it from the ``pgflow_clock`` fixture, or make one in a Django ``TestCase``
    (``Clock()``): it keeps its total advance, nothing else.
    """

    def __init__(self) -> None:
        self.advanced = timedelta(0)

    @property
    def now(self) -> datetime:
        """The clock's time: the real time plus every advance so far. The schedules' ticks
        are in this time; every other row keeps the real clock's (moved back instead), so a
        time read from a row written before an advance is that much earlier than this."""
        return store.now() + self.advanced

    def advance(self, by: timedelta | None = None, /, *, run_due: bool = True, **units: float) -> Advanced:
        """Move pgflow's time forward by ``by`` (a timedelta), or by ``days=``, ``hours=``,
        ``minutes=``, ``seconds=``, running what comes due on the way, in order.

        What is due now runs first; then the clock moves to the next moment something
        falls due within the advance (a delayed step, a wait's deadline, a lease's end, an
        alert's delivery) and runs what is due then, and so on to the end: so a step that
        runs at +1 h and then waits a day times out at +1 d 1 h, as it would live. At each
        stop it runs, once, the sweep, the schedules' due ticks and the due steps (here, each
        claimed as a worker claims it; a paused queue's wait for its resume). Schedules make no stop: ticks that
        fall due between two stops are due at the next, as after a worker's downtime
        (within ``catch_up`` they start, older ones are recorded missed).

        ``run_due=False`` only moves the rows (a ``pgflow_worker`` then does the rest).
        Returns what it did."""
        delta = _delta(by, units)
        if not run_due:
            _shift(delta)
            self.advanced += delta
            _wake()
            return Advanced(now=self.now, sweep={}, schedules=0)
        swept: Counter[str] = Counter()
        fired = 0
        ran: list[int] = []
        schedules.sync(now=self.now)  # a declared schedule with no row yet (a flushed table) exists from now
        remaining = delta
        for _ in range(MAX_STOPS):
            counts, ticks, runs = self._run_what_is_due()
            swept.update(counts)
            fired += ticks
            ran.extend(run for run in runs if run not in ran)
            if not remaining:
                break
            due = next_due()
            step = remaining if due is None else min(remaining, max(due - store.now(), timedelta(0)))
            _shift(step)
            self.advanced += step
            remaining -= step
        else:
            raise RuntimeError(
                f"advance() made {MAX_STOPS} stops and is {remaining} short of its end: something falls due "
                "again and again (a loop of short waits?); advance in smaller steps, or with run_due=False"
            )
        _wake()
        return Advanced(now=self.now, sweep=dict(swept), schedules=fired, runs=ran)

    def run_due(self) -> Advanced:
        """Run what is due now, without moving the clock: ``advance(timedelta(0))``."""
        return self.advance(timedelta(0))

    def _run_what_is_due(self) -> tuple[dict[str, int], int, list[int]]:
        counts = sweep.run()
        _deliver_alerts()
        fired = 0
        while True:
            claimed = schedules.fire_due(now=self.now)
            fired += claimed
            if claimed < schedules.BATCH:
                break
        return counts, fired, run_due_steps()


def next_due() -> datetime | None:
    """The next moment after now that something the clock stops for falls due: a running
    run's delayed attempt, a wait's deadline, a lease's end (the sweep takes it once past),
    an alert delivery's next try."""
    at = store.now()
    steps = Step.objects.filter(run__status=RunStatus.RUNNING)
    lease = (
        Step.objects.live()
        .filter(status=StepStatus.IN_PROGRESS, lease_expires_at__gte=at)
        .aggregate(m=Min("lease_expires_at"))["m"]
    )
    moments = [
        steps.filter(status=StepStatus.SCHEDULED, scheduled_at__gt=at).aggregate(m=Min("scheduled_at"))["m"],
        steps.filter(status=StepStatus.WAITING, deadline_at__gt=at).aggregate(m=Min("deadline_at"))["m"],
        lease + _PAST if lease is not None else None,
        AlertDelivery.objects.filter(next_at__gt=at).aggregate(m=Min("next_at"))["m"],
    ]
    return min((moment for moment in moments if moment is not None), default=None)


def _delta(by: Any, units: dict[str, float]) -> timedelta:
    accepted = {"days", "hours", "minutes", "seconds"}
    unknown = sorted(set(units) - accepted)
    if unknown:
        raise TypeError(f"advance() takes a timedelta or {', '.join(sorted(accepted))}=, got {', '.join(unknown)}=")
    if by is not None and units:
        raise TypeError("advance() takes a timedelta or units (days=, hours= …), not both")
    if by is None:
        if not units:
            raise TypeError("advance() needs how far: a timedelta, or days=, hours=, minutes=, seconds=")
        by = timedelta(**units)
    if not isinstance(by, timedelta):
        raise TypeError(f"advance() takes a timedelta (or days=, hours= …), got {by!r}")
    if by < timedelta(0):
        raise ValueError(f"the clock only moves forward: advance() takes a timedelta of 0 or more, got {by}")
    return by


def _database() -> str:
    """The alias pgflow's tables are on (``PGFLOW["DATABASE"]``)."""
    return db.alias()


def _statements(delta: timedelta) -> list[tuple[str, dict[str, Any]]]:
    """One UPDATE per table of :data:`TIMES`' moved columns."""
    quote = connections[_database()].ops.quote_name
    params = {"d": delta, "h": delta // HOUR * HOUR}
    by_model: dict[str, list[Column]] = {}
    for column in TIMES:
        if column.how != KEEP:
            by_model.setdefault(column.model, []).append(column)
    statements = []
    for name, columns in by_model.items():
        meta = apps.get_model("pgflow", name)._meta
        sets = []
        for column in columns:
            db = quote(meta.get_field(column.field).column)
            if column.how == ELEMENTS:
                sets.append(f"{db} = ARRAY(SELECT t - %(d)s FROM unnest({db}) WITH ORDINALITY AS u(t, n) ORDER BY n)")
            else:
                sets.append(f"{db} = {db} - %({'h' if column.how == HOURS else 'd'})s")
        statements.append((f"UPDATE {quote(meta.db_table)} SET {', '.join(sets)}", params))
    return statements


def _shift(delta: timedelta) -> None:
    """Every moved column back by ``delta``, in one transaction (a savepoint inside the test's)."""
    if not delta:
        return
    for attempt in range(_RETRIES):
        try:
            alias = _database()
            with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
                # A run's day of history moves with its finished_at: the sweep files it again.
                history.unfile()
                for sql, params in _statements(delta):
                    cursor.execute(sql, params)
            break
        except OperationalError as exc:  # a worker's transaction took the rows in the other order
            if "deadlock" not in str(exc) or attempt == _RETRIES - 1:
                raise
    if delta % HOUR:
        # The rollup moved by whole hours, the rows it counted by all of delta (up to an hour
        # further back): count its rolled hours again from those rows, from the hour before
        # its first, so the insights add up as before.
        mark = apps.get_model("pgflow", "RollupState").objects.values_list("rolled_until", flat=True).first()
        first = apps.get_model("pgflow", "RunRollup").objects.order_by("start").values_list("start", flat=True).first()
        if mark is not None and first is not None:
            rollup.rebuild(first - HOUR, mark)


def _deliver_alerts() -> None:
    """Send the alerts the sweep queued, here: the sweep's own delivery thread has its own
    connection, which cannot see the test's uncommitted rows; then wait for that thread, so
    nothing sends after the test."""
    alerts.deliver_due()
    for thread in threading.enumerate():
        if thread.name == "pgflow-alerts":
            thread.join(30)


def run_due_steps() -> list[int]:
    """Run every running run's due attempts here, as a worker would (one claim each, a paused
    queue's left alone), and the members of the batches opened here, until nothing is due
    that was not tried already; returns the runs that ran."""
    runner = Runner()
    ran: list[int] = []
    tried: set[tuple[int, int, str]] = set()
    for _ in range(MAX_ROUNDS):
        due = sorted(_due() - tried)
        if not due:
            break
        for run_id, step_id, status in due:
            step = Step.objects.get(pk=step_id)
            if status == StepStatus.WAITING:
                run_inline(step, skip_waits=False)
            else:
                held = store.claim_step(step_id, worker=store.TESTING_WORKER)
                if held is not None:
                    runner.execute(held)
            if run_id not in ran:
                ran.append(run_id)
        # An attempt still open after its turn cannot move here (a child waits for a signal,
        # a limit holds it): it is not tried again. What it led to is due in the next round.
        tried.update(due)
    return ran


def _due() -> set[tuple[int, int, str]]:
    """``(run, attempt, status)`` of the running runs' due attempts outside paused queues, and of
    their fan-outs whose batch was opened here (its members run here too; a worker's went
    to django-q2)."""
    running = Step.objects.filter(run__status=RunStatus.RUNNING)
    paused = QueueState.objects.filter(paused=True).values_list("queue", flat=True)
    due = running.filter(status=StepStatus.SCHEDULED, scheduled_at__lte=store.now()).exclude(queue__in=paused)
    fanned = running.filter(status=StepStatus.WAITING, batch__isnull=False, worker=store.TESTING_WORKER)
    return {*due.values_list("run_id", "pk", "status"), *fanned.values_list("run_id", "pk", "status")}


def _wake() -> None:
    """Wake the workers of every queue with a due attempt: a real worker sleeping until the
    next due time it knew of would otherwise wait for its poll."""
    queues = (
        Step.objects.live()
        .filter(status=StepStatus.SCHEDULED, scheduled_at__lte=store.now())
        .values_list("queue", flat=True)
    )
    for queue in sorted(set(queues)):
        store.notify(queue)
