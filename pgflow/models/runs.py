"""The rows of a run, written only by ``pgflow.store`` (one writer of state): the run, its
attempts (``Step``), its audit trail (``Event``) and its mailbox (``Signal``). Everything
else reads them. The other writers' tables sit beside this module in ``pgflow.models``.

A run's row is its lock: every state change of a run happens in a short transaction
holding ``SELECT … FOR UPDATE`` on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q

from ..core.events import EventKind
from ..core.states import OPEN_STEP, RunStatus, StepStatus
from ..registry import resolve

if TYPE_CHECKING:
    from ..workflow import Workflow

_OPEN_STEP = sorted(s.value for s in OPEN_STEP)  # sorted: a stable migration


class LiveQuerySet(models.QuerySet[Any]):
    """Attempts or events, which live in a partitioned table (pgflow.store.history)."""

    def live(self) -> Self:
        """Only the rows in the live partition: every row of a run still open. PostgreSQL then
        plans and reads that one table, not every day's partition with it; a transition on an
        open run reads nothing else."""
        return self.filter(history_day__isnull=True)


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
    # The links between runs are not database foreign keys (db_constraint=False): each costs
    # every purged run a check, and retention nulls them itself (pgflow.store.retention).
    # Whoever writes one holds the run it names (pgflow.store.links).
    rerun_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="reruns",
        db_index=False,
        db_constraint=False,
    )
    # batch.add_run() in a fan_out: the run whose step waits on this one as a batch member.
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="children",
        db_index=False,
        db_constraint=False,
    )
    # The class's pgflow.Singleton key for this run (None: no singleton, or its key was None).
    singleton_key = models.CharField(max_length=200, null=True, blank=True)
    # Flat tags from start(attributes=...) and a body's set_attributes() (limits: pgflow.core.attributes),
    # searched by attr.K:V through the GIN index pgflow_run_attributes. The column's own default too: a
    # process still on the previous release inserts runs without it while the new one rolls out.
    attributes = models.JSONField(default=dict, db_default=models.Value({}, models.JSONField()), blank=True)
    # PGFLOW["TENANT"]'s key when start() was called (a child's and a re-run's: their parent's,
    # their original's); never changed after (pgflow/tenants.py). Indexed by pgflow_run_tenant.
    tenant = models.CharField(max_length=100, null=True, blank=True)

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
            # The run list filtered by tenant, newest first; runs without a tenant are not indexed.
            models.Index(fields=["tenant", "created_at"], name="pgflow_run_tenant", condition=Q(tenant__isnull=False)),
            # key: without class: (pgflow_run_unique_key leads with the class), exact or a prefix.
            models.Index(
                fields=["key"], name="pgflow_run_key", condition=Q(key__isnull=False), opclasses=["varchar_pattern_ops"]
            ),
            # attributes: GIN pgflow_run_attributes (jsonb_path_ops), made by migration 0014 only:
            # a GinIndex here would need django.contrib.postgres in INSTALLED_APPS (postgres.E005).
            # input: GIN pgflow_run_input (jsonb_path_ops), made by migration 0016 only, as above.
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
        return resolve(self.workflow_class)

    # Operator controls: each is one transition under the run's lock, written by the store.
    # A facade over a higher layer (the store imports these models), so each imports it when called.
    def pause(self, actor: Any = None) -> WorkflowRun:
        from .. import store  # facade: run controls; the store imports these models

        return store.pause(self.pk, actor=actor, into=self)

    def resume(self, actor: Any = None) -> WorkflowRun:
        from .. import store  # facade: run controls; the store imports these models

        return store.resume(self.pk, actor=actor, into=self)

    def cancel(self, actor: Any = None) -> WorkflowRun:
        from .. import store  # facade: run controls; the store imports these models

        return store.cancel(self.pk, actor=actor, into=self)

    def skip_step(self, actor: Any = None, *, step: str | None = None) -> WorkflowRun:
        """Skip the current step; with ``step``, only if it is still that one (a page or a dry
        run seen earlier, a repeated request)."""
        from .. import store  # facade: run controls; the store imports these models

        return store.skip_step(self.pk, actor=actor, step=step, into=self)

    def rerun_from(self, step_name: str, *, input: Any = None, actor: Any = None) -> WorkflowRun:
        """A new run of the same class and subject, linked by ``rerun_of``, starting at
        ``step_name`` with the outputs of the steps before it copied from this run;
        ``input=None`` keeps this run's input. This run must be finished, cancelled or
        paused (a paused one is cancelled, "re-run as #N")."""
        from .. import store  # facade: run controls; the store imports these models

        return store.rerun_from(self.pk, step_name, input=input, actor=actor)

    def rerun_plan(self, step_name: str) -> dict[str, Any]:
        """What ``rerun_from(step_name)`` would copy (``copied``: ``{name: output}``), what it
        has nothing to copy for (``not_copied``), and ``definition_changed``; writes nothing."""
        from .. import store  # facade: run controls; the store imports these models

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

    # pgflow_step_run leads with it. No key in the database (migration 0022): its writers hold the run.
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, db_index=False, db_constraint=False)
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
    # The UTC day its run ended, once the sweep has filed the run into that day's partition
    # (pgflow.store.history); None while the row is in pgflow_step_live, with the open work.
    history_day = models.DateField(null=True, blank=True, editable=False)

    objects = LiveQuerySet.as_manager()

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
            # error: reads the attempts with an error, never every attempt. output: GIN
            # pgflow_step_output (completed attempts), made by migration 0016 only (see attributes).
            models.Index(fields=["run"], name="pgflow_step_error", condition=Q(error_class__isnull=False)),
            # The attempts that have waited, for the approval waits and the waiting histogram;
            # on every partition (migration 0021).
            models.Index(
                fields=["waiting_since"], name="pgflow_step_waiting", condition=Q(waiting_since__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.step_name} #{self.attempt}"

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STEP


class Event(models.Model):
    """The audit trail: every state change of a run writes one, in the same transaction."""

    # pgflow_event_run leads with it. No key in the database (migration 0022): its writers hold the run.
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, db_index=False, db_constraint=False)
    # No foreign key in the database: pgflow_step is partitioned (pgflow.store.history), and
    # PostgreSQL only lets a key point at a unique index that includes the partition key.
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )
    event = models.CharField(max_length=40, choices=[(kind.value, kind.label) for kind in EventKind])
    actor = models.CharField(max_length=200, default="system")
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()
    # As Step.history_day: None while in pgflow_event_live.
    history_day = models.DateField(null=True, blank=True, editable=False)

    objects = LiveQuerySet.as_manager()

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

    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, db_constraint=False)  # delivered under its lock
    name = models.CharField(max_length=200)
    payload = models.JSONField(null=True, blank=True)
    received_at = models.DateTimeField()
    consumed_at = models.DateTimeField(null=True, blank=True)
    consumed_by = models.ForeignKey(  # no database key into the partitioned pgflow_step (Event.step)
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )

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
