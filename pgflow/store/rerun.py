"""Re-running a run from one of its steps: a new run of the same class and subject that starts
at that step, with the outputs of the steps before it copied from the original.

Both runs are written in one transaction holding the original's lock (the new run's row is
new, so nobody else can see or lock it before the commit). The copied steps are attempts of
the new run with the outcome ``copied``: ``self.outputs`` and ``run.outputs`` read them like
any completed attempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import observability
from ..core.events import EventKind
from ..core.states import RERUNNABLE_RUN, RunStatus, StepStatus
from ..exceptions import InvalidTransition, StepNotFound
from ..models import Step, WorkflowRun
from .locking import event, locked, now, open_attempt
from .scheduling import definition_changed, schedule_attempt
from .starting import _checked_input, take_singleton
from .transitions import cancel_run, close_attempt

if TYPE_CHECKING:
    from ..workflow import Workflow

COPIED = "copied"  # the outcome of an attempt whose output a re-run copied from its original
RERUNNABLE = RERUNNABLE_RUN


def rerun_plan(original: WorkflowRun, step_name: str) -> dict[str, Any]:
    """What ``rerun_from(original, step_name)`` would do, read without a lock: the steps whose
    outputs it copies (``{name: output}``), those before ``step_name`` it has nothing to copy
    for, and whether the class's steps changed since the original started. Raises StepNotFound
    for a step the class does not define (naming those it has)."""
    workflow = original.workflow()
    names = list(workflow.steps().names())
    if step_name not in names:
        raise StepNotFound(
            f"{original.workflow_class} has no step {step_name!r}; its steps are {', '.join(names) or 'none'}"
        )
    before = names[: names.index(step_name)]
    copied = _latest_outputs(original, before)
    return {
        "step_name": step_name,
        "copied": copied,
        "not_copied": [name for name in before if name not in copied],
        "definition_changed": definition_changed(original, workflow),
    }


def rerun_from(run_id: int, step_name: str, *, input: Any = None, actor: Any = None) -> WorkflowRun:
    """Start the re-run (see ``WorkflowRun.rerun_from``); returns the new run."""
    payload = None if input is None else _checked_input(input)
    with locked(run_id) as original:
        at = now()
        if original.status not in RERUNNABLE:
            raise InvalidTransition(
                f"run {original.pk}: cannot re-run a {original.status} run (only a finished, cancelled or "
                f"paused one; pause or cancel it first)"
            )
        plan = rerun_plan(original, step_name)
        workflow = original.workflow()
        # The re-run takes over the original's idempotency key: the key names the piece of
        # work (an order), and whatever finds the run by it (a payment webhook's
        # ``runs().get(key=...)``, a repeated ``start(key=...)``) must find the run that now
        # does that work. The key is unique per class, so the original gives it up first.
        key = original.key
        if key is not None:
            original.key = None
            original.save(update_fields=["key"])
        rerun = WorkflowRun.objects.create(
            workflow_class=original.workflow_class,
            key=key,
            input=original.input if payload is None else payload,
            subject_type_id=original.subject_type_id,
            subject_id=original.subject_id,
            definition_digest=workflow.definition_digest(),
            created_at=at,
            updated_at=at,
            traceparent=observability.run_starting(original.workflow_class),
            rerun_of=original,
            tenant=original.tenant,  # the same tenant's work, whoever re-runs it
        )
        event(rerun, EventKind.STARTED, at=at, actor=actor, workflow=original.workflow_class, key=key)
        _copy(rerun, workflow, plan["copied"], at=at)
        event(
            rerun,
            EventKind.RERUN_OF,
            at=at,
            actor=actor,
            original=original.pk,
            step_name=step_name,
            copied=sorted(plan["copied"]),
            not_copied=plan["not_copied"],
            definition_changed=plan["definition_changed"],
            input_changed=payload is not None and payload != original.input,
        )
        handed: dict[str, Any] = {} if key is None else {"key": key}  # the idempotency key it handed over
        event(original, EventKind.RERUN_AS, at=at, actor=actor, rerun=rerun.pk, step_name=step_name, **handed)
        if original.status == RunStatus.PAUSED:
            step = open_attempt(original)
            if step is not None:
                close_attempt(step, status=StepStatus.CANCELLED, outcome="cancelled", at=at)
            cancel_run(original, at, actor=actor, step=step, reason=f"re-run as #{rerun.pk}")
        # The class's singleton key, as a start takes it (after a paused original is cancelled,
        # so it no longer holds the key): "skip" refuses the re-run while another run of the
        # key is open (SingletonConflict; this transaction, the original's changes included,
        # rolls back), "queue" gates its attempts behind that run.
        if workflow.singleton is not None:
            take_singleton(workflow, rerun)
        definition = workflow.steps().get(step_name)
        assert definition is not None  # rerun_plan checked it
        # Due at once: the original served the step's wait; the operator wants it run now.
        schedule_attempt(rerun, workflow, definition, at=at)
        rerun.save(update_fields=["current_step", "updated_at"])
    return rerun


def _latest_outputs(run: WorkflowRun, names: list[str]) -> dict[str, Any]:
    """``{name: output}`` of the latest completed attempt of each of ``names`` in ``run``."""
    rows = (
        Step.objects.filter(run=run, status=StepStatus.COMPLETED, step_name__in=names)
        .order_by("created_at", "id")
        .values_list("step_name", "output")
    )
    return dict(rows)  # later rows win: the latest attempt's output


def _copy(rerun: WorkflowRun, workflow: type[Workflow], copied: dict[str, Any], *, at: Any) -> None:
    Step.objects.bulk_create(
        Step(
            run=rerun,
            step_name=name,
            status=StepStatus.COMPLETED,
            outcome=COPIED,
            queue=workflow.queue_for(name),
            priority=workflow.priority_for(name),
            created_at=at,
            scheduled_at=at,
            started_at=at,
            finished_at=at,
            output=output,
        )
        for name, output in sorted(copied.items(), key=lambda item: workflow.steps().names().index(item[0]))
    )
