"""The MCP server's approval tools: what waits for the token's user, and deciding as that user.

Listing needs no model permission: it is the user's own inbox (``pgflow.deciding.waiting_for``),
the approvals their groups, permissions and the self-approval rule let them decide. Deciding is
refused unless ``PGFLOW["MCP_MAY_DECIDE"]`` is True; it then decides only as the token's user,
with the same checks as the admin's inbox, and the audit trail names the agent for the user.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model

import pgflow
from pgflow.conf import pgflow_settings
from pgflow.deciding import approval_of, waiting_for, why_not
from pgflow.exceptions import ApprovalError, InvalidDecision

from .reads import Refused, tenant_keys, visible_runs

LIMIT = 200


def _user(user_id: int) -> Any:
    return get_user_model().objects.get(pk=user_id)


def list_approvals(user_id: int, *, now: datetime) -> dict[str, Any]:
    user = _user(user_id)
    rows = []
    # PGFLOW["TENANT_VISIBLE"] for the token's user, applied by the query: the LIMIT is of
    # the approvals the user may see, as in the admin's inbox.
    for item in waiting_for(user, limit=LIMIT, tenants=tenant_keys()):
        rows.append(
            {
                "run_id": item.run.pk,
                "workflow_class": item.run.workflow_class,
                "step_name": item.step.step_name,
                "subject": str(item.run.subject) if item.run.subject_id is not None else None,
                "input": item.run.input,
                "waiting_since": item.waiting_since,
                "waiting_seconds": (now - item.waiting_since).total_seconds() if item.waiting_since else None,
                "approvals": len(item.votes),
                "quorum": item.approval.quorum,
                "form_fields": sorted(getattr(item.approval.form, "base_fields", {})),
            }
        )
    return {"user": user.get_username(), "count": len(rows), "approvals": rows}


def decide_approval(
    user_id: int,
    run_id: int,
    step_name: str,
    *,
    approve: bool,
    data: Any,
    comment: str,
    actor: str,
    dry_run: bool,
) -> dict[str, Any]:
    if not pgflow_settings.MCP_MAY_DECIDE:
        raise Refused(
            "agents may not decide approvals here: PGFLOW['MCP_MAY_DECIDE'] is False (a person decides in the "
            "admin's inbox, /admin/pgflow/inbox/)"
        )
    if data is not None and not isinstance(data, dict):
        raise Refused(f"data must be a JSON object of the approval form's fields, got {data!r}")
    user = _user(user_id)
    run = visible_runs().filter(pk=run_id).first()
    if run is None:
        raise Refused(f"no run {run_id}")
    try:
        approval = approval_of(run, step_name)
    except ApprovalError as exc:
        raise Refused(str(exc)) from exc
    what = "approve" if approve else "reject"
    if dry_run:
        refused = why_not(user, run, approval)
        return {
            "dry_run": True,
            "would": f"{what} step {step_name!r} of run {run_id} as {user.get_username()}",
            "refused": refused,
        }
    try:
        recorded = pgflow.decide(
            run, step_name, user=user, approve=approve, data=data, comment=comment or "", actor=actor
        )
    except InvalidDecision as exc:
        raise Refused(f"{exc} (fields: {dict(exc.errors or {})})") from exc
    except ApprovalError as exc:
        raise Refused(str(exc)) from exc
    return {
        "dry_run": False,
        "decided": what,
        "as": user.get_username(),
        "settled": recorded.settled,
        "approvals": recorded.approvals,
        "quorum": recorded.quorum,
    }
