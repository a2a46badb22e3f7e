"""``pgflow show RUN``: one run in full, bounded as the run page is: its facts and input, the
run page's "why" sentence, each attempt with its phases (:mod:`pgflow.core.phases`), its
errors, signals, batches and audit trail, and the timeline as text."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.apps import apps
from django.utils import timezone

from .. import records
from ..core.attemptfields import ERROR_FIELDS, NOT_SHOWN, STEP_FIELDS
from ..core.events import PAUSE_ENDS, EventKind
from ..core.phases import PHASES, pieces
from ..core.states import OPEN_STEP, RunStatus
from ..models import Batch, Event, Signal, Step, WorkflowRun
from .listing import run_row
from .output import dumps
from .text import duration, timeline_lines, when

MAX_ATTEMPTS = 200  # the latest attempts shown
MAX_EVENTS = 200
MAX_SIGNALS = 100
MAX_BATCHES = 50
# What show tells of each attempt: the run page's columns, less what the page reads only to draw.
ATTEMPT_FIELDS = tuple(name for name in STEP_FIELDS if name not in NOT_SHOWN)


def details(run: WorkflowRun, *, now: datetime) -> dict[str, Any]:
    """Everything ``show`` prints, as plain values."""
    total = Step.objects.filter(run=run).count()
    steps = list(Step.objects.filter(run=run).order_by("-created_at", "-id").values(*ATTEMPT_FIELDS)[:MAX_ATTEMPTS])
    steps.reverse()
    attempts = []
    for step in steps:
        segments = attempt_segments(step, now=now)
        phases: dict[str, float | None] = dict.fromkeys(PHASES)
        for segment in segments:
            seconds = (segment["to"] - segment["from"]).total_seconds()
            phases[segment["kind"]] = (phases[segment["kind"]] or 0.0) + seconds
        error = None
        if step["error_class"]:
            error = {key: step[key] for key in ERROR_FIELDS}
        attempts.append(
            {
                **{key: step[key] for key in ATTEMPT_FIELDS if key not in ERROR_FIELDS},
                "phases": phases,
                "segments": segments,
                "error": error,
            }
        )
    events = list(
        Event.objects.filter(run=run)
        .order_by("-created_at", "-id")
        .values("event", "actor", "details", "created_at", "step__step_name")[:MAX_EVENTS]
    )
    events.reverse()
    signals = Signal.objects.filter(run=run).order_by("-received_at", "-id")[:MAX_SIGNALS]
    batches = Batch.objects.filter(run=run).order_by("-created_at")[:MAX_BATCHES]
    return {
        "run": {**run_row(run), "input": run.input, "definition_digest": run.definition_digest},
        "why": why_sentence(run, now=now),
        "attempts_total": total,
        "attempts": attempts,
        "errors": [
            {"step_name": a["step_name"], "attempt": a["attempt"], "outcome": a["outcome"], **a["error"]}
            for a in attempts
            if a["error"]
        ],
        "paused_periods": paused_periods([dict(e) for e in events], status=run.status, now=now),
        "signals": records.signal_rows(reversed(list(signals))),
        "batches": records.batch_rows(reversed(list(batches))),
        "events": [
            {
                "event": e["event"],
                "actor": e["actor"],
                "step_name": e["step__step_name"],
                "details": e["details"],
                "created_at": e["created_at"],
            }
            for e in events
        ],
        "now": now,
    }


def why_sentence(run: WorkflowRun, *, now: datetime) -> str | None:
    """The run page's headline (and the MCP explain_run's first sentence), where the dashboard
    is installed: :func:`pgflow_dashboard.why.why` of :func:`pgflow_dashboard.runfacts.facts`."""
    if not apps.is_installed("pgflow_dashboard"):
        return None
    # facade: the sentence is the dashboard's, read from its run facts; pgflow runs without it
    from pgflow_dashboard import runfacts, why

    return why.why(runfacts.facts(run, now=now), now=timezone.localtime(now))


def attempt_segments(step: dict[str, Any], *, now: datetime) -> list[dict[str, Any]]:
    """The attempt's phases, ``[{"kind", "from", "to"}]``; an open one runs to ``now``."""
    finished = step["finished_at"]
    ending = finished if finished is not None else (now if step["status"] in OPEN_STEP else None)
    return [
        {"kind": kind, "from": low, "to": high}
        for kind, low, high in pieces(
            created=step["created_at"],
            scheduled=step["scheduled_at"],
            started=step["started_at"],
            waiting_since=step["waiting_since"],
            finished=finished,
            ending=ending,
            throttled_until=step["throttled_until"],
        )
        if high > low
    ]


def paused_periods(events: list[dict[str, Any]], *, status: str, now: datetime) -> list[dict[str, datetime]]:
    """Each ``paused`` event up to the event that ended it (resumed, cancelled, finished); an
    open one runs to ``now`` while the run is paused."""
    periods: list[dict[str, datetime]] = []
    opened: datetime | None = None
    for event in events:
        name = str(event["event"])
        if name == EventKind.PAUSED and opened is None:
            opened = event["created_at"]
        elif opened is not None and name in PAUSE_ENDS:
            periods.append({"from": opened, "to": event["created_at"]})
            opened = None
    if opened is not None and status == RunStatus.PAUSED:
        periods.append({"from": opened, "to": now})
    return periods


# --- as text ----------------------------------------------------------------------------------


def format_details(shown: dict[str, Any]) -> list[str]:
    run = shown["run"]
    lines = [f"run #{run['run_id']}  {run['workflow_class']}  {run['status']}"]
    if shown["why"]:
        lines.append(f"  why: {shown['why']}")
    for label, value in (
        ("current step", run["current_step"]),
        ("key", run["key"]),
        ("subject", run["subject"]),
        ("parent", f"#{run['parent_id']}" if run["parent_id"] else None),
        ("re-run of", f"#{run['rerun_of_id']}" if run["rerun_of_id"] else None),
        ("started", when(run["created_at"])),
        ("finished", when(run["finished_at"]) if run["finished_at"] else None),
        ("paused because", run["paused_reason"]),
        ("input", _json(run["input"])),
    ):
        if value:
            lines.append(f"  {label}: {value}")
    lines.append("")
    shown_count = len(shown["attempts"])
    more = f" (the latest {shown_count} of {shown['attempts_total']})" if shown["attempts_total"] > shown_count else ""
    lines.append(f"steps{more}:")
    for attempt in shown["attempts"]:
        spent = ", ".join(
            f"{phase} {duration(seconds)}" for phase, seconds in attempt["phases"].items() if seconds is not None
        )
        outcome = f" ({attempt['outcome']})" if attempt["outcome"] not in ("", attempt["status"]) else ""
        lines.append(f"  {attempt['step_name']} #{attempt['attempt']}  {attempt['status']}{outcome}  {spent}")
        if attempt["output"] is not None:
            lines.append(f"    output: {_json(attempt['output'])}")
    if not shown["attempts"]:
        lines.append("  none yet")
    lines.append("")
    lines.extend(timeline_lines(shown["attempts"], shown["paused_periods"]))
    if shown["errors"]:
        lines.append("")
        lines.append("errors:")
        for error in shown["errors"]:
            lines.append(
                f"  {error['step_name']} #{error['attempt']}: {error['error_class']}: {error['error_message'] or ''}"
            )
            for cause in error["error_causes"] or []:
                if isinstance(cause, dict):
                    lines.append(f"    caused by {cause.get('error_class')}: {cause.get('error_message') or ''}")
    if shown["signals"]:
        lines.append("")
        lines.append("signals:")
        for signal in shown["signals"]:
            consumed = f"consumed {when(signal['consumed_at'])}" if signal["consumed_at"] else "not consumed yet"
            lines.append(
                f"  {signal['name']}  {_json(signal['payload'])}  received {when(signal['received_at'])}, {consumed}"
            )
    if shown["batches"]:
        lines.append("")
        lines.append("batches:")
        for batch in shown["batches"]:
            lines.append(
                f"  #{batch['id']} {batch['description'] or ''}  {batch['status']}: {batch['succeeded']} of "
                f"{batch['total']} succeeded, {batch['failed']} failed"
            )
    lines.append("")
    lines.append("events:")
    for event in shown["events"]:
        step = f" [{event['step_name']}]" if event["step_name"] else ""
        detail = f"  {_json(event['details'])}" if event["details"] else ""
        lines.append(f"  {when(event['created_at'])}  {event['event']}{step} by {event['actor']}{detail}")
    return lines


def _json(value: Any) -> str:
    return dumps(value, indent=None)
