"""Approval decisions: a user's vote stored, and the decision once it settles, under the run's lock.

A vote that does not settle the approval (an approval short of the quorum) is a signal named
``approval:<step>:vote``, which no step waits for; the vote that settles it (the quorum's
last approval, or any rejection) is stored as the decision, a signal named
``approval:<step>`` holding every vote, which wakes the parked step or waits for it (a
decision made before the step parks is kept). The open votes are consumed with it, so a
re-run of the step starts a new round. ``pgflow.deciding`` checks who may decide; the rules
of a round (twice, too late) are checked here, where no other decision can interleave.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import approvals
from ..core import jsonvalue
from ..core.states import TERMINAL_RUN, StepStatus
from ..exceptions import AlreadyDecided, ApprovalClosed
from ..models import Signal, Step
from .locking import locked, now
from .mailbox import deliver

_STILL_WAITING = (StepStatus.SCHEDULED, StepStatus.WAITING)


def record_vote(run_id: int, step_name: str, vote: Mapping[str, Any], *, quorum: int, actor: Any) -> tuple[bool, int]:
    """Store ``vote`` on the approval step ``step_name`` of a run; whether it settled the
    approval (stored as the decision, waking the step) and the approvals counted with it.
    Raises ``ApprovalClosed`` when the step is no longer waiting, ``AlreadyDecided`` when the
    vote's user has decided this round."""
    name, votes_name = approvals.signal_name(step_name), approvals.vote_name(step_name)
    user = vote["decided_by"]["username"]
    with locked(run_id) as run:
        latest = Step.objects.live().filter(run=run, step_name=step_name).order_by("-id").first()
        settled = Signal.objects.filter(run=run, name=name, consumed_at__isnull=True).first()
        if settled is None and latest is not None and latest.signal_id is not None:
            settled = Signal.objects.filter(pk=latest.signal_id).first()  # taken by its attempt
        if settled is not None:
            if _voted(settled.payload, user):
                raise AlreadyDecided(f"{user} has already decided step {step_name!r} of run {run.pk}")
            raise ApprovalClosed(f"run {run.pk}: step {step_name!r} is already decided")
        if run.status in TERMINAL_RUN:
            raise ApprovalClosed(f"run {run.pk} is {run.status}: its approval {step_name!r} takes no more decisions")
        if latest is not None and latest.status not in _STILL_WAITING:
            raise ApprovalClosed(
                f"run {run.pk}: step {step_name!r} is no longer waiting for a decision (its attempt is {latest.status})"
            )
        open_votes = list(
            Signal.objects.select_for_update()
            .filter(run=run, name=votes_name, consumed_at__isnull=True)
            .order_by("received_at", "id")
        )
        earlier = [v.payload for v in open_votes if isinstance(v.payload, Mapping)]
        if any(_voted(v, user) for v in earlier):
            raise AlreadyDecided(f"{user} has already decided step {step_name!r} of run {run.pk}")
        approved = sum(1 for v in [*earlier, vote] if v.get("approved"))
        if not approvals.settles(earlier, vote, quorum):
            deliver(run.pk, votes_name, dict(vote), size=_size(vote), actor=actor)
            return False, approved
        at = now()
        Signal.objects.filter(pk__in=[v.pk for v in open_votes]).update(consumed_at=at)
        decision = {**vote, "votes": [*earlier, dict(vote)]}
        deliver(run.pk, name, decision, size=_size(decision), actor=actor)
    return True, approved


def _voted(payload: Any, username: str) -> bool:
    if not isinstance(payload, Mapping):
        return False
    votes = payload.get("votes") or [payload]
    return any(isinstance(v, Mapping) and (v.get("decided_by") or {}).get("username") == username for v in votes)


def _size(payload: Any) -> int:
    """The payload's bytes as JSON, for the audit trail (as pgflow.signal() records)."""
    return len(jsonvalue.encode(payload, "decision").encode())
