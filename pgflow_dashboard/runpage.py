"""What the run page shows, read from one run's rows: plain dicts for the template.

Bounded: a run that looped through thousands of attempts shows its latest ``MAX_ATTEMPTS``
(and says how many there are), so one page never loads an unbounded number of rows.
Reads only; every change goes through the run's own controls (``run.pause()`` …).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.admin import AdminSite
from django.contrib.admin.utils import quote
from django.db.models import Case, Count, Q, When
from django.urls import NoReverseMatch, reverse

from pgflow.core.attemptfields import GATE_FIELDS, STEP_FIELDS
from pgflow.core.events import PAUSE_ENDS, EventKind
from pgflow.core.limits import RATE_GATE, SINGLETON_GATE, describe_gate, gate_kind
from pgflow.core.states import CONTROLS, OPEN_RUN, RERUNNABLE_RUN, Control, RunStatus, StepStatus, control_error
from pgflow.deciding import history
from pgflow.exceptions import WorkflowNotFound
from pgflow.fanout.builder import TASK_KEY
from pgflow.models import Batch, BatchMember, Event, Gate, ScheduleTick, Signal, Step, WorkflowRun
from pgflow.registry import resolve

from . import timeline
from .timeformat import duration
from .why import member_error, reads_output

MAX_ATTEMPTS = 1000  # attempts shown in the step table and the chart (the latest ones)
MAX_EVENTS = 1000  # audit trail rows shown (the latest ones)
MAX_SIGNALS = 200
MAX_BATCHES = 100
MAX_ERRORS = 25  # failed attempts shown with their backtrace and causes (the latest ones)
MAX_MEMBERS = 100  # members listed per fan-out batch (failed ones first)

OPEN_CLAIMABLE = ("scheduled", "in_progress")  # a concurrency gate's holders that keep their place

# The chart needs only the events that open or close a pause.
PAUSE_EVENTS = (EventKind.PAUSED, *sorted(PAUSE_ENDS))

# The columns the step table and the timeline read (STEP_FIELDS, with the attempt's gates,
# GATE_FIELDS) are pgflow.core.attemptfields', shared with `pgflow show` and the MCP; the
# chart alone (its poller) reads these.
TIMELINE_FIELDS = (
    "step_name",
    "attempt",
    "status",
    "outcome",
    "error_class",
    "created_at",
    "scheduled_at",
    "started_at",
    "finished_at",
    "waiting_since",
    "batch_id",
    *GATE_FIELDS,
)

# The buttons, in the order they are shown: form action -> the control (core.states.CONTROLS).
BUTTONS: dict[str, Control] = {control.action: control for control in CONTROLS.values()}


def applied(control: Control, run: WorkflowRun, *, actor: Any, posted: Any) -> WorkflowRun:
    """Apply ``control`` to ``run`` as the form ``posted`` asked. A skip names the step the
    page showed (its ``step`` field): a run that moved on since, or a second click, skips
    nothing."""
    if control.name == "skip_step" and posted.get("step") is not None:
        return run.skip_step(actor=actor, step=posted["step"])
    result: WorkflowRun = getattr(run, control.name)(actor=actor)
    return result


def latest_steps(run: WorkflowRun, fields: tuple[str, ...], limit: int = MAX_ATTEMPTS) -> tuple[list[dict], int]:
    """The run's latest ``limit`` attempts, oldest first, and how many it has in all."""
    rows = list(Step.objects.filter(run=run).order_by("-created_at", "-id").values(*fields)[:limit])
    rows.reverse()
    total = len(rows) if len(rows) < limit else Step.objects.filter(run=run).count()
    return rows, total


def chart(run: WorkflowRun, *, now: datetime, steps: tuple[list[dict], int] | None = None) -> dict[str, Any]:
    """``timeline.chart`` of the run's latest attempts, plus its ``status``, ``now`` (epoch ms)
    and the number of ``attempts`` in all: the page's poller stops once the status is final.

    ``steps`` is ``latest_steps()``'s answer when the caller has it already.
    """
    rows, total = steps if steps is not None else latest_steps(run, TIMELINE_FIELDS)
    events = (
        Event.objects.filter(run=run, event__in=PAUSE_EVENTS)
        .order_by("-created_at", "-id")
        .values("event", "created_at")[:MAX_EVENTS]
    )
    payload = timeline.chart(with_children(mark_held(rows, now=now)), list(events), status=run.status, now=now)
    return {**payload, "status": run.status, "now": timeline.millis(now), "attempts": total}


def with_children(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with ``children`` (``{"total", "ended"}``) on each attempt whose batch holds
    child runs, for the timeline's child-batch series: one query for all the batches."""
    batch_ids = {row["batch_id"] for row in rows if row.get("batch_id")}
    if not batch_ids:
        return rows
    counts = {
        found["batch_id"]: {"total": found["total"], "ended": found["ended"]}
        for found in BatchMember.objects.filter(batch_id__in=batch_ids, child__isnull=False)
        .values("batch_id")
        .annotate(total=Count("id"), ended=Count("id", filter=~Q(status=BatchMember.Status.PENDING)))
    }
    return [{**row, "children": counts[row["batch_id"]]} if row.get("batch_id") in counts else row for row in rows]


@dataclass(frozen=True, kw_only=True)
class Definition:
    """How the run's stored digest compares with its class's current one."""

    run_digest: str
    current_digest: str | None
    problem: str | None  # why the class could not be loaded

    @property
    def changed(self) -> bool:
        return self.current_digest != self.run_digest


def definition(run: WorkflowRun) -> Definition:
    try:
        current: str | None = resolve(run.workflow_class).definition_digest()
        problem = None
    except WorkflowNotFound as exc:
        current, problem = None, str(exc)
    return Definition(run_digest=run.definition_digest, current_digest=current, problem=problem)


def subject(run: WorkflowRun, site: AdminSite) -> dict[str, Any] | None:
    """The subject's label and, when its model is in this admin, a link to it."""
    content_type = run.subject_type
    if content_type is None or run.subject_id is None:
        return None
    model = content_type.model_class()
    found = run.subject if model is not None else None
    label = str(found) if found is not None else f"{content_type.app_label}.{content_type.model} #{run.subject_id}"
    url = None
    if found is not None and model is not None and site.is_registered(model):
        try:
            url = reverse(
                f"{site.name}:{content_type.app_label}_{content_type.model}_change", args=[quote(run.subject_id)]
            )
        except NoReverseMatch:
            url = None
    return {
        "label": label,
        "url": url,
        "type": f"{content_type.app_label}.{content_type.model}",
        "id": run.subject_id,
        "missing": found is None,
    }


def gate_words(step: dict[str, Any]) -> list[str]:
    """The limits an attempt had to pass, in words (``describe_gate``)."""
    words = []
    if step.get("gate"):
        words.append(describe_gate(step["gate"], step["gate_max"]))
    if step.get("rate_gate"):
        words.append(describe_gate(step["rate_gate"], step["rate_limit"], step["rate_per"]))
    return words


def full_gates(step: dict[str, Any], *, now: datetime) -> list[str]:
    """The gates of a due, unclaimed attempt that have no room now, in words: what holds it.

    Read from the gate rows the way the claim counts room (pgflow.store.claims): a
    concurrency gate's holders still scheduled or in progress, a singleton's runs still open
    (its own run passes), a rate's starts inside the window."""
    names = [name for name in (step.get("gate"), step.get("rate_gate")) if name]
    full = []
    for gate in Gate.objects.filter(name__in=names):
        kind = gate_kind(gate.name)
        if kind == RATE_GATE:
            used = sum(1 for start in gate.starts if start > now - timedelta(seconds=gate.per))
        elif kind == SINGLETON_GATE:
            # The run that holds the singleton passes its own gate.
            mine = step["run_id"] in gate.holders
            used = 0 if mine else WorkflowRun.objects.filter(id__in=gate.holders, status__in=OPEN_RUN).count()
        else:
            used = Step.objects.filter(id__in=gate.holders, status__in=OPEN_CLAIMABLE).count()
        if used >= gate.size:
            full.append(describe_gate(gate.name, gate.size, gate.per))
    return sorted(full)


def mark_held(steps: list[dict[str, Any]], *, now: datetime) -> list[dict[str, Any]]:
    """Sets ``held`` on each due, unclaimed attempt a full gate holds (``timeline`` draws it
    throttled up to now) and ``held_by``: the limits and keys that held or hold an attempt."""
    for step in steps:
        due = step["status"] == StepStatus.SCHEDULED and step["scheduled_at"] <= now
        if due and (step["gate"] or step["rate_gate"]):
            step["held_by"] = full_gates(step, now=now)
            step["held"] = bool(step["held_by"])
        elif step.get("throttled_until") and step["throttled_until"] > step["scheduled_at"]:
            step["held_by"] = gate_words(step)
    return steps


def step_rows(steps: list[dict[str, Any]], *, now: datetime) -> list[dict[str, Any]]:
    """The step table: each attempt with its phase durations in words, and the limits that
    held it."""
    rows = []
    for step in mark_held(steps, now=now):
        spans = timeline.durations(step, now=now)
        rows.append(
            {
                **step,
                "durations": {kind: duration(spans[kind]) for kind in timeline.PHASES},
                "is_open": step["status"] in timeline.OPEN,
            }
        )
    return rows


def controls(run: WorkflowRun) -> list[dict[str, str]]:
    """The buttons that apply to the run's status now."""
    return [
        {"action": action, "label": control.label}
        for action, control in BUTTONS.items()
        if control_error(control.name, run.status) is None
    ]


def resume_hint(run: WorkflowRun, steps: list[dict[str, Any]]) -> str | None:
    """What Resume will do when the paused step failed after consuming a signal: its fresh
    attempt runs with that same signal, so a bad payload fails it again."""
    attempts = [step for step in steps if step["step_name"] == run.current_step]
    if run.status != RunStatus.PAUSED or not attempts:
        return None
    if not (attempts[-1]["signal_id"] and attempts[-1]["error_class"]):
        return None
    return (
        f"Resume runs step {run.current_step} again with the signal it already consumed. If that signal's "
        f"payload caused the failure, deploy a step that handles it before resuming, or Skip the step."
    )


def waited_for(run: WorkflowRun) -> tuple[str, ...]:
    """The signal names the run's class waits for (its steps' ``wait_for``), in step order."""
    try:
        steps = resolve(run.workflow_class).steps()
    except WorkflowNotFound:
        return ()
    return tuple(dict.fromkeys(step.wait_for for step in steps if step.wait_for))


def skip_warning(run: WorkflowRun) -> str | None:
    """What Skip breaks: the later steps whose bodies read the current step's output, and a
    child run's parent, which reads its children's outputs."""
    if not run.current_step or control_error("skip_step", run.status) is not None:
        return None
    warnings = []
    try:
        workflow = resolve(run.workflow_class)
        steps = workflow.steps()
    except WorkflowNotFound:
        steps = None
    if steps is not None and run.current_step in steps:
        position = steps.index(run.current_step) or 0
        sources = {}
        for step in list(steps)[position + 1 :]:
            body = getattr(workflow, step.method or step.name, None)
            try:
                sources[step.name] = inspect.getsource(body) if body is not None else ""
            except (OSError, TypeError):  # no source at hand (a compiled or generated body)
                sources[step.name] = ""
        readers = reads_output(run.current_step, sources)
        if readers:
            warnings.append(
                f"later step{'s' if len(readers) > 1 else ''} {', '.join(readers)} read"
                f"{'' if len(readers) > 1 else 's'} outputs[{run.current_step!r}], which a skipped step leaves empty"
            )
    if run.parent_id:
        warnings.append(f"this is a child run: its parent #{run.parent_id} reads its outputs when it finishes")
    return f"Skipping step {run.current_step}: {'; '.join(warnings)}." if warnings else None


def resume_fan_out_hint(run: WorkflowRun, steps: list[dict[str, Any]]) -> str | None:
    """What Resume re-sends when the paused step is a failed fan-out: its body runs again and
    opens a fresh batch, every member sent again, the ones that succeeded too."""
    attempts = [step for step in steps if step["step_name"] == run.current_step]
    if run.status != RunStatus.PAUSED or not attempts or not attempts[-1]["batch_id"]:
        return None
    batch = Batch.objects.filter(pk=attempts[-1]["batch_id"]).values("total", "succeeded", "failed").first()
    if batch is None or not batch["failed"]:
        return None
    return (
        f"Resume runs fan-out step {run.current_step} again: a fresh batch re-sends all {batch['total']} members, "
        f"the {batch['succeeded']} that succeeded as well as the {batch['failed']} that failed, so they must be "
        "safe to run twice."
    )


def resume_fan_outs_note(runs: list[WorkflowRun]) -> str | None:
    """:func:`resume_fan_out_hint` for a bulk Resume: how many of the paused ``runs`` stop on
    a failed fan-out, and how many members their fresh batches re-send. Two queries."""
    paused = {run.pk: run.current_step for run in runs if run.status == RunStatus.PAUSED and run.current_step}
    latest: dict[int, Any] = {}
    for run_id, step_name, batch_id in (
        Step.objects.filter(run_id__in=paused, batch_id__isnull=False)
        .order_by("run_id", "created_at", "id")
        .values_list("run_id", "step_name", "batch_id")
    ):
        if step_name == paused[run_id]:
            latest[run_id] = batch_id  # the current step's latest fan-out attempt
    batches = list(
        Batch.objects.filter(pk__in=set(latest.values()), failed__gt=0).values_list("total", "succeeded", "failed")
    )
    if not batches:
        return None
    total, succeeded, failed = (sum(column) for column in zip(*batches, strict=True))
    count = len(batches)
    return (
        f"{count} of these runs resume{'s' if count == 1 else ''} a failed fan-out: "
        f"{'its fresh batch re-sends' if count == 1 else 'their fresh batches re-send'} all {total} members, "
        f"the {succeeded} that succeeded as well as the {failed} that failed, so they must be safe to run twice."
    )


def context(run: WorkflowRun, site: AdminSite, *, now: datetime) -> dict[str, Any]:
    """Everything the run page shows but the forms."""
    steps, total_steps = latest_steps(run, STEP_FIELDS)
    failed = [step for step in steps if step["error_class"]]
    for step in failed[-MAX_ERRORS:]:
        step["detailed"] = True  # the step table links to its backtrace below
    events = list(
        Event.objects.filter(run=run)
        .order_by("-created_at", "-id")
        .values("id", "event", "actor", "details", "created_at", "step_id")[:MAX_EVENTS]
    )
    events.reverse()
    signals = list(Signal.objects.filter(run=run).order_by("-received_at", "-id")[:MAX_SIGNALS])
    batches = list(Batch.objects.filter(run=run).order_by("-created_at")[:MAX_BATCHES])
    ended = run.finished_at or now
    open_since = (
        (
            Step.objects.filter(run=run, step_name=run.current_step)
            .order_by("created_at")
            .values_list("created_at", flat=True)
            .first()
        )
        if run.current_step
        else None
    )
    return {
        "run": run,
        "definition": definition(run),
        "subject": subject(run, site),
        "duration": duration(ended - run.created_at),
        "current_step_for": duration(ended - open_since) if open_since else None,
        "steps": step_rows(steps, now=now),
        "total_steps": total_steps,
        "failed_steps": failed[-MAX_ERRORS:],
        "failed_count": len(failed),
        "events": events,
        "event_count": len(events),
        "pending_signals": [signal for signal in signals if signal.consumed_at is None],
        "consumed_signals": [signal for signal in signals if signal.consumed_at is not None],
        "batches": [
            {
                "batch": batch,
                "pending": max(batch.total - batch.succeeded - batch.failed, 0),
                "members": members(batch, site),
            }
            for batch in batches
        ],
        "controls": controls(run),
        "resume_hint": resume_hint(run, steps),
        "resume_fan_out_hint": resume_fan_out_hint(run, steps),
        "skip_warning": skip_warning(run),
        "waited_for": waited_for(run),
        "takes_signals": run.status in OPEN_RUN,
        "is_open": run.status in OPEN_RUN,
        "chart": chart(run, now=now, steps=(steps, total_steps)),
        "legend": timeline.legend(),
        "limits": {"attempts": MAX_ATTEMPTS, "events": MAX_EVENTS, "errors": MAX_ERRORS},
        "started_by_schedule": started_by_schedule(run),
        "rerun_steps": rerun_steps(run),
        "approvals": history(run),  # each approval step's votes and decision (pgflow.deciding)
        **family(run, now=now),
    }


def members(batch: Batch, site: AdminSite) -> list[dict[str, Any]]:
    """A batch's members (failed first, then by position, at most ``MAX_MEMBERS``): the
    function and its arguments, the status, the member's own error, a link to its child
    run or its django-q2 task when that admin is installed."""
    rows = (
        BatchMember.objects.filter(batch=batch)
        .annotate(failed_first=Case(When(status=BatchMember.Status.FAILED, then=0), default=1))
        .order_by("failed_first", "position")
        .values("position", "func", "args", "kwargs", "status", "error", "task_id", "child_id")[:MAX_MEMBERS]
    )
    listed = []
    for row in rows:
        error_class, message = member_error(row["error"]) if row["error"] else (None, "")
        url = None
        if row["child_id"]:
            url = reverse(f"{site.name}:pgflow_workflowrun_change", args=[row["child_id"]])
        elif row["task_id"] and TASK_KEY not in (row["kwargs"] or {}):  # another backend's task: no django-q2 page
            url = _task_url(site, row["task_id"], failed=row["status"] == BatchMember.Status.FAILED)
        listed.append({**row, "error_class": error_class, "error_message": message, "url": url})
    return listed


def _task_url(site: AdminSite, task_id: str, *, failed: bool) -> str | None:
    # django-q2's admin lists a finished task as a Success or a Failure; not installed: no link.
    try:
        return reverse(f"{site.name}:django_q_{'failure' if failed else 'success'}_change", args=[quote(task_id)])
    except NoReverseMatch:
        return None


MAX_RELATED = 200  # children and re-runs listed on a run page
RERUNNABLE = RERUNNABLE_RUN


def family(run: WorkflowRun, *, now: datetime) -> dict[str, Any]:
    """The runs linked to ``run``: the run it re-runs and its re-runs, its parent and its
    children (status, duration)."""
    children = [
        {"run": child, "duration": duration((child.finished_at or now) - child.created_at)}
        for child in run.children.order_by("id")[:MAX_RELATED]
    ]
    return {
        "rerun_of": run.rerun_of,
        "reruns": list(run.reruns.order_by("id")[:MAX_RELATED]),
        "parent_run": run.parent,
        "children": children,
        "children_count": run.children.count() if len(children) == MAX_RELATED else len(children),
    }


def rerun_steps(run: WorkflowRun) -> list[str]:
    """The steps the run can be re-run from (its class's current steps), or none while it runs."""
    if run.status not in RERUNNABLE:
        return []
    try:
        return list(resolve(run.workflow_class).steps().names())
    except WorkflowNotFound:
        return []


def started_by_schedule(run: WorkflowRun) -> ScheduleTick | None:
    """The schedule tick that started ``run`` (its schedule loaded), or None."""
    return ScheduleTick.objects.filter(run=run).select_related("schedule").order_by("id").first()
