"""Approvals: a step that waits for people's decision, declared with ``@step(approval=...)``.

An approval is a signal wait (``pgflow.signals``) on the reserved name ``approval:<step>``:
a decision is a signal, so one made before the step parks is kept and nothing is lost. With a
quorum above one, each approval but the last is stored as a vote (``approval:<step>:vote``)
that wakes nothing; the vote reaching the quorum, or the first rejection, is stored as the
decision itself, holding every vote (``pgflow.deciding`` and ``pgflow.store.decisions``).

This module is the declaration, what the body receives and the rule of who may decide:
plain values in, plain values out. It imports no model and touches no database.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .core.durations import seconds
from .exceptions import DefinitionError

PREFIX = "approval:"
VOTE_SUFFIX = ":vote"
ON_TIMEOUT = ("pause", "cancel", "skip")
# Not "pause": a resumed attempt carries its decision over, so it would pause again.
ON_REJECT = (None, "cancel", "skip")
_STEP_OPTIONS_TAKEN = ("wait_for", "wait_timeout", "on_timeout")


def signal_name(step_name: str) -> str:
    """The reserved signal name a decision on ``step_name`` is stored under."""
    return f"{PREFIX}{step_name}"


def vote_name(step_name: str) -> str:
    """The signal name of a vote that does not decide yet (quorum above one)."""
    return f"{PREFIX}{step_name}{VOTE_SUFFIX}"


@dataclass(frozen=True, kw_only=True)
class Approval:
    """A step that parks until ``quorum`` distinct allowed users approve, or one rejects.

    ``form``: a ``django.forms.Form`` subclass whose cleaned data an approval carries (None:
    no form). ``groups``: names of Django groups a decider must be in one of (empty: any
    group). ``permission``: ``"app_label.codename"`` a decider must have (None: none
    needed). ``self_approval``: whether the user who requested the run may decide it.
    ``requester``: a method name or callable taking the workflow, returning the requesting
    user (a user, a username or a user id); None reads the actor of the run's ``started``
    event. ``timeout`` / ``on_timeout``: as ``wait_timeout`` / ``on_timeout``. ``on_reject``:
    None runs the body with ``decision.approved == False``; "cancel" or "skip" acts instead.
    """

    form: type | None = None
    groups: Sequence[str] = ()
    permission: str | None = None
    quorum: int = 1
    self_approval: bool = False
    requester: str | Callable[..., Any] | None = None
    timeout: timedelta | float | None = None
    on_timeout: str = "cancel"  # an approval nobody gives in time ends its run
    on_reject: str | None = None
    timeout_seconds: float | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        for problem in declaration_problems(self):
            raise DefinitionError(f"approval: {problem}")
        object.__setattr__(self, "groups", tuple(self.groups))
        if self.timeout is not None:
            object.__setattr__(self, "timeout_seconds", seconds(self.timeout, "timeout", positive=True))

    def step_options(self, step_name: str) -> dict[str, Any]:
        """The signal-wait options an approval step is built with."""
        options: dict[str, Any] = {"wait_for": signal_name(step_name)}
        if self.timeout_seconds is not None:
            options["wait_timeout"] = self.timeout_seconds
            options["on_timeout"] = self.on_timeout
        return options


def declaration_problems(approval: Approval) -> list[str]:
    """What is wrong with an approval's options, each naming what is accepted."""
    problems = []
    form = approval.form
    if form is not None and not (inspect.isclass(form) and _is_form(form)):
        problems.append(f"form must be a django.forms.Form subclass (or None), got {form!r}")
    groups = approval.groups
    if isinstance(groups, str) or not isinstance(groups, list | tuple | set | frozenset):
        problems.append(f"groups must be a list of group names, got {groups!r}")
    elif not all(isinstance(name, str) and name.strip() for name in groups):
        problems.append(f"groups must be a list of non-empty group names, got {list(groups)!r}")
    permission = approval.permission
    if permission is not None and not (
        isinstance(permission, str) and permission.count(".") == 1 and all(permission.split("."))
    ):
        problems.append(f'permission must be "app_label.codename" (or None), got {permission!r}')
    quorum = approval.quorum
    if isinstance(quorum, bool) or not isinstance(quorum, int) or quorum < 1:
        problems.append(f"quorum must be a whole number of distinct approvers, 1 or more, got {quorum!r}")
    if not isinstance(approval.self_approval, bool):
        problems.append(f"self_approval must be True or False, got {approval.self_approval!r}")
    requester = approval.requester
    if requester is not None and not (isinstance(requester, str) or callable(requester)):
        problems.append(f"requester must be a method name or a callable taking the workflow, got {requester!r}")
    if approval.timeout is not None:
        try:
            seconds(approval.timeout, "timeout", positive=True)
        except ValueError as exc:
            problems.append(str(exc))
    if approval.on_timeout not in ON_TIMEOUT:
        problems.append(f"on_timeout must be one of {', '.join(map(repr, ON_TIMEOUT))}, got {approval.on_timeout!r}")
    elif approval.on_timeout != "cancel" and approval.timeout is None:
        problems.append("on_timeout only applies with a timeout")
    if approval.on_reject not in ON_REJECT:
        problems.append(f"on_reject must be None (the body decides), 'cancel' or 'skip', got {approval.on_reject!r}")
    return problems


def _is_form(cls: type) -> bool:
    # A Django form class, told by what every one has (this module stays free of Django).
    return callable(getattr(cls, "is_valid", None)) and isinstance(getattr(cls, "base_fields", None), Mapping)


def step_options(step_name: str, approval: Any, options: Mapping[str, Any], *, fan_out: bool) -> dict[str, Any]:
    """A step's options with ``approval`` turned into its signal wait; DefinitionError when it
    is not an Approval or is combined with options it sets itself."""
    where = f"{'fan_out' if fan_out else 'step'} {step_name!r}"
    if fan_out:
        raise DefinitionError(f"{where}: a fan_out cannot take approval; give the approval a @step of its own")
    if not isinstance(approval, Approval):
        raise DefinitionError(f"{where}: approval must be a pgflow.Approval(...), got {approval!r}")
    taken = [option for option in _STEP_OPTIONS_TAKEN if option in options]
    if taken:
        raise DefinitionError(
            f"{where}: approval sets the wait itself and cannot be combined with {', '.join(taken)}; "
            "give Approval(timeout=..., on_timeout=...) instead"
        )
    return {**options, **approval.step_options(step_name)}


# -- what the body receives --------------------------------------------------------------


@dataclass(frozen=True)
class Vote:
    """One user's decision: approve or reject, the form's data and a comment."""

    approved: bool
    decided_by: str  # the username
    decided_by_id: Any
    data: Mapping[str, Any]
    comment: str
    at: str  # ISO 8601

    @classmethod
    def of(cls, payload: Mapping[str, Any]) -> Vote:
        by = payload.get("decided_by") or {}
        return cls(
            approved=bool(payload.get("approved")),
            decided_by=str(by.get("username", "")),
            decided_by_id=by.get("id"),
            data=dict(payload.get("data") or {}),
            comment=str(payload.get("comment") or ""),
            at=str(payload.get("at") or ""),
        )


@dataclass(frozen=True)
class Decision:
    """What an approval step's body receives: the deciding vote, and every vote.

    ``approved``: the quorum was reached (False: someone rejected). ``data``: the deciding
    user's form data, cleaned (as JSON: a Decimal or a date becomes a string).
    ``decided_by`` / ``comment``: the deciding user's username and comment.
    """

    approved: bool
    data: Mapping[str, Any]
    decided_by: str
    decided_by_id: Any
    comment: str
    votes: tuple[Vote, ...]

    @classmethod
    def of(cls, payload: Any) -> Decision:
        """The decision a stored decision signal's payload holds."""
        if not isinstance(payload, Mapping):
            payload = {}
        last = Vote.of(payload)
        votes = tuple(Vote.of(v) for v in payload.get("votes") or () if isinstance(v, Mapping)) or (last,)
        return cls(
            approved=last.approved,
            data=last.data,
            decided_by=last.decided_by,
            decided_by_id=last.decided_by_id,
            comment=last.comment,
            votes=votes,
        )

    @property
    def approvers(self) -> tuple[str, ...]:
        return tuple(v.decided_by for v in self.votes if v.approved)


def settles(votes: Sequence[Mapping[str, Any]], vote: Mapping[str, Any], quorum: int) -> bool:
    """Whether ``vote``, after the open ``votes``, decides: a rejection, or the quorum of approvals."""
    if not vote.get("approved"):
        return True
    return sum(1 for v in votes if v.get("approved")) + 1 >= quorum


# -- who may decide ----------------------------------------------------------------------


def refusal(
    approval: Approval,
    *,
    active: bool,
    username: str,
    user_groups: frozenset[str],
    has_permission: bool,
    requester: str | None,
) -> str | None:
    """Why a user may not decide an approval, or None when they may. ``has_permission``:
    whether they hold ``approval.permission`` (ignored without one); ``requester``: the
    username of who requested the run, when known."""
    if not active:
        return f"{username or 'an anonymous user'} is not an active, signed-in user"
    if approval.groups and not user_groups & set(approval.groups):
        return f"{username} is in none of the approver groups ({', '.join(approval.groups)})"
    if approval.permission and not has_permission:
        return f"{username} lacks the permission {approval.permission}"
    if not approval.self_approval and requester is not None and requester == username:
        return f"{username} requested this run, and the approval refuses self-approval (self_approval=False)"
    return None
