"""Deciding approvals from code and listing those a user may decide (the admin's inbox,
the MCP server's ``list_approvals``).

The checks on the user (groups, permission, self-approval) are ``pgflow.approvals.refusal``'s;
the form is the approval's own Django form; the vote is written by
``pgflow.store.record_vote`` under the run's lock.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Q, QuerySet

from . import store
from .approvals import Approval, Vote, refusal, signal_name, vote_name
from .conf import pgflow_settings
from .core.events import EventKind, without_reason
from .core.states import OPEN_RUN, StepStatus
from .exceptions import ApprovalError, InputTooLarge, InvalidDecision, NotAllowedToDecide, WorkflowNotFound
from .models import Event, Signal, Step, WorkflowRun
from .registry import registered, resolve

if TYPE_CHECKING:
    from .workflow import Workflow

ON_BEHALF = " for user:"  # an actor acting for a user: "agent:<client> for user:<username>"


@dataclass(frozen=True)
class Recorded:
    """What ``decide`` did: ``settled`` when this decision decided the approval (the step
    runs next), else it is a vote counted towards ``quorum``; ``approvals``: those counted,
    this one included."""

    settled: bool
    approvals: int
    quorum: int


def approval_of(run: WorkflowRun, step_name: str) -> Approval:
    """The run's class's approval on ``step_name``; ApprovalError naming its approval steps otherwise."""
    try:
        steps = resolve(run.workflow_class).steps()
    except WorkflowNotFound as exc:
        raise ApprovalError(f"run {run.pk}: its workflow class does not import ({exc})") from None
    definition = steps.get(step_name)
    if definition is None or definition.approval is None:
        named = ", ".join(d.name for d in steps if d.approval is not None) or "none"
        raise ApprovalError(f"run {run.pk}: step {step_name!r} is not an approval (its approval steps: {named})")
    return definition.approval


def requester(run: WorkflowRun, approval: Approval) -> str | None:
    """The username of who requested the run: the approval's ``requester``, else the actor of
    the run's ``started`` event when that names a user (or an agent acting for one)."""
    if approval.requester is not None:
        workflow = resolve(run.workflow_class)(run=run)
        ref = approval.requester
        who = getattr(workflow, ref)() if isinstance(ref, str) else ref(workflow)
        if who is None:
            return None
        if callable(getattr(who, "get_username", None)):
            return str(who.get_username())
        if isinstance(who, int):
            from django.contrib.auth import get_user_model  # lazy: the auth app's model, at call time

            found = get_user_model().objects.filter(pk=who).first()
            return found.get_username() if found else None
        return str(who)
    actor = Event.objects.filter(run=run, event=str(EventKind.STARTED)).values_list("actor", flat=True).first() or ""
    return _requester_named(actor)


def _requester_named(actor: str) -> str | None:
    """The username a ``started`` event's actor names as the run's requester, if any."""
    # The reason a re-running operator typed follows who they are: "user:ann (reason: …)".
    actor = without_reason(actor)
    if actor.startswith("user:"):
        return actor.removeprefix("user:")
    # An agent acting for a user (the MCP server's "agent:<client> for user:<username>"):
    # the user asked for the run, so the user may not approve it either.
    _, acting_for, behalf = actor.rpartition(ON_BEHALF)
    return behalf if acting_for and behalf else None


def why_not(user: Any, run: WorkflowRun, approval: Approval, *, groups: frozenset[str] | None = None) -> str | None:
    """Why ``user`` may not decide ``approval`` on ``run``, or None when they may. ``groups``:
    the user's group names, when the caller read them once for many approvals."""
    active = bool(getattr(user, "is_authenticated", False) and getattr(user, "is_active", False))
    username = user.get_username() if active else ""
    if groups is None:
        groups = _groups(user) if active and approval.groups else frozenset()
    has_permission = bool(active and approval.permission and user.has_perm(approval.permission))
    return refusal(
        approval,
        active=active,
        username=username,
        user_groups=groups,
        has_permission=has_permission,
        requester=requester(run, approval) if active and not approval.self_approval else None,
    )


# The registry's approvals, one per who-may-decide rule, and the classes they were read from.
_registered_rules: tuple[tuple[type[Workflow], ...], tuple[Approval, ...]] | None = None


def registered_rules() -> tuple[Approval, ...]:
    """One approval of the registered workflows per distinct rule of who may decide (its
    groups and permission), in the registry's order.

    The admin's navigation asks on every page, so the scan of every class's steps is kept
    for the process. The registry is fixed once the apps are loaded, but a class made later
    (a test, a reloaded module) or dropped replaces the classes this was read from: they are
    compared (by identity, one pass) on each call, and a change reads the steps again."""
    global _registered_rules
    classes = tuple(registered())
    cached = _registered_rules
    if cached is not None and cached[0] == classes:
        return cached[1]
    rules: dict[tuple[frozenset[str], str | None], Approval] = {}
    for workflow in classes:
        for definition in workflow.steps():
            if definition.approval is not None:
                rules.setdefault(
                    (frozenset(definition.approval.groups), definition.approval.permission), definition.approval
                )
    found = tuple(rules.values())
    _registered_rules = (classes, found)
    return found


def may_decide_some(user: Any, *, groups: frozenset[str] | None = None) -> bool:
    """True when ``user`` could decide an approval of some registered workflow, by its groups
    and permission (who requested a run aside): who is shown the inbox. ``groups``: the
    user's group names, when the caller read them already."""
    if not (getattr(user, "is_authenticated", False) and getattr(user, "is_active", False)):
        return False
    for approval in registered_rules():
        if groups is None and approval.groups:
            groups = _groups(user)
        if _rule_lets_in(user, approval, groups or frozenset()):
            return True
    return False


def _rule_lets_in(user: Any, approval: Approval, groups: frozenset[str]) -> bool:
    """Whether an active ``user`` passes ``approval``'s groups and permission (who requested
    the run aside)."""
    has_permission = bool(approval.permission and user.has_perm(approval.permission))
    rule = dict(active=True, username=user.get_username(), has_permission=has_permission, requester=None)
    return refusal(approval, user_groups=groups, **rule) is None


def _groups(user: Any) -> frozenset[str]:
    return frozenset(user.groups.values_list("name", flat=True))


def user_groups(user: Any) -> frozenset[str]:
    """``user``'s group names (one query; none for an anonymous or inactive user): read once
    and handed to :func:`may_decide_some` and :func:`waiting_for` on one page."""
    if not (getattr(user, "is_authenticated", False) and getattr(user, "is_active", False)):
        return frozenset()
    return _groups(user)


def cleaned(approval: Approval, data: Mapping[str, Any] | None) -> dict[str, Any]:
    """The approval form's cleaned data as JSON values; InvalidDecision with the form's errors."""
    if approval.form is None:
        return dict(data or {})
    form = approval.form(data=data or {})
    if not form.is_valid():
        problems = "; ".join(f"{name}: {' '.join(errors)}" for name, errors in form.errors.items())
        raise InvalidDecision(f"the approval's form did not validate: {problems}", errors=form.errors)
    return json.loads(json.dumps(form.cleaned_data, cls=DjangoJSONEncoder))


def decide(
    run: WorkflowRun | int,
    step_name: str,
    *,
    user: Any,
    approve: bool,
    data: Mapping[str, Any] | None = None,
    comment: str = "",
    actor: Any = None,
) -> Recorded:
    """Record ``user``'s decision on the approval step ``step_name`` of ``run``.

    Raises ``NotAllowedToDecide``, ``InvalidDecision`` (the form's errors), ``AlreadyDecided``
    or ``ApprovalClosed`` (the step no longer waits); ``ApprovalError`` for a step that is no
    approval. ``actor``: who the audit trail names (default: ``user``; the MCP server names
    its agent on the user's behalf).
    """
    if not isinstance(approve, bool):
        raise TypeError(f"approve must be True or False, got {approve!r}")
    if not isinstance(comment, str):
        raise TypeError(f"comment must be a string, got {comment!r}")
    if not isinstance(run, WorkflowRun):
        run = WorkflowRun.objects.get(pk=run)
    approval = approval_of(run, step_name)
    reason = why_not(user, run, approval)
    if reason is not None:
        raise NotAllowedToDecide(f"run {run.pk}, step {step_name!r}: {reason}")
    values = cleaned(approval, data) if approve else {}
    vote = {
        "approved": approve,
        "decided_by": {"id": user.pk, "username": user.get_username()},
        "data": values,
        "comment": comment,
        "at": store.now().isoformat(),
    }
    size = len(json.dumps(vote))
    if size > pgflow_settings.MAX_INPUT_BYTES:
        raise InputTooLarge(f"the decision is {size} bytes as JSON; the limit is PGFLOW['MAX_INPUT_BYTES']")
    settled, approvals = store.record_vote(run.pk, step_name, vote, quorum=approval.quorum, actor=actor or user)
    return Recorded(settled=settled, approvals=approvals, quorum=approval.quorum)


def open_votes(run: WorkflowRun, step_name: str) -> list[Vote]:
    """The approvals counted so far towards the quorum (none once the approval is decided)."""
    payloads = Signal.objects.filter(run=run, name=vote_name(step_name), consumed_at__isnull=True).order_by(
        "received_at", "id"
    )
    return [Vote.of(s.payload) for s in payloads if isinstance(s.payload, Mapping)]


def history(run: WorkflowRun) -> list[dict[str, Any]]:
    """Every approval step of ``run`` with its votes and decisions, oldest first (the run page)."""
    try:
        steps = [d for d in resolve(run.workflow_class).steps() if d.approval is not None]
    except WorkflowNotFound:
        return []
    found = []
    for definition in steps:
        names = {signal_name(definition.name): True, vote_name(definition.name): False}
        votes = []
        for row in Signal.objects.filter(run=run, name__in=names).order_by("received_at", "id"):
            if not isinstance(row.payload, Mapping):
                continue
            vote = Vote.of(row.payload)
            votes.append({"vote": vote, "settles": names[row.name], "received_at": row.received_at})
        waiting = Step.objects.filter(run=run, step_name=definition.name, status=StepStatus.WAITING).exists()
        found.append({"step": definition.name, "approval": definition.approval, "votes": votes, "waiting": waiting})
    return found


@dataclass(frozen=True)
class Waiting:
    """One approval waiting for a user's decision (an inbox row)."""

    run: WorkflowRun
    step: Step
    approval: Approval
    waiting_since: datetime | None
    votes: list[Vote]


def waiting_for(
    user: Any,
    *,
    limit: int = 200,
    tenants: Collection[str] | None = None,
    groups: frozenset[str] | None = None,
) -> list[Waiting]:
    """The approvals ``user`` may decide now, oldest wait first: those whose step waits, whose
    groups / permission / self-approval rule let the user in, and that they have not voted on.
    ``tenants``: only runs of these tenants (None: every run); ``groups``: the user's group
    names, when the caller read them already.

    The admin's navigation counts these on every page, so the queries do not grow with the
    waits: the waiting steps' classes and step names are read first (one query), and only
    the steps of approvals whose groups and permission let the user in are read, a chunk at
    a time, with their runs' requesters and open votes in one query per chunk."""
    found: list[Waiting] = []
    if not (getattr(user, "is_authenticated", False) and getattr(user, "is_active", False)):
        return found
    waiting = Step.objects.live().filter(status=StepStatus.WAITING, batch__isnull=True, run__status__in=list(OPEN_RUN))
    if tenants is not None:
        waiting = waiting.filter(run__tenant__in=sorted(tenants))
    if groups is None:
        groups = _groups(user)
    approvals: dict[tuple[str, str], Approval] = {}
    for pair in waiting.order_by().values_list("run__workflow_class", "step_name").distinct():
        try:
            definition = resolve(pair[0]).steps().get(pair[1])
        except WorkflowNotFound:
            continue
        # Steps of an approval the user may not decide whoever asked are never read.
        if (
            definition is not None
            and definition.approval is not None
            and _rule_lets_in(user, definition.approval, groups)
        ):
            approvals[pair] = definition.approval
    if not approvals:
        return found
    of_approvals = Q()
    for workflow_class, step_name in approvals:
        of_approvals |= Q(run__workflow_class=workflow_class, step_name=step_name)
    steps = waiting.filter(of_approvals).select_related("run").order_by("waiting_since", "id")
    username = user.get_username()
    for chunk in _chunks(steps, size=max(min(limit, CHUNK), 1)):
        started = _started_requesters([s.run_id for s in chunk if _reads_started(approvals[_pair(s)])])
        votes = _open_votes([s for s in chunk if approvals[_pair(s)].quorum > 1])
        for step in chunk:
            approval = approvals[_pair(step)]
            if not approval.self_approval:
                who = started.get(step.run_id) if approval.requester is None else requester(step.run, approval)
                if who is not None and who == username:
                    continue  # refusal()'s self-approval rule, its other checks passed above
            # With a quorum of one every vote decides: no open votes to read.
            counted = votes.get((step.run_id, step.step_name), [])
            if any(v.decided_by == username for v in counted):
                continue
            found.append(
                Waiting(run=step.run, step=step, approval=approval, waiting_since=step.waiting_since, votes=counted)
            )
            if len(found) >= limit:
                return found
    return found


CHUNK = 200  # waiting steps read at a time, each chunk with one query for requesters, one for votes


def _pair(step: Step) -> tuple[str, str]:
    return (step.run.workflow_class, step.step_name)


def _reads_started(approval: Approval) -> bool:
    """Whether the approval's requester is its run's ``started`` actor, and matters."""
    return not approval.self_approval and approval.requester is None


def _chunks(steps: QuerySet[Step], *, size: int) -> Iterator[list[Step]]:
    """``steps`` in lists of ``size``, each one query (keyset on the ordering, no OFFSET)."""
    after: tuple[datetime | None, int] | None = None
    while True:
        page = steps
        if after is not None:
            since, pk = after
            if since is None:  # NULLs sort last: only NULLs of a later id follow
                page = page.filter(waiting_since__isnull=True, id__gt=pk)
            else:  # the id breaks ties; a NULL wait sorts after every time
                page = page.filter(
                    Q(waiting_since__gt=since) | Q(waiting_since=since, id__gt=pk) | Q(waiting_since__isnull=True)
                )
        chunk = list(page[:size])
        if not chunk:
            return
        yield chunk
        if len(chunk) < size:
            return
        after = (chunk[-1].waiting_since, chunk[-1].pk)


def _started_requesters(run_ids: list[int]) -> dict[int, str | None]:
    """Each run's requester by its ``started`` event's actor (one query)."""
    if not run_ids:
        return {}
    found: dict[int, str | None] = {}
    rows = Event.objects.filter(run_id__in=run_ids, event=str(EventKind.STARTED)).order_by("run_id", "created_at", "id")
    for run_id, actor in rows.values_list("run_id", "actor"):
        found.setdefault(run_id, _requester_named(actor or ""))
    return found


def _open_votes(steps: list[Step]) -> dict[tuple[int, str], list[Vote]]:
    """The open votes of each step's approval (one query), as :func:`open_votes` reads them."""
    if not steps:
        return {}
    names = {vote_name(step.step_name): step.step_name for step in steps}
    rows = Signal.objects.filter(
        run_id__in=sorted({step.run_id for step in steps}), name__in=sorted(names), consumed_at__isnull=True
    ).order_by("received_at", "id")
    found: dict[tuple[int, str], list[Vote]] = {}
    for row in rows:
        if isinstance(row.payload, Mapping):
            found.setdefault((row.run_id, names[row.name]), []).append(Vote.of(row.payload))
    return found
