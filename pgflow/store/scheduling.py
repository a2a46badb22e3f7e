"""Scheduling: the next attempt of a run, and which step that is (by order, or by the run's history
when its definition changed)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import evaluation
from ..core.definitions import scheduled_plainly
from ..core.events import EventKind
from ..core.limits import NO_GATES, Gates
from ..core.states import RunStatus, StepStatus
from ..db import connection
from ..exceptions import PgflowError, StepNotFound, WorkflowNotFound
from ..models import Step, WorkflowRun
from .locking import OPEN_STEP_VALUES, event, notify, now
from .rows import attempt_values

if TYPE_CHECKING:
    from ..core.definitions import StepDefinition
    from ..workflow import Workflow

logger = logging.getLogger("pgflow")


# --- scheduling ------------------------------------------------------------------------------


def schedule_attempt(
    run: WorkflowRun,
    workflow: type[Workflow],
    definition: StepDefinition,
    *,
    at: datetime,
    delay: float | None = None,
    attempt: int | None = None,
    signal_id: int | None = None,
) -> Step:
    """Insert the run's next open attempt of ``definition``; NOTIFY when it is due now."""
    if attempt is None:
        attempt = Step.objects.live().filter(run=run, step_name=definition.name).count() + 1
    values = attempt_values(workflow, definition)
    due = at + timedelta(seconds=delay) if delay else at
    gates = gates_of_attempt(run, workflow, definition, attempt)
    step = Step.objects.create(
        run=run,
        attempt=attempt,
        **values,
        created_at=at,
        scheduled_at=due,
        signal_id=signal_id,
        **gates.columns(),
    )
    run.current_step = definition.name
    run.updated_at = at
    if due <= at:
        notify(values["queue"])
    return step


def gates_of_attempt(run: WorkflowRun, workflow: type[Workflow], definition: StepDefinition, attempt: int) -> Gates:
    """The attempt's gates, with the gate rows the claim will lock created. A key method that
    fails limits the attempt under the step's own key rather than not at all."""
    if scheduled_plainly(definition, singleton=workflow.singleton, delay_worked_out=True):
        return NO_GATES  # no gate to pass (a wait is the caller's delay)
    instance = workflow(run=run, step_name=definition.name, attempt=attempt, outputs=lambda: outputs_of(run))
    try:
        gates = evaluation.gates_for(instance, definition)
    except Exception as exc:
        logger.error(
            "run=%s step=%s: its limit's key failed (%s: %s); limited under the step's own key",
            run.pk,
            definition.name,
            type(exc).__name__,
            exc,
            extra={"action": "limit_key_failed", "run_id": run.pk},
        )
        gates = evaluation.gates_for(instance, replace_keys(definition))
    ensure_gates(gates)
    return gates


def replace_keys(definition: StepDefinition) -> StepDefinition:
    return replace(
        definition,
        concurrency=replace(definition.concurrency, key=None) if definition.concurrency else None,
        rate=replace(definition.rate, key=None) if definition.rate else None,
    )


def ensure_gates(gates: Gates) -> None:
    """Create the gate rows an attempt needs (an existing row is left as it is: no lock taken)."""
    rows = [(gates.gate, gates.gate_max, 0.0)] if gates.gate else []
    if gates.rate_gate:
        rows.append((gates.rate_gate, gates.rate_limit, gates.rate_per))
    if not rows:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgflow_gate (name, size, per, holders, starts) "
            "SELECT name, size, per, '{}', '{}' FROM unnest(%s::text[], %s::int[], %s::float8[]) AS v(name, size, per) "
            "ON CONFLICT (name) DO NOTHING",
            [[r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]],
        )


def reschedule_same(run: WorkflowRun, step: Step, *, at: datetime, delay: float | None = None) -> Step | None:
    """A fresh attempt of the step ``step`` was an attempt of (a reattempt, a lost worker, a resume).

    Carries a consumed signal over, so a reattempt of a signal step does not wait again.
    """
    workflow = workflow_or_none(run)
    if workflow is None:
        return None
    definition = workflow.steps().get(step.step_name)
    if definition is None:
        return None
    return schedule_attempt(run, workflow, definition, at=at, delay=delay, signal_id=step.signal_id)


def advance(run: WorkflowRun, step_name: str, *, at: datetime, schedule: bool = True) -> None:
    """Move past ``step_name``: schedule the next step, or finish the run when none is left.

    ``schedule=False`` (a paused run) records the next step as current without an attempt;
    ``resume()`` schedules it.
    """
    workflow = run.workflow()
    nxt = next_step(run, workflow, step_name)
    if nxt is None:
        finish_run(run, at)
        return
    # The run is on the next step from here on, even if its wait fails below: a resume
    # must schedule that step, not run the completed one again.
    run.current_step = nxt.name
    run.updated_at = at
    run.save(update_fields=["current_step", "updated_at"])
    if schedule:
        schedule_attempt(run, workflow, nxt, at=at, delay=delay_of(workflow, run, nxt, at, lambda: outputs_of(run)))
        run.save(update_fields=["current_step", "updated_at"])


class WaitFailed(PgflowError):
    """A step's ``wait`` / ``wait_until`` method raised or returned something unusable."""

    def __init__(self, message: str, *, step_name: str) -> None:
        super().__init__(message)
        self.step_name = step_name


def delay_of(
    workflow: type[Workflow],
    run: WorkflowRun,
    definition: StepDefinition,
    at: datetime,
    outputs: Callable[[], dict[str, Any]],
) -> float | None:
    """Seconds until ``definition`` is due (its wait / wait_until), None for at once.

    A wait method that fails raises WaitFailed naming the step, so the run can pause with
    the reason instead of the failure escaping the transition.
    """
    if not definition.waits:
        return None
    instance = workflow(run=run, step_name=definition.name, attempt=1, outputs=outputs)
    try:
        return evaluation.delay_seconds(instance, definition, at)
    except Exception as exc:
        raise WaitFailed(
            f"the wait of step {definition.name!r} failed: {type(exc).__name__}: {exc}", step_name=definition.name
        ) from exc


def next_step(run: WorkflowRun, workflow: type[Workflow], step_name: str) -> StepDefinition | None:
    steps = workflow.steps()
    if definition_changed(run, workflow) and (steps.get(step_name) is not None or step_name in steps.removed):
        # (a step that vanished undeclared still pauses the run below, naming it)
        return next_by_history(run, workflow, step_name, at=now())
    if steps.get(step_name) is not None:
        return steps.next_after(step_name)
    if step_name in steps.removed:
        return after_removed(run, steps)
    raise StepNotFound(missing_step_message(run, step_name))


def definition_changed(run: WorkflowRun, workflow: type[Workflow]) -> bool:
    """Whether the class's step list (names, kinds, order) differs from the one the run began on."""
    return bool(run.definition_digest) and run.definition_digest != workflow.definition_digest()


def next_by_history(
    run: WorkflowRun, workflow: type[Workflow], current: str | None, *, at: datetime
) -> StepDefinition | None:
    """On a changed definition the run goes by its own history: the next step is the first
    of the current list it has not completed or skipped, so a reordered or inserted step is
    never passed over silently. Where that differs from the step the order alone gives,
    the audit trail says so."""
    steps = workflow.steps()
    done = set(
        Step.objects.filter(run=run, status__in=[StepStatus.COMPLETED, StepStatus.SKIPPED]).values_list(
            "step_name", flat=True
        )
    )
    if current is not None:
        done.add(current)
    nxt = next((definition for definition in steps if definition.name not in done), None)
    try:
        by_order = steps.next_after(current) if current is not None and current in steps else None
    except StepNotFound:
        by_order = None
    if current is None or (by_order.name if by_order else None) != (nxt.name if nxt else None):
        not_run = [definition.name for definition in steps if definition.name not in done]
        event(
            run,
            EventKind.DEFINITION_CHANGED,
            at=at,
            step_name=current,
            next_step=nxt.name if nxt else None,
            by_order=by_order.name if by_order else None,
            not_run=not_run,
            change=f"the steps of {run.workflow_class} changed since this run began "
            f"(digest {run.definition_digest[:12]} -> {workflow.definition_digest()[:12]}); "
            f"it goes on by its own history with {nxt.name if nxt else 'nothing left: it finishes'}",
        )
    return nxt


def after_removed(run: WorkflowRun, steps: Any) -> StepDefinition | None:
    """The step after the place a removed step held: after the last step this run closed
    that still exists, or the first step when none does."""
    names = Step.objects.filter(run=run).exclude(status__in=OPEN_STEP_VALUES).order_by("-created_at", "-id")
    for name in names.values_list("step_name", flat=True):
        if steps.get(name) is not None:
            return steps.next_after(name)
    return steps.first()


def missing_step_message(run: WorkflowRun, step_name: str) -> str:
    return (
        f"step {step_name!r} of run {run.pk} is not defined by {run.workflow_class} any more; "
        f"declare it in removed_steps to skip it, or restore it"
    )


def finish_run(run: WorkflowRun, at: datetime, *, reason: str | None = None, actor: Any = None) -> None:
    run.status = RunStatus.FINISHED
    run.finished_at = at
    run.updated_at = at
    run.current_step = None
    run.paused_reason = ""
    run.save(update_fields=["status", "finished_at", "updated_at", "current_step", "paused_reason"])
    details: dict[str, Any] = {"reason": reason} if reason else {}
    event(run, EventKind.FINISHED, at=at, actor=actor, **details)
    if run.parent_id is not None:
        from .children import child_ended  # cycle: children -> batches -> leases -> here

        child_ended(run, at=at)


def workflow_or_none(run: WorkflowRun) -> type[Workflow] | None:
    try:
        return run.workflow()
    except WorkflowNotFound:
        return None


def outputs_of(run: WorkflowRun) -> dict[str, Any]:
    """``{step_name: output}`` of the run's completed attempts, oldest first."""
    return outputs_of_runs([run.pk])[run.pk]


def outputs_of_runs(run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """``outputs_of`` for each of ``run_ids``, in one query (a run with none maps to ``{}``)."""
    outputs: dict[int, dict[str, Any]] = {run_id: {} for run_id in run_ids}
    rows = (
        Step.objects.live()
        .filter(run_id__in=run_ids, status=StepStatus.COMPLETED)
        .order_by("created_at", "id")
        .values_list("run_id", "step_name", "output")
    )
    for run_id, step_name, output in rows:
        outputs[run_id][step_name] = output
    return outputs
