"""pgflow's tables, one module per writer: each module's docstring says who writes its rows.

    runs       WorkflowRun, Step, Event, Signal     pgflow.store
    gates      Gate, QueueState (ListColumn)        pgflow.store (claim, scheduling); pgflow.queues
    batches    Batch, BatchMember                   pgflow.store; pgflow.fanout
    rollup     RollupState, Run/Step/FailureRollup  pgflow.rollup
    history    HistoryState                         pgflow.store.history
    schedules  Schedule, ScheduleTick               pgflow.schedules (the admin's forms through it)
    workers    Worker; Offer                        pgflow.runtime.presence; pgflow.store.offers
    tokens     AccessToken                          pgflow_dashboard (the MCP's tokens)
    alerts     AlertRule, Alert, AlertDelivery      pgflow.observability.alerts; the admin's rules
    views      SavedView                            pgflow_dashboard (the run list's saved searches)

Every name is imported from ``pgflow.models`` (the public path, and the one the migrations
name): the modules are where the classes live, not how they are imported. One app
(``pgflow``), the same tables as before the split.
"""

from .alerts import Alert, AlertDelivery, AlertRule
from .batches import Batch, BatchMember
from .gates import Gate, ListColumn, QueueState
from .history import HistoryState
from .rollup import FailureRollup, RollupState, RunRollup, StepRollup
from .runs import Event, Signal, Step, WorkflowRun, WorkflowRunQuerySet
from .schedules import Schedule, ScheduleTick
from .tokens import AccessToken
from .views import SavedView
from .workers import Offer, Worker, WorkerQuerySet

__all__ = [
    "AccessToken",
    "Alert",
    "AlertDelivery",
    "AlertRule",
    "Batch",
    "BatchMember",
    "Event",
    "FailureRollup",
    "Gate",
    "HistoryState",
    "ListColumn",
    "Offer",
    "QueueState",
    "RollupState",
    "RunRollup",
    "SavedView",
    "Schedule",
    "ScheduleTick",
    "Signal",
    "Step",
    "StepRollup",
    "Worker",
    "WorkerQuerySet",
    "WorkflowRun",
    "WorkflowRunQuerySet",
]
