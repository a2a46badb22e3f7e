"""The failure decision: what an attempt's exception does to its run (the exception policy, with
its count of consecutive reattempts), and who hears of it. The runner and fan-out both end a
failed attempt through :func:`fail`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from . import store
from .conf import pgflow_settings
from .core import errors as error_capture
from .core.flow import OUTCOME_WORDS, REATTEMPT, Outcome
from .core.policy import resolve
from .models import Step, WorkflowRun
from .store import Prepared

logger = logging.getLogger("pgflow")


def fail(prepared: Prepared, error: BaseException, *, finish: Callable[[store.Finished], bool]) -> tuple[Outcome, bool]:
    """End a failed attempt: decide its outcome, record the captured error through ``finish``,
    then report. Returns ``(outcome, applied)``."""
    outcome, report = decide(prepared, error)
    captured = error_capture.capture(error, **pgflow_settings.capture_options())
    applied = finish(store.Finished(claim=prepared.claim, outcome=outcome, error=captured))
    if applied:
        for reported in report:  # after the commit: a slow reporter never holds the run lock
            report_error(reported, prepared, outcome)
    return outcome, applied


def decide(prepared: Prepared, error: BaseException) -> tuple[Outcome, list[BaseException]]:
    """Resolve the exception policy for ``error``: the outcome and the errors to report."""
    workflow_class = type(prepared.workflow)
    policy = resolve(error, step_policies=prepared.definition.on_exception, class_policies=workflow_class.policies())
    decision = policy.decide(
        error, workflow=prepared.workflow, consecutive_reattempts=lambda: consecutive_reattempts(prepared.step)
    )
    reported: list[BaseException] = []
    if decision.report:
        reported.append(error)
    if decision.handler_error is not None:
        reported.append(decision.handler_error)
    return decision.outcome, reported


def consecutive_reattempts(step: Step) -> int:
    """How many attempts of this step, just before this one, ended in a reattempt."""
    # Attempts of one step are inserted one after the other, so ids order them.
    outcomes = (
        Step.objects.filter(run_id=step.run_id, step_name=step.step_name, pk__lt=step.pk)
        .order_by("-id")
        .values_list("outcome", flat=True)
    )
    count = 0
    for outcome in outcomes:
        if outcome != OUTCOME_WORDS[REATTEMPT]:
            break
        count += 1
    return count


def report_error(
    error: BaseException,
    prepared: Prepared,
    outcome: Outcome,
    reporter: Callable[[BaseException, dict[str, Any]], Any] | None = None,
) -> None:
    """Hand an error to ERROR_REPORTER (or the ``pgflow`` logger); a reporter that raises is
    logged and never breaks the worker."""
    run: WorkflowRun = prepared.run
    context = {
        "run_id": run.pk,
        "workflow_class": run.workflow_class,
        "step": prepared.step.step_name,
        "attempt": prepared.step.attempt,
        "action": outcome.word,
    }
    try:
        reporter = reporter or pgflow_settings.error_reporter()
    except ImportError:
        logger.exception("ERROR_REPORTER %r does not import", pgflow_settings.ERROR_REPORTER)
        reporter = None
    if reporter is None:
        logger.error(
            "step %s of run %s failed (%s): %s: %s",
            context["step"],
            run.pk,
            outcome.word,
            type(error).__name__,
            error,
            exc_info=(type(error), error, error.__traceback__),
            extra={"action": "step_error", **context},
        )
        return
    try:
        reporter(error, context)
    except Exception:
        logger.exception(
            "ERROR_REPORTER raised while reporting an error of run %s", run.pk, extra={"action": "reporter_failed"}
        )
