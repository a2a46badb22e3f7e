"""What the read tools answer, from pgflow's rows: plain JSON-ready dicts (datetimes as ISO
8601 strings once :func:`plain` has run). Bounded like the run page: no answer loads an
unbounded number of rows.

A bad argument raises :class:`Refused` with a message naming what is accepted; the server
turns it into a tool error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from pgflow import records
from pgflow.conf import pgflow_settings
from pgflow.core import attemptfields
from pgflow.core.states import RunStatus
from pgflow.models import Batch, Event, Signal, Step, Worker, WorkflowRun
from pgflow.search import ACCEPTED, SearchError, parse
from pgflow.searching import runs_matching

from .. import insights, runfacts, runpage, tenancy, timeline
from ..window import WorkflowWindow
from . import explain
from .redact import secret_values

MAX_SEARCH = 200  # runs one search_runs answers at most
DEFAULT_SEARCH = 50
MAX_RUN_ATTEMPTS = 200  # attempts get_run lists (the latest)
MAX_RUN_EVENTS = 200
MAX_RUN_SIGNALS = 100
MAX_RUN_BATCHES = 50
STATUSES = tuple(status.value for status in RunStatus)


class Refused(ValueError):
    """A tool argument or request that cannot be served; the message says why."""


# The tenants whose runs this tool call may read or act on (PGFLOW["TENANT_VISIBLE"] for the
# token's user), set by the server around each call; None: every tenant.
_TENANTS: ContextVar[frozenset[str] | None] = ContextVar("pgflow_mcp_tenants", default=None)


@contextmanager
def tenant_scope(keys: frozenset[str] | None) -> Iterator[None]:
    """Tool calls inside see only the runs of the tenants ``keys`` (None: every run)."""
    token = _TENANTS.set(keys)
    try:
        yield
    finally:
        _TENANTS.reset(token)


def tenant_keys() -> frozenset[str] | None:
    """The tenants this call sees (None: every tenant)."""
    return _TENANTS.get()


def visible_runs() -> QuerySet[WorkflowRun]:
    """The runs this call may see: another tenant's run is as one that does not exist."""
    keys = _TENANTS.get()
    every = WorkflowRun.objects.all()
    return every if keys is None else every.filter(tenant__in=sorted(keys))


def _counted_tenants(tenant: str | None) -> tuple[str, ...] | None:
    """The tenants the insights and stuck tools count: ``tenant`` if the token's user sees it,
    else the user's own (None: every tenant, as the user sees every one)."""
    try:
        return tenancy.narrowed(_TENANTS.get(), tenant)
    except (tenancy.NotVisible, ValueError, TypeError) as exc:
        raise Refused(str(exc)) from exc


MAX_SECRET_RUNS = 500  # runs an answer names whose inputs and payloads are read for secret values


def known_secrets(answer: Any, keys: list[str] | tuple[str, ...]) -> set[str]:
    """Values held under a secret key in ``answer`` and in the inputs and signal payloads of
    the runs it names (its ``run_id`` values): a body's error message may quote them."""
    found = secret_values(answer, keys)
    run_ids = sorted(_run_ids(answer, set()))[:MAX_SECRET_RUNS]
    if run_ids:
        found |= secret_values(list(WorkflowRun.objects.filter(pk__in=run_ids).values_list("input", flat=True)), keys)
        found |= secret_values(list(Signal.objects.filter(run_id__in=run_ids).values_list("payload", flat=True)), keys)
    return found


def _run_ids(value: Any, found: set[int]) -> set[int]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("run_id", "rerun_id") and isinstance(item, int) and not isinstance(item, bool):
                found.add(item)
            else:
                _run_ids(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _run_ids(item, found)
    return found


def plain(value: Any) -> Any:
    """``value`` with datetimes, UUIDs and decimals as JSON strings (the way insights.json writes them)."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


# --- insights, stuck, workers -------------------------------------------------------------------


def insights_for(window: str, *, tenant: str | None = None, now: datetime) -> dict[str, Any]:
    try:
        parsed = WorkflowWindow.parse(window, retention=pgflow_settings.RETENTION, now=now)
    except WorkflowWindow.Invalid as exc:
        raise Refused(str(exc)) from exc
    return insights.compute(parsed, tenants=_counted_tenants(tenant))


def stuck(*, tenant: str | None = None, now: datetime) -> dict[str, Any]:
    tenants = _counted_tenants(tenant)
    found = insights.stuck(now, tenants=tenants)
    return found if tenants is None else {**found, "tenants": list(tenants)}


def workers(*, now: datetime) -> dict[str, Any]:
    """Every recorded worker, live ones first, with whether it is live (heartbeat within the lease)."""
    lease = timedelta(seconds=pgflow_settings.seconds("LEASE"))
    rows = []
    for worker in Worker.objects.order_by("-heartbeat_at", "name")[:500]:
        rows.append(
            {
                "name": worker.name,
                "host": worker.host,
                "pid": worker.pid,
                "queues": worker.queues,
                "concurrency": worker.concurrency,
                "version": worker.version,
                "started_at": worker.started_at,
                "heartbeat_at": worker.heartbeat_at,
                "live": worker.heartbeat_at >= now - lease,
                "steps_run": worker.steps_run,
                "steps_in_progress": worker.steps_in_progress,
            }
        )
    live = [row for row in rows if row["live"]]
    return {"live": len(live), "gone": len(rows) - len(live), "lease_seconds": lease.total_seconds(), "workers": rows}


# --- search_runs ----------------------------------------------------------------------------------


def search_runs(
    *,
    status: str | None = None,
    workflow: str | None = None,
    key: str | None = None,
    subject: str | None = None,
    error_class: str | None = None,
    started_after: str | None = None,
    started_before: str | None = None,
    limit: int = DEFAULT_SEARCH,
    parent: int | None = None,
    query: str | None = None,
) -> dict[str, Any]:
    if not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH:
        raise Refused(f"limit must be a whole number from 1 to {MAX_SEARCH}, got {limit!r}")
    runs = visible_runs()
    if query:
        runs = _by_query(runs, query)
    if status:
        if status not in STATUSES:
            raise Refused(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        runs = runs.filter(status=status)
    if workflow:
        # The dotted path, or the class name alone.
        runs = runs.filter(Q(workflow_class=workflow) | Q(workflow_class__endswith=f".{workflow}"))
    if key:
        runs = runs.filter(key=key)
    if parent is not None:
        if not isinstance(parent, int) or isinstance(parent, bool):
            raise Refused(f"parent must be a run id (a whole number), got {parent!r}")
        runs = runs.filter(parent_id=parent)
    if subject:
        runs = _by_subject(runs, subject)
    if error_class:
        failed = Step.objects.filter(run=OuterRef("pk"), status="failed").filter(
            Q(error_class=error_class) | Q(error_class__endswith=f".{error_class}")
        )
        runs = runs.filter(Exists(failed))
    if started_after:
        runs = runs.filter(created_at__gte=_moment("started_after", started_after))
    if started_before:
        runs = runs.filter(created_at__lt=_moment("started_before", started_before))
    found = list(runs.order_by("-created_at", "-id")[:limit])
    answer = {"count": len(found), "limit": limit, "runs": [_run_row(run) for run in found]}
    notes = parse(query).notes if query else ()  # a comparison's default since: window
    return {**answer, "notes": list(notes)} if notes else answer


def _by_query(runs: QuerySet[WorkflowRun], query: str) -> QuerySet[WorkflowRun]:
    """The run list's search language (pgflow.search): a query that cannot be read is a
    refusal naming the part at fault and what the language accepts."""
    try:
        return runs_matching(parse(query), runs)
    except SearchError as exc:
        message = str(exc)
        if ACCEPTED not in message:
            message = f"{message}; {ACCEPTED}"
        raise Refused(f"query: {message}") from exc


def _by_subject(runs: QuerySet[WorkflowRun], subject: str) -> QuerySet[WorkflowRun]:
    """``app_label.model:id`` or an id alone."""
    label, sep, pk = subject.rpartition(":")
    if not sep:
        return runs.filter(subject_id=subject)
    app_label, dot, model = label.partition(".")
    if not dot:
        raise Refused(f"subject must be 'app_label.model:id' (e.g. 'auth.user:42') or an id, got {subject!r}")
    return runs.filter(subject_type__app_label=app_label, subject_type__model=model.lower(), subject_id=pk)


def _moment(name: str, value: str) -> datetime:
    parsed = parse_datetime(value) if isinstance(value, str) else None
    if parsed is None:
        raise Refused(f"{name} must be an ISO 8601 date-time such as 2025-03-01T09:00:00+00:00, got {value!r}")
    return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed)


def _run_row(run: WorkflowRun) -> dict[str, Any]:
    return {
        "run_id": run.pk,
        "workflow_class": run.workflow_class,
        "status": run.status,
        "current_step": run.current_step,
        "key": run.key,
        "subject": records.subject_label(run),
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "finished_at": run.finished_at,
        "paused_reason": run.paused_reason or None,
        "attributes": run.attributes,
    }


# --- get_run and explain_run ----------------------------------------------------------------------


def find_run(run_id: int) -> WorkflowRun:
    run = visible_runs().filter(pk=run_id).first()
    if run is None:
        raise Refused(f"no workflow run with id {run_id}")
    return run


# What get_run tells of each attempt: the run page's columns less the row's id and what the
# page reads only to draw (as `pgflow show`), the error as one "error" object and the gates
# as "held_by".
ATTEMPT_FIELDS = tuple(
    field for field in runpage.STEP_FIELDS if field not in {"id", *attemptfields.NOT_SHOWN, *attemptfields.ERROR_FIELDS}
)


def get_run(run_id: int, *, now: datetime) -> dict[str, Any]:
    run = find_run(run_id)
    steps, total = runpage.latest_steps(run, runpage.STEP_FIELDS, limit=MAX_RUN_ATTEMPTS)
    attempts = []
    for step in runpage.mark_held(steps, now=now):
        attempts.append(
            {
                **{key: step[key] for key in ATTEMPT_FIELDS},
                "held_by": step.get("held_by", []),
                "durations": timeline.durations(step, now=now),
                "segments": timeline.segments(step, now=now),
                "error": _error(step),
            }
        )
    events = list(
        Event.objects.filter(run=run)
        .order_by("-created_at", "-id")
        .values("event", "actor", "details", "created_at", "step_id")[:MAX_RUN_EVENTS]
    )
    events.reverse()
    signals = Signal.objects.filter(run=run).order_by("-received_at", "-id")[:MAX_RUN_SIGNALS]
    batches = Batch.objects.filter(run=run).order_by("-created_at")[:MAX_RUN_BATCHES]
    definition = runpage.definition(run)
    return {
        "run": {
            **_run_row(run),
            "input": run.input,
            "definition_digest": run.definition_digest,
            "definition_changed": definition.changed,
            "definition_problem": definition.problem,
        },
        "attempts_total": total,
        "attempts": attempts,
        "paused_periods": timeline.paused_periods(
            Event.objects.filter(run=run, event__in=runpage.PAUSE_EVENTS)
            .order_by("created_at", "id")
            .values("event", "created_at"),
            status=run.status,
            now=now,
        ),
        "errors": [
            attempt["error"] | {"step_name": attempt["step_name"], "attempt": attempt["attempt"]}
            for attempt in attempts
            if attempt["error"]
        ],
        "signals": records.signal_rows(signals),
        "batches": records.batch_rows(batches),
        "events": events,
    }


def _error(step: dict[str, Any]) -> dict[str, Any] | None:
    if not step["error_class"]:
        return None
    return {
        "error_class": step["error_class"],
        "error_message": step["error_message"],
        "error_backtrace": step["error_backtrace"],
        "error_causes": step["error_causes"] or [],
        "outcome": step["outcome"],
    }


def explain_facts(run: WorkflowRun, *, now: datetime) -> dict[str, Any]:
    """The facts :func:`pgflow_dashboard.mcp.explain.explain` reads, for one run: the run
    page's (:func:`pgflow_dashboard.runfacts.facts`)."""
    return runfacts.facts(run, now=now)


def explain_run(run_id: int, *, now: datetime) -> dict[str, Any]:
    run = find_run(run_id)
    sentences = explain.explain(explain_facts(run, now=now), now=timezone.localtime(now))
    return {"run_id": run.pk, "status": run.status, "explanation": sentences}
