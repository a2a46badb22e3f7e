"""One claimed attempt, before and after its body: ``prepare`` (or the no-query ``quick_prepare``)
under the run lock, then ``finish`` with its outcome."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import evaluation
from ..conf import pgflow_settings
from ..core import errors as error_capture
from ..core.events import EventKind
from ..core.flow import CANCEL, PAUSE, SKIP, FlowControl, Outcome
from ..core.states import RunStatus, StepStatus
from ..db import atomic, on_commit
from ..exceptions import StepNotFound, WorkflowNotFound
from ..models import Signal, Step, WorkflowRun
from ..registry import resolve
from .claims import Claim
from .leases import held_attempt, log_ignored
from .locking import event, locked, now
from .mailbox import take_signal
from .rows import deferred
from .scheduling import missing_step_message, outputs_of
from .transitions import apply, close_attempt, park

if TYPE_CHECKING:
    from ..core.definitions import StepDefinition
    from ..workflow import Workflow

logger = logging.getLogger("pgflow")

# Called with (run_id, step_id) after the commit that parks an approval step for the first
# time (once per opened approval). A feature above the store registers here, from pgflow's
# AppConfig.ready (pgflow.approval_mail mails the approvers), so the store never imports it.
APPROVAL_OPENED: list[Callable[[int, int], None]] = []


def on_approval_opened(hook: Callable[[int, int], None]) -> None:
    """Run ``hook(run_id, step_id)`` after each commit that opens an approval (once per hook)."""
    if hook not in APPROVAL_OPENED:
        APPROVAL_OPENED.append(hook)


@dataclass(kw_only=True)
class Prepared:
    """A claimed attempt cleared to run its body."""

    claim: Claim
    run: WorkflowRun
    step: Step
    definition: StepDefinition
    workflow: Workflow
    signal: Signal | None = None

    @property
    def deadline(self) -> datetime | None:
        """When the body passes its ``timeout`` (None without one)."""
        if not self.definition.timeout:
            return None
        return self.claim.started_at + timedelta(seconds=self.definition.timeout)


def prepare(held: Claim, *, at: datetime | None = None) -> Prepared | None:
    """Before the body, under the run lock: is the attempt still ours and the run running,
    does a cancel_if or skip_if apply, is the step still defined, is its signal here.

    Returns None when the attempt ended here (skipped, cancelled, parked, or not ours).
    """
    at = at or now()
    with locked(held.run_id) as run:
        step = held_attempt(run, held)
        if step is None:
            log_ignored(held, "it is no longer in progress under this claim")
            return None
        if run.status != RunStatus.RUNNING:
            # Not reachable while pause/cancel close open attempts, but never run a stopped run's
            # body, and never close an attempt without saying so in the audit trail.
            close_attempt(step, status=StepStatus.CANCELLED, outcome="cancelled", at=at)
            event(run, EventKind.STEP_CANCELLED, step=step, at=at, reason=f"the run is {run.status}")
            return None
        try:
            workflow_class = run.workflow()
        except WorkflowNotFound as exc:
            _fail_and_pause(run, step, exc, at=at)
            return None
        steps = workflow_class.steps()
        definition = steps.get(step.step_name)
        if definition is None:
            if step.step_name in steps.removed:
                apply(run, step, Outcome(kind=SKIP), at=at, reason="removed from the workflow")
            else:
                _fail_and_pause(run, step, StepNotFound(missing_step_message(run, step.step_name)), at=at)
            return None
        workflow = workflow_class(
            run=run,
            step_name=step.step_name,
            attempt=step.attempt,
            outputs=held.outputs if held.outputs is not None else lambda: outputs_of(run),  # the claim's, if brought
        )
        try:
            if workflow_class.cancel_conditions() or definition.skip_if is not None:
                # In a savepoint: a condition's failed query would abort the transaction
                # that must record its failure.
                with atomic():
                    cancel = evaluation.should_cancel(workflow)
                    skip = not cancel and evaluation.should_skip(workflow, definition)
            else:
                cancel = skip = False
        except FlowControl as control:  # a verb called in a condition ends the step, as in a body
            apply(
                run,
                step,
                control.outcome,
                at=at,
                reason=f"a cancel_if / skip_if of step {step.step_name!r} called {control.outcome.kind}()",
            )
            return None
        except Exception as exc:  # noqa: BLE001 - a failing predicate pauses the run, naming it
            _fail_and_pause(
                run,
                step,
                exc,
                at=at,
                reason=f"a cancel_if / skip_if of step {step.step_name!r} failed: {type(exc).__name__}: {exc}",
            )
            return None
        if cancel:
            apply(run, step, Outcome(kind=CANCEL), at=at, reason="a cancel_if condition held")
            return None
        if skip:
            apply(run, step, Outcome(kind=SKIP), at=at, reason="skip_if")
            return None
        signal = None
        if definition.wait_for:
            signal = take_signal(run, step, definition, at=at)
            if signal is None:
                opens = step.waiting_since is None  # this attempt's first park, not a re-park
                park(run, step, at=at, deadline=definition.wait_timeout)
                if opens and definition.approval is not None:
                    for hook in APPROVAL_OPENED:  # after the commit: never under the run's lock
                        on_commit(functools.partial(hook, run.pk, step.pk), robust=True)
                return None
    return Prepared(claim=held, run=run, step=step, definition=definition, workflow=workflow, signal=signal)


def quick_prepare(held: Claim, *, outputs: Mapping[str, Any] | None = None) -> Prepared | None:
    """The prepare of a plain step, with no query: nothing needs the run lock before its
    body (no cancel_if, no skip_if, no signal, no batch) and the claim just read the run.

    Returns None when the attempt needs the full ``prepare``. An operator who pauses or
    cancels from here on is handled when the outcome is applied, as for any running body.
    ``outputs``: the run's, read already (an async body's, by the claim loop); otherwise
    ``self.outputs`` reads them when first used.
    """
    run = held.run()
    if run.status != RunStatus.RUNNING:
        return None
    try:
        workflow_class = resolve(run.workflow_class)
    except WorkflowNotFound:
        return None
    definition = workflow_class.steps().get(held.step_name)
    if definition is None or definition.locks_before_body or workflow_class.cancel_conditions():
        return None
    step = deferred(
        Step,
        {
            "id": held.step_id,
            "run_id": held.run_id,
            "step_name": held.step_name,
            "attempt": held.attempt,
            "status": StepStatus.IN_PROGRESS,
            "started_at": held.started_at,
            "claim_token": held.token,
        },
    )
    source = outputs if outputs is not None else lambda: outputs_of(run)
    workflow = workflow_class(run=run, step_name=held.step_name, attempt=held.attempt, outputs=source)
    return Prepared(claim=held, run=run, step=step, definition=definition, workflow=workflow)


def _fail_and_pause(run: WorkflowRun, step: Step, exc: BaseException, *, at: datetime, reason: str = "") -> None:
    captured = error_capture.capture(exc, **pgflow_settings.capture_options())
    apply(run, step, Outcome(kind=PAUSE), at=at, error=captured, reason=reason or str(exc))


def finish(
    held: Claim,
    outcome: Outcome,
    *,
    output: Any = None,
    error: dict[str, Any] | None = None,
    at: datetime | None = None,
    attributes: dict[str, Any] | None = None,
) -> bool:
    """After the body, under the run lock: apply ``outcome`` if the attempt is still ours
    (with what the body's ``set_attributes()`` set, merged into the run's).

    Returns False (and logs) for a late completion of an attempt that timed out, was taken
    over after its lease ran out, or was ended by an operator: it is never applied.
    """
    at = at or now()
    with locked(held.run_id) as run:
        step = held_attempt(run, held)
        if step is None:
            log_ignored(held, "it was ended elsewhere (timed out, lease taken over, or an operator acted)")
            return False
        apply(run, step, outcome, at=at, output=output, error=error, attributes=attributes)
    return True
