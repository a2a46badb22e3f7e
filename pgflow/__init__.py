"""pgflow: durable, step-based workflows for Django, stored in PostgreSQL.

Importing ``pgflow`` has no side effects and touches no model, so it is safe in settings
and in ``INSTALLED_APPS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .approvals import Approval, Decision
from .core.flow import FlowControl
from .core.limits import Limit, Rate, Singleton
from .core.policy import OnException
from .core.ticks import Schedule
from .exceptions import (
    AlreadyDecided,
    ApprovalClosed,
    ApprovalError,
    DefinitionError,
    FanOutFailed,
    InputTooLarge,
    InvalidDecision,
    InvalidTransition,
    LeaseExpired,
    NotAllowedToDecide,
    PgflowError,
    SingletonConflict,
    StepNotFound,
    StepTimeout,
    WorkflowNotFound,
)
from .workflow import Workflow, cancel_if, fan_out, step

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from .models import Signal, WorkflowRun
    from .subjects import RunsRelation

__all__ = [
    "AlreadyDecided",
    "Approval",
    "ApprovalClosed",
    "ApprovalError",
    "Decision",
    "DefinitionError",
    "FanOutFailed",
    "FlowControl",
    "InputTooLarge",
    "InvalidDecision",
    "InvalidTransition",
    "NotAllowedToDecide",
    "Limit",
    "OnException",
    "PgflowError",
    "Rate",
    "RunsRelation",
    "Schedule",
    "Singleton",
    "SingletonConflict",
    "StepNotFound",
    "StepTimeout",
    "LeaseExpired",
    "Workflow",
    "WorkflowNotFound",
    "cancel_if",
    "decide",
    "fan_out",
    "pause_queue",
    "resume_queue",
    "runs_for",
    "signal",
    "step",
]


def signal(run_or_id: WorkflowRun | int, name: str, payload: Any = None, *, actor: Any = None) -> Signal:
    """Deliver the signal ``name`` (with a JSON-serialisable ``payload``) to a run.

    Kept until a step waiting for ``name`` consumes it; wakes that step if it already
    waits. Raises ``WorkflowRun.DoesNotExist`` for an unknown run, ``InvalidTransition``
    for a finished or cancelled one, ``TypeError`` for a payload that is not JSON.
    """
    from .signals import signal as deliver  # lazy: app registry; models load only once Django is set up

    return deliver(run_or_id, name, payload, actor=actor)


def decide(
    run: WorkflowRun | int,
    step_name: str,
    *,
    user: Any,
    approve: bool,
    data: Any = None,
    comment: str = "",
    actor: Any = None,
) -> Any:
    """Record ``user``'s decision on the approval step ``step_name`` of ``run`` (see
    ``pgflow.deciding.decide``): the same checks as the admin's inbox; raises
    ``NotAllowedToDecide``, ``InvalidDecision``, ``AlreadyDecided`` or ``ApprovalClosed``."""
    from .deciding import decide as record  # lazy: app registry; models load only once Django is set up

    return record(run, step_name, user=user, approve=approve, data=data, comment=comment, actor=actor)


def pause_queue(queue: str, *, actor: Any = None) -> Any:
    """Stop the workers claiming ``queue``'s attempts; they stay scheduled and their runs keep
    their state until ``resume_queue``. Returns the queue's ``QueueState`` row."""
    from .queues import pause_queue as pause  # lazy: app registry; models load only once Django is set up

    return pause(queue, actor=actor)


def resume_queue(queue: str, *, actor: Any = None) -> Any:
    """Let the workers claim ``queue``'s attempts again."""
    from .queues import resume_queue as resume  # lazy: app registry; models load only after setup

    return resume(queue, actor=actor)


def runs_for(obj: Any) -> QuerySet[WorkflowRun]:
    """The runs whose subject is ``obj`` (a saved model instance), newest first."""
    from .subjects import runs_for as of  # lazy: app registry; models load only once Django is set up

    return of(obj)


def __getattr__(name: str) -> Any:
    # ``RunsRelation`` is a model field: it subclasses contenttypes' GenericRelation, whose
    # module defines a model, so it is imported on first use (in a models.py, once the app
    # registry is ready), never by ``import pgflow`` in settings.
    if name == "RunsRelation":
        from .subjects import RunsRelation  # lazy: app registry (see the comment above)

        return RunsRelation
    raise AttributeError(f"module 'pgflow' has no attribute {name!r}")
