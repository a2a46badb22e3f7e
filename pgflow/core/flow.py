"""Flow control: the verbs a step body calls and the Outcome values the engine applies.

A verb ends the step at once by raising :class:`FlowControl`, which carries an
:class:`Outcome`. The engine turns every way an attempt can end (a return, a verb,
an exception policy's decision, a timeout, a lost lease) into one Outcome and applies it
under the run lock. Pure: no Django, no database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .states import StepStatus

# What an outcome does to the run after the attempt closes.
COMPLETE = "complete"  # the body returned: the next step, or the run finishes
SKIP = "skip"  # the step is skipped: the next step, or the run finishes
FINISH = "finish"  # the run finishes now, skipping the steps left
CANCEL = "cancel"  # the run is cancelled
PAUSE = "pause"  # the run pauses; resume() schedules a fresh attempt of this step
REATTEMPT = "reattempt"  # a fresh attempt of this step, after ``wait`` seconds
OUTCOME_KINDS = (COMPLETE, SKIP, FINISH, CANCEL, PAUSE, REATTEMPT)  # an Outcome's kind

# The word recorded in Step.outcome for each kind.
OUTCOME_WORDS = {
    COMPLETE: "completed",
    SKIP: "skipped",
    FINISH: "finished",
    CANCEL: "cancelled",
    PAUSE: "paused",
    REATTEMPT: "reattempted",
}

# Step.outcome words that are not flow-control outcomes.
LOST = "lost"  # the worker stopped heartbeating; a fresh attempt follows
HANDED_BACK = "handed_back"  # the worker shut down before the body ended; a fresh attempt follows

# Policy actions (``"pause"``, ``"reattempt"``, …) name the kind of outcome they lead to.
ACTIONS = (PAUSE, REATTEMPT, CANCEL, SKIP)
TERMINAL_ACTIONS = (PAUSE, CANCEL, SKIP)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    kind: str
    wait: float | None = None  # seconds before a reattempt comes due
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in OUTCOME_KINDS:
            raise ValueError(f"outcome kind must be one of {', '.join(OUTCOME_KINDS)}, got {self.kind!r}")
        if self.wait is not None and self.kind != REATTEMPT:
            raise ValueError(f"only a reattempt takes a wait, not a {self.kind}")
        if self.wait is not None and self.wait < 0:
            raise ValueError(f"a reattempt's wait must be 0 or more seconds, got {self.wait!r}")

    @classmethod
    def for_action(cls, action: str, *, wait: float | None = None) -> Outcome:
        """The outcome of a policy action such as ``"pause"`` or ``"reattempt!"``."""
        return cls(kind=normalize_action(action, ACTIONS, "action"), wait=wait)

    @property
    def word(self) -> str:
        return OUTCOME_WORDS[self.kind]

    @property
    def advances(self) -> bool:
        """True when the run moves on to the next step."""
        return self.kind in (COMPLETE, SKIP)


def normalize_action(value: object, allowed: tuple[str, ...], option: str) -> str:
    """``"pause!"`` -> ``"pause"``; anything not in ``allowed`` is a ValueError naming the choices."""
    verb = value.removesuffix("!") if isinstance(value, str) else None
    if verb in allowed:
        return verb
    choices = ", ".join(repr(a) for a in allowed)
    raise ValueError(f"{option} must be one of {choices} (a trailing '!' is accepted), got {value!r}")


def attempt_status(outcome: Outcome, *, failed: bool) -> StepStatus:
    """The status an attempt closes with.

    ``failed``: an error was recorded on the attempt (an exception, a timeout, a failed
    batch, a lost worker), whatever the policy then decided.
    """
    if failed:
        return StepStatus.FAILED
    if outcome.kind in (COMPLETE, FINISH):
        return StepStatus.COMPLETED
    if outcome.kind == SKIP:
        return StepStatus.SKIPPED
    return StepStatus.CANCELLED


class FlowControl(BaseException):  # noqa: N818 - a signal to the engine, not an error
    """Raised by a flow-control verb to end the running step with ``outcome``.

    A ``BaseException``, like ``SystemExit``: a body or a policy handler that wraps a
    flaky call in ``except Exception`` must not swallow the verb (the reference's verbs
    are a ``throw`` no ``rescue`` catches). Whoever calls user code catches it first.
    """

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.kind)
        self.outcome = outcome
