"""The MCP server: the SDK's ``MCPServer`` with pgflow's tools, acting as one user.

Each tool call re-reads the user (an admin who removes a permission or deactivates the
user takes effect at the next call), checks the permission the tool needs, runs the work
through ``sync_to_async`` (thread-sensitive: the ORM runs in the thread that owns the
request's connection, not on the SDK's worker threads) and masks ``PGFLOW["REDACT"]``
keys in the answer, and secrets in its text: error messages, paused reasons and event
details are free text a body wrote, so a value after a secret key (``password=…``), a URL's
password, and every value held under a secret key in the inputs and signal payloads of the
runs the answer names are masked in them too. A refusal (a missing permission, a bad argument, a control that does
not apply) is a tool error whose text says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.utils import timezone
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from pgflow import tenants
from pgflow.conf import pgflow_settings
from pgflow.runtime.presence import version

from . import actions, approvals, reads
from .redact import redact

VIEW = "pgflow.view_workflowrun"
CHANGE = "pgflow.change_workflowrun"
# The approval tools need no model permission: the approval's own rule says who may decide.
APPROVER = "approver"
SERVER_NAME = "pgflow"
INSTRUCTIONS = (
    "pgflow runs durable, step-based workflows inside this Django project. Read tools (insights, stuck, "
    "search_runs, get_run, explain_run, workers) need the view permission on workflow runs; action tools "
    "(pause_run, resume_run, cancel_run, skip_step, send_signal, rerun_from) need the change permission and default to "
    "dry_run=true: call again with dry_run=false to act. Every action is recorded in the run's audit trail. "
    "Approval tools (list_approvals, decide_approval) act for your user: the approvals waiting for them, and, only "
    "where PGFLOW['MCP_MAY_DECIDE'] allows it, deciding one as them, dry run first."
)


@dataclass(frozen=True, kw_only=True)
class Principal:
    """Who the server acts as: a user, and (over HTTP) the name of the token used."""

    user_id: int
    token_name: str | None = None


def build(principal: Principal) -> MCPServer:
    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, version=_version())

    async def call(ctx: Context, need: str, work: Callable[[Any], Any]) -> dict[str, Any]:
        agent = _client_name(ctx) or principal.token_name or "unknown client"
        return await sync_to_async(_guarded, thread_sensitive=True)(principal, agent, need, work)

    @server.tool()
    async def insights(ctx: Context, window: str = "24h", tenant: str | None = None) -> dict[str, Any]:
        """The insights window's figures (the same as the admin's insights.json): runs and step failures per
        bucket, per-workflow and per-step counts and p50/p95 durations, top errors, and what is stuck now.
        window: one of 1h, 24h, 7d, 30d. tenant: one tenant's runs only (a user who sees only some
        tenants gets theirs without it)."""
        return await call(ctx, VIEW, lambda _actor: reads.insights_for(window, tenant=tenant, now=timezone.now()))

    @server.tool()
    async def stuck(ctx: Context, tenant: str | None = None) -> dict[str, Any]:
        """What needs an operator now: paused runs, due steps no worker claimed, leases run out, signal waits
        past their deadline, runs on a changed definition, and queues with due steps but no live worker.
        tenant: one tenant's runs only (a user who sees only some tenants gets theirs without it)."""
        return await call(ctx, VIEW, lambda _actor: reads.stuck(tenant=tenant, now=timezone.now()))

    @server.tool()
    async def search_runs(
        ctx: Context,
        status: str | None = None,
        workflow: str | None = None,
        key: str | None = None,
        subject: str | None = None,
        error_class: str | None = None,
        started_after: str | None = None,
        started_before: str | None = None,
        limit: int = reads.DEFAULT_SEARCH,
        parent: int | None = None,
        query: str | None = None,
    ) -> dict[str, Any]:
        """Runs matching every filter given, newest first, at most `limit` (1 to 200).
        query: the run list's search language, e.g. 'attr.plan:gold status:paused input.customer.id:42
        output.charge.paid:>100 error:Timeout step:charge key:order-7 class:Checkout since:2d'.
        status: running, paused, finished or cancelled. workflow: the class name or dotted path.
        key: the idempotency key. subject: 'app_label.model:id' or an id. error_class: runs with an attempt
        that failed with it (name or dotted path). started_after / started_before: ISO 8601 date-times.
        parent: a run id: its child runs (started by its fan_out's batch.add_run)."""
        return await call(
            ctx,
            VIEW,
            lambda _actor: reads.search_runs(
                status=status,
                workflow=workflow,
                key=key,
                subject=subject,
                error_class=error_class,
                started_after=started_after,
                started_before=started_before,
                limit=limit,
                parent=parent,
                query=query,
            ),
        )

    @server.tool()
    async def get_run(ctx: Context, run_id: int) -> dict[str, Any]:
        """One run in full: its facts and input, each attempt with its waited/throttled/queued/ran/waiting durations
        and timeline segments, errors with their causes, signals, fan-out batches and the audit trail."""
        return await call(ctx, VIEW, lambda _actor: reads.get_run(run_id, now=timezone.now()))

    @server.tool()
    async def explain_run(ctx: Context, run_id: int) -> dict[str, Any]:
        """A few plain sentences on where the run stands and why, from the facts pgflow holds."""
        return await call(ctx, VIEW, lambda _actor: reads.explain_run(run_id, now=timezone.now()))

    @server.tool()
    async def workers(ctx: Context) -> dict[str, Any]:
        """The recorded pgflow workers: name, host, pid, queues, concurrency, version, started, last heartbeat,
        steps run and in progress, and whether each is live (heartbeat within the lease)."""
        return await call(ctx, VIEW, lambda _actor: reads.workers(now=timezone.now()))

    def control_tool(tool: str) -> None:
        _method, effect = actions.CONTROLS[tool]

        async def control(ctx: Context, run_id: int, dry_run: bool = True) -> dict[str, Any]:
            return await call(ctx, CHANGE, lambda actor: actions.control(tool, run_id, actor=actor, dry_run=dry_run))

        async def skip(ctx: Context, run_id: int, step_name: str | None = None, dry_run: bool = True) -> dict[str, Any]:
            return await call(
                ctx, CHANGE, lambda actor: actions.control(tool, run_id, actor=actor, dry_run=dry_run, step=step_name)
            )

        description = (
            f"{effect[0].upper()}{effect[1:]}. dry_run (default true) only says what would happen; "
            "pass dry_run=false to act. Recorded in the run's audit trail with you as the actor."
        )
        if tool == "skip_step":
            description += (
                " step_name: the step you mean to skip, as the dry run named it; if the run has moved on to "
                "another step since, nothing is skipped and the answer says where it is."
            )
        server.add_tool(skip if tool == "skip_step" else control, name=tool, description=description)

    for tool in actions.CONTROLS:
        control_tool(tool)

    @server.tool()
    async def send_signal(
        ctx: Context, run_id: int, name: str, payload: Any = None, dry_run: bool = True
    ) -> dict[str, Any]:
        """Deliver the signal `name` (with a JSON payload) to a running or paused run: it wakes the step waiting
        for it, or is kept until one does. dry_run (default true) only says what would happen."""
        return await call(
            ctx, CHANGE, lambda actor: actions.send_signal(run_id, name, payload, actor=actor, dry_run=dry_run)
        )

    @server.tool()
    async def rerun_from(
        ctx: Context, run_id: int, step_name: str, input: Any = None, dry_run: bool = True
    ) -> dict[str, Any]:
        """Re-run a finished, cancelled or paused run from `step_name`: a new run of the same workflow and
        subject, linked to it, with the outputs of the steps before `step_name` copied from it (a paused run
        is cancelled as re-run). input: a JSON object for the new run, or null to keep the run's input.
        dry_run (default true) only says what would be copied and started."""
        return await call(
            ctx, CHANGE, lambda actor: actions.rerun_from(run_id, step_name, input, actor=actor, dry_run=dry_run)
        )

    @server.tool()
    async def list_approvals(ctx: Context) -> dict[str, Any]:
        """The approvals waiting for your user's decision, oldest wait first: run, step, subject, input, how
        long it has waited, approvals so far of the quorum, and the approval form's fields. Needs no model
        permission: the approval's groups, permission and self-approval rule decide what is listed."""
        user_id = principal.user_id
        return await call(ctx, APPROVER, lambda _actor: approvals.list_approvals(user_id, now=timezone.now()))

    @server.tool()
    async def decide_approval(
        ctx: Context,
        run_id: int,
        step_name: str,
        approve: bool,
        data: Any = None,
        comment: str = "",
        dry_run: bool = True,
    ) -> dict[str, Any]:
        """Approve or reject the approval step `step_name` of a run as your user, with the approval form's
        fields in `data`. Refused unless PGFLOW['MCP_MAY_DECIDE'] is True; the same checks as the admin's inbox;
        recorded in the run's audit trail as the agent for your user. dry_run (default true) only says what
        would happen."""
        user_id = principal.user_id
        return await call(
            ctx,
            APPROVER,
            lambda actor: approvals.decide_approval(
                user_id,
                run_id,
                step_name,
                approve=approve,
                data=data,
                comment=comment,
                actor=actor,
                dry_run=dry_run,
            ),
        )

    return server


def _guarded(principal: Principal, agent: str, need: str, work: Callable[[str], Any]) -> dict[str, Any]:
    user = get_user_model().objects.filter(pk=principal.user_id).first()
    if user is None or not user.is_active:
        raise ToolError("the user this server acts as no longer exists or is inactive")
    if need != APPROVER and not user.has_perm(need) and not (need == VIEW and user.has_perm(CHANGE)):
        raise ToolError(f"user {user.get_username()!r} lacks the {need} permission this tool needs")
    actor = f"agent:{agent} for user:{user.get_username()}"
    try:
        # PGFLOW["TENANT_VISIBLE"] for the token's user: its tools see only those tenants' runs.
        with reads.tenant_scope(tenants.visible(user)):
            answer = work(actor)
    except reads.Refused as exc:
        raise ToolError(str(exc)) from exc
    keys = pgflow_settings.REDACT
    return reads.plain(redact(answer, keys, reads.known_secrets(answer, keys)))


def _client_name(ctx: Context) -> str | None:
    try:
        params = ctx.session.client_params
    except (AttributeError, ValueError):
        return None
    info = getattr(params, "client_info", None) if params is not None else None
    name = getattr(info, "name", None)
    return str(name)[:80] if name else None


def _version() -> str:
    return version()
