"""``pgflow runs`` and the runs a command acts on: one by its id (``RUN``), or those a search
matches (``--search``, the language of :mod:`pgflow.search`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet

from .. import records
from ..core.states import RunStatus
from ..models import WorkflowRun
from ..search import MAX_RUN_ID, SearchError, parse
from ..searching import runs_matching
from . import BAD_ARGUMENTS, NOT_FOUND, CliError
from .text import when

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000  # runs one listing prints, and runs one change acts on (as the admin's bulk actions)
STATUSES = tuple(status.value for status in RunStatus)


def run_id(text: str) -> int:
    """``12`` or ``#12`` as a run id; anything else is a bad argument naming it."""
    number = text.strip().removeprefix("#")
    if not number.isdigit() or len(number) > MAX_RUN_ID:
        raise CliError(f"RUN must be a run id (a whole number such as 12), got {text!r}", code=BAD_ARGUMENTS)
    return int(number)


def find_run(text: str) -> WorkflowRun:
    pk = run_id(text)
    run = WorkflowRun.objects.select_related("subject_type").filter(pk=pk).first()
    if run is None:
        raise CliError(f"no workflow run with id {pk}", code=NOT_FOUND)
    return run


def searched(text: str, *, now: datetime | None = None) -> QuerySet[WorkflowRun]:
    """The runs ``text`` matches; a query that cannot be read is a bad argument."""
    try:
        query = parse(text)
        if query.empty:
            raise SearchError("the search is empty; give at least one word or qualifier, such as status:paused")
        return runs_matching(query, now=now)
    except SearchError as exc:
        raise CliError(f"--search {text!r}: {exc}", code=BAD_ARGUMENTS) from None


def list_runs(
    *, workflow: str | None, status: str | None, search: str | None, limit: int, now: datetime | None = None
) -> dict[str, Any]:
    """Newest first, at most ``limit``; ``more`` says whether more runs match."""
    if not 1 <= limit <= MAX_LIMIT:
        raise CliError(f"--limit must be a whole number from 1 to {MAX_LIMIT}, got {limit}", code=BAD_ARGUMENTS)
    runs = searched(search, now=now) if search else WorkflowRun.objects.all()
    if workflow:
        runs = runs.filter(Q(workflow_class=workflow) | Q(workflow_class__endswith=f".{workflow}"))
    if status:
        if status not in STATUSES:
            raise CliError(f"--status must be one of {', '.join(STATUSES)}, got {status!r}", code=BAD_ARGUMENTS)
        runs = runs.filter(status=status)
    found = list(runs.select_related("subject_type").order_by("-created_at", "-id")[: limit + 1])
    rows = [run_row(run) for run in found[:limit]]
    answer = {"count": len(rows), "limit": limit, "more": len(found) > limit, "runs": rows}
    notes = parse(search).notes if search else ()  # a comparison's default since: window
    return {**answer, "notes": list(notes)} if notes else answer


def run_row(run: WorkflowRun) -> dict[str, Any]:
    """A run's facts as plain values (datetimes stay datetimes; the command writes them as ISO 8601)."""
    return {
        "run_id": run.pk,
        "workflow_class": run.workflow_class,
        "workflow": run.workflow_name,
        "status": run.status,
        "current_step": run.current_step,
        "key": run.key,
        "subject": records.subject_label(run),
        "parent_id": run.parent_id,
        "rerun_of_id": run.rerun_of_id,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "finished_at": run.finished_at,
        "paused_reason": run.paused_reason or None,
    }


def format_runs(answer: dict[str, Any]) -> list[str]:
    """The listing as a table, one run a line."""
    rows = answer["runs"]
    if not rows:
        return ["no runs match"]
    table = [("RUN", "WORKFLOW", "STATUS", "STEP", "KEY", "STARTED")]
    for row in rows:
        table.append(
            (
                f"#{row['run_id']}",
                row["workflow"],
                row["status"],
                row["current_step"] or "—",
                row["key"] or "—",
                when(row["created_at"]),
            )
        )
    widths = [max(len(line[column]) for line in table) for column in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table]
    if answer["more"]:
        lines.append(f"(the newest {answer['limit']}; more match: raise --limit or narrow the search)")
    lines.extend(f"({note})" for note in answer.get("notes", ()))
    return lines
