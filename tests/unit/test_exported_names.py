"""The public names of ``pgflow`` are the contract (/work/shared/API.md): adding or dropping one is a
decision, never an accident of an import."""

from __future__ import annotations

import pgflow

PUBLIC = [
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
    "LeaseExpired",
    "Limit",
    "NotAllowedToDecide",
    "OnException",
    "PgflowError",
    "Rate",
    "RunsRelation",
    "Schedule",
    "Singleton",
    "SingletonConflict",
    "StepNotFound",
    "StepTimeout",
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


def test_the_public_names_are_exactly_the_documented_ones():
    assert sorted(pgflow.__all__) == PUBLIC


def test_every_public_name_is_there():
    missing = [name for name in pgflow.__all__ if not hasattr(pgflow, name)]
    assert not missing
