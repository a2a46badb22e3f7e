"""What every dangerous action shares: the optional reason an operator types on its
confirmation page, carried into the audit trail in the actor (``"user:ada (reason: …)"``,
the same column an agent's ``"agent:x for user:y"`` uses), since the run controls and
``pause_queue`` record who acted, not why."""

from __future__ import annotations

from typing import Any

from pgflow.core import jsonvalue
from pgflow.core.events import ACTOR_LIMIT, actor_name

REASON_LIMIT = 120  # characters: with "user:<name> (reason: …)" it fits the actor column


class BadReason(ValueError):
    """The reason typed cannot be recorded; the message says what is accepted."""


def reason_of(posted: str | None) -> str:
    """The reason posted with a confirmation, stripped; refused when too long or unstorable."""
    reason = " ".join((posted or "").split())
    if len(reason) > REASON_LIMIT:
        raise BadReason(f"the reason has {len(reason)} characters; at most {REASON_LIMIT} are recorded")
    if reason and jsonvalue.text_problem(reason):
        raise BadReason("the reason holds a character PostgreSQL cannot store (a NUL or a lone surrogate)")
    return reason


def actor(user: Any, reason: str) -> Any:
    """The actor to hand the control: the user, with the reason when one was given."""
    if not reason:
        return user
    return f"{actor_name(user)} (reason: {reason})"[:ACTOR_LIMIT]
