"""pgflow's tables. Rows are written only by ``pgflow.store`` (one writer of state);
everything here reads. The rollup tables at the end hold counts derived from those rows,
written only by ``pgflow.rollup``.

A run's row is its lock: every state change of a run happens in a short transaction
holding ``SELECT … FOR UPDATE`` on it.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q

from .core.events import EventKind
from .core.states import OPEN_STEP, RunStatus, StepStatus

if TYPE_CHECKING:
    from .workflow import Workflow

_OPEN_STEP = sorted(s.value for s in OPEN_STEP)  # sorted: a stable migration


class WorkflowRunQuerySet(models.QuerySet["WorkflowRun"]):
    def open(self) -> WorkflowRunQuerySet:
        return self.filter(status__in=[RunStatus.RUNNING, RunStatus.PAUSED])

    def for_class(self, workflow: type[Workflow] | str) -> WorkflowRunQuerySet:
        path = workflow if isinstance(workflow, str) else workflow.workflow_path()
        return self.filter(workflow_class=path)


class WorkflowRun(models.Model):
    workflow_class = models.CharField(max_length=255, help_text="dotted path of the Workflow subclass")
    status = models.CharField(
        max_length=16,
        choices=[(s.value, s.name.replace("_", " ").title()) for s in RunStatus],
        default=RunStatus.RUNNING,
    )
    current_step = models.CharField(max_length=200, null=True, blank=True)
    # Indexed by pgflow_run_subject, whose first column it is.
    subject_type = models.ForeignKey(ContentType, null=True, blank=True, on_delete=models.SET_NULL, db_index=False)
    subject_id = models.CharField(max_length=64, null=True, blank=True)
    subject = GenericForeignKey("subject_type", "subject_id")
    input = models.JSONField(default=dict, blank=True)
    key = models.CharField(max_length=255, null=True, blank=True, help_text="idempotency key, unique per class")
    definition_digest = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # Why the run is paused, in words, for the dashboard's stuck list.
    paused_reason = models.TextField(blank=True, default="")
    # The W3C traceparent current when start() was called: every attempt's span joins that trace.
    traceparent = models.CharField(max_length=55, null=True, blank=True)
    # run.rerun_from(): the run this one re-runs (its outputs before the re-run step were copied).
    rerun_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns", db_index=False
    )
    # batch.add_run() in a fan_out: the run whose step waits on this one as a batch member.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children", db_index=False
    )
    # The class's pgflow.Singleton key for this run (None: no singleton, or its key was None).
    singleton_key = models.CharField(max_length=200, null=True, blank=True)

    objects = WorkflowRunQuerySet.as_manager()

    class Meta:
        db_table = "pgflow_run"
        verbose_name = "workflow run"
        constraints = [
            models.UniqueConstraint(
                fields=["workflow_class", "key"], condition=Q(key__isnull=False), name="pgflow_run_unique_key"
            ),
        ]
        indexes = [
            models.Index(fields=["created_at"], name="pgflow_run_created"),
            models.Index(fields=["status", "created_at"], name="pgflow_run_status_created"),
            models.Index(fields=["workflow_class", "created_at"], name="pgflow_run_class_created"),
            models.Index(fields=["finished_at"], name="pgflow_run_finished", condition=Q(finished_at__isnull=False)),
            models.Index(fields=["subject_type", "subject_id"], name="pgflow_run_subject"),
            # Most runs have no parent and re-run nothing: only the rows that do are indexed.
            models.Index(fields=["parent"], name="pgflow_run_parent", condition=Q(parent__isnull=False)),
            models.Index(fields=["rerun_of"], name="pgflow_run_rerun_of", condition=Q(rerun_of__isnull=False)),
            models.Index(
                fields=["workflow_class", "singleton_key"],
                name="pgflow_run_singleton",
                condition=Q(singleton_key__isnull=False, status__in=["running", "paused"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_class.rsplit('.', 1)[-1]} #{self.pk}"

    @property
    def steps(self) -> models.QuerySet[Step]:
        return self.step_set.order_by("created_at", "id")

    @property
    def events(self) -> models.QuerySet[Event]:
        return self.event_set.order_by("created_at", "id")

    @property
    def workflow_name(self) -> str:
        return self.workflow_class.rsplit(".", 1)[-1]

    def last_error(self) -> dict[str, Any] | None:
        """The run's current error: the error columns of its latest attempt, or None.

        A later successful attempt or a resume starts a fresh attempt, which clears this
        view; the failed attempt keeps its error in the history.
        """
        latest = (
            self.step_set.order_by("-created_at", "-id")
            .values("step_name", "attempt", "error_class", "error_message", "error_causes")
            .first()
        )
        if latest is None or latest["error_class"] is None:
            return None
        return dict(latest)

    def workflow(self) -> type[Workflow]:
        """The run's Workflow class; raises WorkflowNotFound when its path no longer imports."""
        from .registry import resolve

        return resolve(self.workflow_class)

    # Operator controls: each is one transition under the run's lock, written by the store.
    # A facade over a higher layer (the store imports these models), so each imports it when called.
    def pause(self, actor: Any = None) -> WorkflowRun:
        from . import store

        return store.pause(self.pk, actor=actor, into=self)

    def resume(self, actor: Any = None) -> WorkflowRun:
        from . import store

        return store.resume(self.pk, actor=actor, into=self)

    def cancel(self, actor: Any = None) -> WorkflowRun:
        from . import store

        return store.cancel(self.pk, actor=actor, into=self)

    def skip_step(self, actor: Any = None) -> WorkflowRun:
        from . import store

        return store.skip_step(self.pk, actor=actor, into=self)

    def rerun_from(self, step_name: str, *, input: Any = None, actor: Any = None) -> WorkflowRun:
        """A new run of the same class and subject, linked by ``rerun_of``, starting at
        ``step_name`` with the outputs of the steps before it copied from this run;
        ``input=None`` keeps this run's input. This run must be finished, cancelled or
        paused (a paused one is cancelled, "re-run as #N")."""
        from . import store

        return store.rerun_from(self.pk, step_name, input=input, actor=actor)

    def rerun_plan(self, step_name: str) -> dict[str, Any]:
        """What ``rerun_from(step_name)`` would copy (``copied``: ``{name: output}``), what it
        has nothing to copy for (``not_copied``), and ``definition_changed``; writes nothing."""
        from . import store

        return store.rerun_plan(self, step_name)

    @property
    def outputs(self) -> dict[str, Any]:
        """``{step_name: output}`` of the run's completed attempts (the latest of each step wins)."""
        rows = (
            self.step_set.filter(status=StepStatus.COMPLETED)
            .order_by("created_at", "id")
            .values_list("step_name", "output")
        )
        return dict(rows)


class Step(models.Model):
    """One attempt of one step of a run."""

    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, db_index=False)  # pgflow_step_run leads with it
    step_name = models.CharField(max_length=200)
    attempt = models.PositiveIntegerField(default=1)
    status = models.CharField(
        max_length=16,
        choices=[(s.value, s.name.replace("_", " ").title()) for s in StepStatus],
        default=StepStatus.SCHEDULED,
    )
    outcome = models.CharField(max_length=32, blank=True, default="")
    queue = models.CharField(max_length=100)
    priority = models.IntegerField(default=0)
    created_at = models.DateTimeField()
    scheduled_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    waiting_since = models.DateTimeField(null=True, blank=True)
    # A signal wait's deadline (wait_timeout).
    deadline_at = models.DateTimeField(null=True, blank=True)
    # The claim: who runs the attempt, until when, and the fencing token every later write checks.
    worker = models.CharField(max_length=200, blank=True, default="")
    claim_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    error_class = models.CharField(max_length=255, null=True, blank=True)
    error_message = models.TextField(null=True, blank=True)
    error_backtrace = models.TextField(null=True, blank=True)
    error_causes = models.JSONField(null=True, blank=True)
    batch = models.ForeignKey(
        "Batch", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    signal = models.ForeignKey(
        "Signal", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    # Flow control (pgflow.core.limits): the gates the claim must let the attempt through,
    # worked out when it was scheduled; '' for none. ``gated`` splits the claim's indexes.
    gated = models.BooleanField(default=False, db_default=False)
    gate = models.CharField(max_length=320, blank=True, default="", db_default="")
    gate_max = models.PositiveIntegerField(default=0, db_default=0)
    rate_gate = models.CharField(max_length=320, blank=True, default="", db_default="")
    rate_limit = models.PositiveIntegerField(default=0, db_default=0)
    rate_per = models.FloatField(default=0, db_default=0.0)
    # When a limit let the due attempt through: throttled from scheduled_at until then, queued after.
    throttled_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "pgflow_step"
        constraints = [
            # At most one open attempt per run: the engine's central invariant, held by the database.
            models.UniqueConstraint(fields=["run"], condition=Q(status__in=_OPEN_STEP), name="pgflow_step_one_open"),
        ]
        indexes = [
            # Shaped like the claim query: due rows of a queue, by priority then due time.
            models.Index(
                models.F("queue"),
                models.F("priority").desc(),
                models.F("scheduled_at"),
                models.F("id"),
                name="pgflow_step_claim",
                condition=Q(status=StepStatus.SCHEDULED, gated=False),
            ),
            # The gated due rows, one group per (queue, gate, rate_gate): the claim walks the
            # groups (a loose scan) and takes as many of each as its gates let through.
            models.Index(
                models.F("queue"),
                models.F("gate"),
                models.F("rate_gate"),
                models.F("priority").desc(),
                models.F("scheduled_at"),
                models.F("id"),
                name="pgflow_step_gated",
                condition=Q(status=StepStatus.SCHEDULED, gated=True),
            ),
            # Scheduled rows of a queue by due time, for the next-due lookup (one probe) and the
            # claim's count of what is due (so its ordered scan stops there instead of walking
            # every delayed row of the priority). On timezone('UTC', scheduled_at), not the
            # column: the claim's own scan, which must stay on the claim index, cannot use it,
            # so a planner with stale statistics cannot pick it and sort a whole backlog.
            models.Index(
                models.F("queue"),
                models.Func(
                    models.Value("UTC"),
                    models.F("scheduled_at"),
                    function="timezone",
                    output_field=models.DateTimeField(),
                ),
                name="pgflow_step_due",
                condition=Q(status=StepStatus.SCHEDULED),
            ),
            models.Index(
                fields=["lease_expires_at"], name="pgflow_step_lease", condition=Q(status=StepStatus.IN_PROGRESS)
            ),
            models.Index(fields=["deadline_at"], name="pgflow_step_deadline", condition=Q(status=StepStatus.WAITING)),
            models.Index(fields=["run", "created_at"], name="pgflow_step_run"),
            models.Index(fields=["created_at"], name="pgflow_step_created"),
            # Every claim and every outcome rewrites a step row into each of its indexes: the
            # few rows with a batch or a signal are the only ones these two hold.
            models.Index(fields=["batch"], name="pgflow_step_batch", condition=Q(batch__isnull=False)),
            models.Index(fields=["signal"], name="pgflow_step_signal", condition=Q(signal__isnull=False)),
            models.Index(fields=["finished_at"], name="pgflow_step_finished", condition=Q(finished_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.step_name} #{self.attempt}"

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STEP


class ListColumn(models.Field):
    """A PostgreSQL array column (``bigint[]``, ``timestamptz[]`` …) read and written as a
    Python list, which psycopg adapts both ways. Not ``django.contrib.postgres``'s ArrayField:
    on Django 6 that asks every project to add ``django.contrib.postgres`` to INSTALLED_APPS,
    for two columns that only the claim's SQL reads."""

    def __init__(self, *args: Any, element: str = "bigint", **kwargs: Any) -> None:
        self.element = element
        super().__init__(*args, **kwargs)

    def db_type(self, connection: Any) -> str:
        return f"{self.element}[]"

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs["element"] = self.element
        return name, path, args, kwargs

    def get_prep_value(self, value: Any) -> Any:
        return None if value is None else list(value)


class Gate(models.Model):
    """One key of a limit (pgflow.core.limits names the kinds), written only by the claim:
    locked ``FOR UPDATE SKIP LOCKED`` it reads its latest version, so two claims never both
    fill its last place. ``holders``: the attempts (a singleton's runs) let through that may
    still hold a place; ``starts``: a rate's recent starts. Rows are created when an attempt
    needing them is scheduled."""

    name = models.CharField(max_length=320, primary_key=True)
    size = models.PositiveIntegerField(default=1)  # max in progress, or starts per window
    per = models.FloatField(default=0)  # a rate's window, seconds
    holders = ListColumn(element="bigint", default=list)
    starts = ListColumn(element="timestamptz", default=list)
    served_at = models.DateTimeField(null=True, blank=True)  # the last claim through it: round-robin

    class Meta:
        db_table = "pgflow_gate"

    def __str__(self) -> str:
        return self.name


class QueueState(models.Model):
    """A queue an operator paused (``pgflow.pause_queue``): its steps are not claimed. The row
    stays after a resume as the record of who did what last."""

    queue = models.CharField(max_length=100, primary_key=True)
    paused = models.BooleanField(default=False)
    changed_at = models.DateTimeField()
    changed_by = models.CharField(max_length=200, default="system")

    class Meta:
        db_table = "pgflow_queue_state"
        verbose_name = "queue"  # the admin's Queues page
        verbose_name_plural = "queues"

    def __str__(self) -> str:
        return f"{self.queue} ({'paused' if self.paused else 'running'})"


class Event(models.Model):
    """The audit trail: every state change of a run writes one, in the same transaction."""

    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, db_index=False)  # pgflow_event_run leads with it
    step = models.ForeignKey(Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    event = models.CharField(max_length=40, choices=[(kind.value, kind.label) for kind in EventKind])
    actor = models.CharField(max_length=200, default="system")
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "pgflow_event"
        indexes = [
            models.Index(fields=["run", "created_at"], name="pgflow_event_run"),
            models.Index(fields=["event", "created_at"], name="pgflow_event_kind_created"),
        ]

    def __str__(self) -> str:
        return f"{self.event} by {self.actor}"


class Signal(models.Model):
    """The mailbox: a signal waits here until a step waiting for its name consumes it."""

    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE)
    name = models.CharField(max_length=200)
    payload = models.JSONField(null=True, blank=True)
    received_at = models.DateTimeField()
    consumed_at = models.DateTimeField(null=True, blank=True)
    consumed_by = models.ForeignKey(Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        db_table = "pgflow_signal"
        indexes = [
            models.Index(
                fields=["run", "name", "received_at"],
                name="pgflow_signal_pending",
                condition=Q(consumed_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} → run {self.run_id}"


class Batch(models.Model):
    """A fan_out step's django-q2 tasks, waited for as one."""

    class Status(models.TextChoices):
        OPEN = "open"
        FINISHED = "finished"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE)
    step = models.ForeignKey(Step, null=True, on_delete=models.SET_NULL, related_name="+")
    description = models.CharField(max_length=400)
    properties = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    total = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "pgflow_batch"
        verbose_name_plural = "batches"
        indexes = [models.Index(fields=["status", "finished_at"], name="pgflow_batch_status")]

    def __str__(self) -> str:
        return self.description


class BatchMember(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SKIPPED = "skipped"  # never ran: its step stopped waiting (the run was cancelled, paused or skipped)

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="members")
    position = models.PositiveIntegerField()
    func = models.CharField(max_length=300)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    task_id = models.CharField(max_length=64, null=True, blank=True, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    # batch.add_run(): the child run this member stands for (no django-q2 task then). It
    # counts when the child finishes (succeeded) or is cancelled (failed).
    child = models.ForeignKey(WorkflowRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        db_table = "pgflow_batch_member"
        constraints = [models.UniqueConstraint(fields=["batch", "position"], name="pgflow_member_position")]
        indexes = [
            models.Index(fields=["status", "enqueued_at"], name="pgflow_member_pending", condition=Q(status="pending"))
        ]

    def __str__(self) -> str:
        return f"{self.func} ({self.status})"


# --- the hourly rollup (pgflow.rollup writes these; the insights read them) ----------------------
#
# Each figure is counted in the hour it became final (see pgflow.rollup), so a rolled hour
# never changes. ``hours`` is 1 for an hour's row and 24 for a day's, summed from its hours.


class RollupState(models.Model):
    """Where the rollup stands: one row; every hour before ``rolled_until`` is rolled."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    rolled_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "pgflow_rollup_state"

    def __str__(self) -> str:
        return f"rolled until {self.rolled_until}"


class RunRollup(models.Model):
    """The runs of one workflow class in one hour or day: started (by ``created_at``),
    finished and cancelled (by ``finished_at``), and the durations of those finished."""

    start = models.DateTimeField()
    hours = models.PositiveSmallIntegerField()
    workflow_class = models.CharField(max_length=255)
    started = models.PositiveIntegerField(default=0)
    finished = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    # pgflow.core.histogram of finished_at - created_at, {"<bucket>": count}
    durations = models.JSONField(default=dict)

    class Meta:
        db_table = "pgflow_rollup_run"
        constraints = [
            models.UniqueConstraint(fields=["hours", "start", "workflow_class"], name="pgflow_rollup_run_unique")
        ]

    def __str__(self) -> str:
        return f"{self.workflow_class} {self.start:%Y-%m-%d %H:%M} +{self.hours}h"


class StepRollup(models.Model):
    """The attempts of one step of one workflow class that ended in one hour or day: how
    many, how many failed, and histograms of their waited, throttled, queued and ran phases."""

    start = models.DateTimeField()
    hours = models.PositiveSmallIntegerField()
    workflow_class = models.CharField(max_length=255)
    step_name = models.CharField(max_length=200)
    attempts = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    waited = models.JSONField(default=dict)
    throttled = models.JSONField(default=dict, db_default={})  # attempts a limit let through
    queued = models.JSONField(default=dict)
    ran = models.JSONField(default=dict)

    class Meta:
        db_table = "pgflow_rollup_step"
        constraints = [
            models.UniqueConstraint(
                fields=["hours", "start", "workflow_class", "step_name"], name="pgflow_rollup_step_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.workflow_class}.{self.step_name} {self.start:%Y-%m-%d %H:%M} +{self.hours}h"


class FailureRollup(models.Model):
    """Failed attempts that ended in one hour, by the action taken and the error class ("" for none)."""

    start = models.DateTimeField()
    outcome = models.CharField(max_length=32)
    error_class = models.CharField(max_length=255)
    attempts = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "pgflow_rollup_failure"
        constraints = [
            models.UniqueConstraint(fields=["start", "outcome", "error_class"], name="pgflow_rollup_failure_unique")
        ]

    def __str__(self) -> str:
        return f"{self.outcome} {self.error_class} {self.start:%Y-%m-%d %H:%M}"


# --- schedules (pgflow.schedules writes these) ---------------------------------------------------


class Schedule(models.Model):
    """A workflow class started on a cron expression or an interval, once per tick.

    Declared in code (``origin="code"``, synced by ``pgflow.schedules.sync``) or made in the
    admin. ``next_tick_at`` is the tick a worker claims next; it moves in the transaction
    that starts the tick's run, so each tick starts once however many workers race.
    """

    class Origin(models.TextChoices):
        CODE = "code"
        ADMIN = "admin"

    workflow_class = models.CharField(max_length=255, help_text="dotted path of the Workflow subclass")
    name = models.CharField(max_length=200)
    origin = models.CharField(max_length=8, choices=Origin.choices, default=Origin.ADMIN)
    cron = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="five fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * *'",
    )
    every = models.DurationField(null=True, blank=True, help_text="an interval instead of cron, e.g. 00:15:00")
    timezone = models.CharField(max_length=64, default="UTC", help_text="IANA name, e.g. Europe/Amsterdam")
    input = models.JSONField(default=dict, blank=True)
    overlap = models.CharField(
        max_length=16,
        default="skip",
        choices=[
            ("allow", "allow: start anyway"),
            ("skip", "skip: no new run while the last is open"),
            ("buffer_one", "buffer_one: start when the open run ends"),
            ("cancel_previous", "cancel_previous: cancel the open run, then start"),
        ],
    )
    catch_up = models.DurationField(
        null=True, blank=True, help_text="missed ticks this recent start after downtime; empty: none"
    )
    enabled = models.BooleanField(default=True, help_text="off when the declaration left the code")
    paused = models.BooleanField(default=False)
    disabled_reason = models.CharField(max_length=300, blank=True, default="")
    next_tick_at = models.DateTimeField(null=True, blank=True)
    last_tick_at = models.DateTimeField(null=True, blank=True)
    last_run = models.ForeignKey(WorkflowRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # buffer_one: the tick held while the last run is open; started when it ends.
    buffered_tick_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "pgflow_schedule"
        constraints = [
            models.UniqueConstraint(fields=["workflow_class", "name"], name="pgflow_schedule_unique_name"),
        ]
        indexes = [
            # Shaped like the tick claim: the enabled, unpaused schedules by due time.
            models.Index(fields=["next_tick_at"], name="pgflow_schedule_due", condition=Q(enabled=True, paused=False)),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_class.rsplit('.', 1)[-1]}: {self.name}"

    def rule(self) -> Any:
        """The ``pgflow.core.ticks.Rule`` of this row."""
        from .core.ticks import Rule

        return Rule(cron=self.cron or None, every=self.every, timezone=self.timezone)


class ScheduleTick(models.Model):
    """What became of one tick (or of a span of missed ticks): the history the admin and
    the insights read. ``started_at - tick_at`` is the tick's lag."""

    class Outcome(models.TextChoices):
        STARTED = "started"  # the tick's run started
        MANUAL = "manual"  # "start now" in the admin or the API
        SKIPPED = "skipped"  # overlap: the previous run was open
        BUFFERED = "buffered"  # overlap buffer_one: held until the open run ends
        MISSED = "missed"  # older than catch_up when a worker came back
        CANCELLED_PREVIOUS = "cancelled_previous"  # overlap cancel_previous cancelled this run

    schedule = models.ForeignKey(
        Schedule, on_delete=models.CASCADE, related_name="ticks", db_index=False
    )  # pgflow_tick_schedule
    tick_at = models.DateTimeField()
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    # pgflow_tick_run indexes its non-NULL rows: a lookup by run is by value.
    run = models.ForeignKey(
        WorkflowRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    started_at = models.DateTimeField()
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        db_table = "pgflow_schedule_tick"
        indexes = [
            models.Index(fields=["schedule", "started_at"], name="pgflow_tick_schedule"),
            models.Index(fields=["started_at"], name="pgflow_tick_started"),
            models.Index(fields=["run"], name="pgflow_tick_run", condition=Q(run__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} {self.tick_at:%Y-%m-%d %H:%M} {self.outcome}"


# --- live workers and MCP access tokens -------------------------------------------------------


class WorkerQuerySet(models.QuerySet["Worker"]):
    def live(self, now: Any) -> WorkerQuerySet:
        """Workers whose last heartbeat is younger than the lease: the others are gone."""
        from .conf import pgflow_settings

        return self.filter(heartbeat_at__gte=now - timedelta(seconds=pgflow_settings.seconds("LEASE")))


class Worker(models.Model):
    """One running ``pgflow_worker`` process, written only by ``pgflow.runtime.presence``:
    inserted when it starts, updated once per heartbeat interval, deleted on a clean stop.
    A row whose heartbeat is older than the lease belongs to a worker that is gone (killed,
    or cut off from the database); the sweep deletes it later."""

    name = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField()
    version = models.CharField(max_length=40)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    steps_run = models.PositiveBigIntegerField(default=0)
    steps_in_progress = models.PositiveIntegerField(default=0)

    objects = WorkerQuerySet.as_manager()

    class Meta:
        db_table = "pgflow_worker"
        indexes = [models.Index(fields=["heartbeat_at"], name="pgflow_worker_heartbeat")]

    def __str__(self) -> str:
        return self.name


class AccessToken(models.Model):
    """A bearer token for the MCP endpoint, acting as ``user``. Only a SHA-256 digest of the
    secret is stored: the secret is shown once, when an admin creates the token."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100, help_text="what uses it, e.g. the agent's name")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False, help_text="the secret's first characters")
    created_at = models.DateTimeField(editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "pgflow_access_token"
        verbose_name = "MCP access token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


# --- alerts (pgflow.observability.alerts writes these) ---------------------------------------


class AlertRule(models.Model):
    """A condition the sweep checks: declared in ``PGFLOW["ALERTS"]`` (synced here by name) or
    made in the admin. ``kind`` and its parameters are checked by ``pgflow.core.alerting``."""

    class Origin(models.TextChoices):
        SETTINGS = "settings"
        ADMIN = "admin"

    name = models.CharField(max_length=200, unique=True)
    origin = models.CharField(max_length=8, choices=Origin.choices, default=Origin.ADMIN)
    kind = models.CharField(
        max_length=32,
        help_text="phase_p95, runs_paused, steps_overdue, waits_past_deadline, queue_without_worker or failure_rate",
    )
    params = models.JSONField(
        default=dict,
        blank=True,
        help_text='e.g. {"phase": "queued", "workflow_class": "shop.flows.Onboarding", '
        '"step": null, "window": 3600, "threshold": 30}',
    )
    targets = models.JSONField(
        default=list,
        blank=True,
        help_text='e.g. ["mail_admins", {"webhook": "https://…", "secret": "…"}, {"callable": "myapp.alerts.page"}]',
    )
    cooldown = models.DurationField(
        default=timedelta(minutes=30), help_text="after a firing, the rule does not fire again before this"
    )
    enabled = models.BooleanField(default=True)
    muted_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "pgflow_alert_rule"

    def __str__(self) -> str:
        return self.name


class Alert(models.Model):
    """One firing of a rule; ``resolved_at`` is set when its condition stopped holding."""

    rule = models.ForeignKey(
        AlertRule, on_delete=models.CASCADE, related_name="alerts", db_index=False
    )  # pgflow_alert_rule_fired
    fired_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    value = models.FloatField(null=True, blank=True, help_text="the measured figure when it fired")
    message = models.TextField()
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "pgflow_alert"
        indexes = [models.Index(fields=["rule", "fired_at"], name="pgflow_alert_rule_fired")]
        constraints = [
            models.UniqueConstraint(
                fields=["rule"], condition=Q(resolved_at__isnull=True), name="pgflow_alert_one_open"
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule} at {self.fired_at:%Y-%m-%d %H:%M}"


class AlertDelivery(models.Model):
    """One notice (a firing or a resolution) to one target, retried with backoff until sent."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=16)  # "fired" or "resolved"
    target = models.JSONField()
    attempts = models.PositiveIntegerField(default=0)
    next_at = models.DateTimeField(null=True, blank=True, help_text="None once delivered or given up")
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()

    class Meta:
        db_table = "pgflow_alert_delivery"
        indexes = [models.Index(fields=["next_at"], name="pgflow_delivery_due", condition=Q(next_at__isnull=False))]

    def __str__(self) -> str:
        # The webhook's URL, never its secret (the admin shows this label to view-only users).
        target = self.target
        shown = (target.get("webhook") or target.get("callable")) if isinstance(target, dict) else target
        return f"{self.event} of {self.alert_id} to {shown}"
