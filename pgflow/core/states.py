"""Run and step statuses and the sets the engine reasons with."""

from __future__ import annotations

from dataclasses import dataclass
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
# A run in one of these can be re-run from a step (a running one is paused or cancelled first).
RERUNNABLE_RUN = frozenset({RunStatus.FINISHED, RunStatus.CANCELLED, RunStatus.PAUSED})

# An attempt in one of these is the run's open attempt (at most one per run).
OPEN_STEP = frozenset({StepStatus.SCHEDULED, StepStatus.WAITING, StepStatus.IN_PROGRESS})
CLOSED_STEP = frozenset(set(StepStatus) - OPEN_STEP)


@dataclass(frozen=True, kw_only=True)
class Control:
    """An operator control: the store function and ``WorkflowRun`` method ``name``, the run
    statuses it applies to, and the words every surface (run page, admin actions, MCP tools)
    shows for it."""

    name: str  # store.<name>(run_id, ...) and run.<name>(actor=...)
    applies_to: frozenset[RunStatus]
    action: str  # the run page's form action
    label: str  # the run page's button
    done: str  # "Run 12 <done>."
    tool: str  # the MCP tool
    effect: str  # what it does, in words (the MCP tool's description and dry run)


# The controls, in the order the run page shows their buttons.
CONTROLS: dict[str, Control] = {
    control.name: control
    for control in (
        Control(
            name="resume",
            applies_to=frozenset({RunStatus.PAUSED}),
            action="resume",
            label="Resume",
            done="resumed",
            tool="resume_run",
            effect="resume the run with a fresh attempt of the step that paused",
        ),
        Control(
            name="skip_step",
            applies_to=frozenset({RunStatus.RUNNING, RunStatus.PAUSED}),
            action="skip",
            label="Skip the current step",
            done="moved past its current step",
            tool="skip_step",
            effect="skip the current step and schedule the next one",
        ),
        Control(
            name="pause",
            applies_to=frozenset({RunStatus.RUNNING}),
            action="pause",
            label="Pause",
            done="paused",
            tool="pause_run",
            effect="pause the run (its current step finishes, no next step starts)",
        ),
        Control(
            name="cancel",
            applies_to=frozenset({RunStatus.RUNNING, RunStatus.PAUSED}),
            action="cancel",
            label="Cancel the run",
            done="cancelled",
            tool="cancel_run",
            effect="cancel the run (its open attempt is closed, no further step runs)",
        ),
    )
}


def control_error(control: str, status: str) -> str | None:
    """The message for a control that does not apply to ``status``, or ``None`` when it does."""
    allowed = CONTROLS[control].applies_to
    if status in allowed:
        return None
    accepted = " or ".join(sorted(allowed))
    verb = "skip the current step of" if control == "skip_step" else control
    return f"cannot {verb} a {status} run (only a {accepted} run)"
