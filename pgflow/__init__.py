"""pgflow: durable, step-based workflows for Django, stored in PostgreSQL.

Importing ``pgflow`` has no side effects and touches no model, so it is safe in settings
and in ``INSTALLED_APPS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .core.flow import FlowControl
from .core.policy import OnException
from .core.ticks import Schedule
from .exceptions import (
    DefinitionError,
    FanOutFailed,
    InputTooLarge,
    InvalidTransition,
    PgflowError,
    StepNotFound,
    StepTimeout,
    WorkflowNotFound,
)
from .workflow import Workflow, cancel_if, fan_out, step

if TYPE_CHECKING:
    from .models import Signal, WorkflowRun

__all__ = [
    "DefinitionError",
    "FanOutFailed",
    "FlowControl",
    "InputTooLarge",
    "InvalidTransition",
    "OnException",
    "PgflowError",
    "Schedule",
    "StepNotFound",
    "StepTimeout",
    "Workflow",
    "WorkflowNotFound",
    "cancel_if",
    "fan_out",
    "signal",
    "step",
]


def signal(run_or_id: WorkflowRun | int, name: str, payload: Any = None, *, actor: Any = None) -> Signal:
    """Deliver the signal ``name`` (with a JSON-serialisable ``payload``) to a run.

    Kept until a step waiting for ``name`` consumes it; wakes that step if it already
    waits. Raises ``WorkflowRun.DoesNotExist`` for an unknown run, ``InvalidTransition``
    for a finished or cancelled one, ``TypeError`` for a payload that is not JSON.
    """
    from .signals import signal as deliver  # models load only once Django is set up

    return deliver(run_or_id, name, payload, actor=actor)
