"""Run and step statuses and the sets the engine reasons with."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    CANCELLED = "cancelled"


class StepStatus(StrEnum):
    SCHEDULED = "scheduled"
    WAITING = "waiting"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    SKIPPED = "skipped"
    FAILED = "failed"
    CANCELLED = "cancelled"


# A run in one of these can still change; the others are final.
OPEN_RUN = frozenset({RunStatus.RUNNING, RunStatus.PAUSED})
TERMINAL_RUN = frozenset({RunStatus.FINISHED, RunStatus.CANCELLED})

# An attempt in one of these is the run's open attempt (at most one per run).
OPEN_STEP = frozenset({StepStatus.SCHEDULED, StepStatus.WAITING, StepStatus.IN_PROGRESS})
CLOSED_STEP = frozenset(set(StepStatus) - OPEN_STEP)

# Operator controls and the run statuses they apply to.
CONTROLS: dict[str, frozenset[RunStatus]] = {
    "pause": frozenset({RunStatus.RUNNING}),
    "resume": frozenset({RunStatus.PAUSED}),
    "cancel": frozenset({RunStatus.RUNNING, RunStatus.PAUSED}),
    "skip_step": frozenset({RunStatus.RUNNING, RunStatus.PAUSED}),
}


def control_error(control: str, status: str) -> str | None:
    """The message for a control that does not apply to ``status``, or ``None`` when it does."""
    allowed = CONTROLS[control]
    if status in allowed:
        return None
    accepted = " or ".join(sorted(allowed))
    verb = "skip the current step of" if control == "skip_step" else control
    return f"cannot {verb} a {status} run (only a {accepted} run)"
