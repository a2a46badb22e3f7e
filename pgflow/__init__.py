"""pgflow: durable, step-based workflows for Django, stored in PostgreSQL.

Importing ``pgflow`` has no side effects and touches no model, so it is safe in settings
and in ``INSTALLED_APPS``; the names below load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .core.flow import FlowControl
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

_LAZY = {
    "Workflow": "pgflow.workflow",
    "step": "pgflow.workflow",
    "fan_out": "pgflow.workflow",
    "cancel_if": "pgflow.workflow",
    "OnException": "pgflow.core.policy",
    "signal": "pgflow.signals",
}

__all__ = [
    "DefinitionError",
    "FanOutFailed",
    "FlowControl",
    "InputTooLarge",
    "InvalidTransition",
    "OnException",
    "PgflowError",
    "StepNotFound",
    "StepTimeout",
    "Workflow",
    "WorkflowNotFound",
    "cancel_if",
    "fan_out",
    "signal",
    "step",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pgflow' has no attribute {name!r}")
    return getattr(import_module(module), name)
