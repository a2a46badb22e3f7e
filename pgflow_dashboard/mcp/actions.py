"""What the action tools do: the run's own controls, ``pgflow.signal`` and
``run.rerun_from``, the public API user code and the admin call, with the agent's actor. A dry run checks the same
conditions and says what would happen, changing nothing.

The dry run reads the run once, without its lock, so the real call may still refuse if
the run changed in between; that refusal is reported the same way.
"""

from __future__ import annotations

from typing import Any

from pgflow import records
from pgflow.core import jsonvalue
from pgflow.core.states import CONTROLS as RUN_CONTROLS
from pgflow.core.states import OPEN_RUN, RERUNNABLE_RUN, RunStatus, control_error
from pgflow.exceptions import PgflowError
from pgflow.models import WorkflowRun
from pgflow.signals import NAME_LIMIT, signal

from .reads import Refused, find_run

# tool name -> (run method, what it does, in words), from core.states.CONTROLS
CONTROLS: dict[str, tuple[str, str]] = {
    control.tool: (control.name, control.effect)
    for control in (RUN_CONTROLS[name] for name in ("pause", "resume", "cancel", "skip_step"))
}


def control(tool: str, run_id: int, *, actor: str, dry_run: bool, step: str | None = None) -> dict[str, Any]:
    """``step``: for skip_step, the step the agent means to skip (the dry run names it)."""
    method, effect = CONTROLS[tool]
    run = find_run(run_id)
    problem = control_error(method, run.status)
    if problem is not None:
        raise Refused(f"run {run.pk} is {run.status}: {problem}")
    if step is not None and run.current_step != step:
        raise Refused(f"run {run.pk}: its current step is {run.current_step!r}, not {step!r}; nothing was skipped")
    where = f" at step {run.current_step}" if run.current_step else ""
    if dry_run:
        return {
            "dry_run": True,
            "run_id": run.pk,
            "status": run.status,
            "would": f"{effect}: run {run.pk} ({run.workflow_name}, {run.status}{where})",
            "actor": actor,
            "changed": False,
        }
    try:
        if step is not None:
            run.skip_step(actor=actor, step=step)
        else:
            getattr(run, method)(actor=actor)
    except (PgflowError, WorkflowRun.DoesNotExist) as exc:
        raise Refused(f"run {run_id}: {exc}") from exc
    run.refresh_from_db()
    return {
        "dry_run": False,
        "run_id": run.pk,
        "status": run.status,
        "current_step": run.current_step,
        "done": f"{tool.replace('_', ' ')} applied by {actor}",
        "changed": True,
    }


def send_signal(run_id: int, name: str, payload: Any, *, actor: str, dry_run: bool) -> dict[str, Any]:
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_LIMIT or "\x00" in name:
        raise Refused(f"a signal name must be a non-empty string of at most {NAME_LIMIT} characters, got {name!r}")
    try:
        jsonvalue.encode(payload, "signal payload")
    except (TypeError, ValueError) as exc:
        raise Refused(str(exc)) from exc
    run = find_run(run_id)
    if run.status not in OPEN_RUN:
        raise Refused(f"run {run.pk} is {run.status}: it takes no more signals (only a running or paused run)")
    if dry_run:
        return {
            "dry_run": True,
            "run_id": run.pk,
            "status": run.status,
            "would": f"deliver signal {name!r} to run {run.pk}: {records.signal_effect(run, name)}",
            "actor": actor,
            "changed": False,
        }
    try:
        received = signal(run, name, payload, actor=actor)
    except (PgflowError, ValueError, TypeError, WorkflowRun.DoesNotExist) as exc:
        raise Refused(f"run {run_id}: {exc}") from exc
    run.refresh_from_db()
    return {
        "dry_run": False,
        "run_id": run.pk,
        "status": run.status,
        "signal_id": received.pk,
        "done": f"signal {name!r} delivered by {actor}",
        "changed": True,
    }


def rerun_from(run_id: int, step_name: str, input: Any, *, actor: str, dry_run: bool) -> dict[str, Any]:
    if not isinstance(step_name, str) or not step_name:
        raise Refused(f"step_name must be the name of one of the run's steps, got {step_name!r}")
    if input is not None and not isinstance(input, dict):
        raise Refused(f"input must be a JSON object, or null to keep the run's input; got {type(input).__name__}")
    run = find_run(run_id)
    if run.status not in RERUNNABLE_RUN:
        raise Refused(
            f"run {run.pk} is {run.status}: only a finished, cancelled or paused run can be re-run "
            f"(pause or cancel it first)"
        )
    try:
        plan = run.rerun_plan(step_name)
    except PgflowError as exc:
        raise Refused(f"run {run.pk}: {exc}") from exc
    copied = list(plan["copied"])
    if dry_run:
        if input is not None:
            try:
                jsonvalue.encode(input, "input")
            except (TypeError, ValueError) as exc:
                raise Refused(str(exc)) from exc
        return {
            "dry_run": True,
            "run_id": run.pk,
            "status": run.status,
            "would": _rerun_effect(run, step_name, copied, new_input=input is not None),
            "copied": plan["copied"],
            "not_copied": plan["not_copied"],
            "definition_changed": plan["definition_changed"],
            "input": run.input if input is None else input,
            "actor": actor,
            "changed": False,
        }
    try:
        rerun = run.rerun_from(step_name, input=input, actor=actor)
    except (PgflowError, ValueError, TypeError, WorkflowRun.DoesNotExist) as exc:
        raise Refused(f"run {run_id}: {exc}") from exc
    run.refresh_from_db()
    return {
        "dry_run": False,
        "run_id": run.pk,
        "status": run.status,
        "rerun_id": rerun.pk,
        "rerun_status": rerun.status,
        "current_step": rerun.current_step,
        "copied": copied,
        "done": f"run {run.pk} re-run from step {step_name} as run {rerun.pk} by {actor}",
        "changed": True,
    }


def _rerun_effect(run: WorkflowRun, step_name: str, copied: list[str], *, new_input: bool) -> str:
    outputs = f"copying the outputs of {', '.join(copied)}" if copied else "copying no outputs"
    given = "the input given" if new_input else "the run's own input"
    then = f"; run {run.pk} is paused, so it is cancelled as re-run" if run.status == RunStatus.PAUSED else ""
    return (
        f"start a new run of {run.workflow_name} from step {step_name}, {outputs}, with {given}, "
        f"linked to run {run.pk}{then}"
    )
