"""The exceptions pgflow raises, all under one root so callers can catch them together."""

from __future__ import annotations

from typing import Any


class PgflowError(Exception):
    """Root of every exception pgflow raises on purpose."""


class DefinitionError(PgflowError, ValueError):
    """A workflow class is declared wrongly. Raised when the class is created."""


class InvalidTransition(PgflowError):
    """An operator control or a signal does not apply to the run's current status."""


class StepTimeout(PgflowError):
    """A step body ran past its ``timeout``. Goes through the exception policies."""


class LeaseExpired(PgflowError):
    """What a lost attempt records as its error: its worker stopped heartbeating (it died, or
    lost the database) and the lease ran out. Never raised; named so the recorded class
    imports (a Django task's ``TaskError.exception_class``)."""


class FanOutFailed(PgflowError):
    """At least one member of a fan_out batch failed for good, or its batch vanished."""


class WorkflowNotFound(PgflowError):
    """A run's ``workflow_class`` path no longer imports."""


class StepNotFound(PgflowError):
    """A run is scheduled on a step its workflow class no longer defines."""


class InputTooLarge(PgflowError, ValueError):
    """``start()`` was given an input larger than ``PGFLOW["MAX_INPUT_BYTES"]``."""


class SingletonConflict(PgflowError):
    """``start()`` of a class with ``singleton=pgflow.Singleton(on_conflict="skip")`` while a run
    with the same key is open. ``open_run`` is that run."""

    def __init__(self, message: str, *, open_run: Any) -> None:
        super().__init__(message)
        self.open_run = open_run


class ApprovalError(PgflowError):
    """``pgflow.decide()`` refused a decision; the subclasses say why."""


class NotAllowedToDecide(ApprovalError, PermissionError):
    """The user is not one the approval accepts: not an approver group's member, without its
    permission, inactive, or the run's requester when ``self_approval=False``."""


class AlreadyDecided(ApprovalError):
    """The user has already decided this approval (a quorum counts distinct users)."""


class ApprovalClosed(ApprovalError):
    """Too late: the approval step is no longer waiting (decided, run, or the run ended)."""


class InvalidDecision(ApprovalError, ValueError):
    """The approval's form did not validate the data given; ``errors`` is the form's errors."""

    def __init__(self, message: str, *, errors: Any = None) -> None:
        super().__init__(message)
        self.errors = errors
