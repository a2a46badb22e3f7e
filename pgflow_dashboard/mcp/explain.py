"""``explain_run``: a few plain sentences about where a run stands and why. Pure: the facts
come in as plain values (see :func:`pgflow_dashboard.mcp.reads.explain_facts`), ``now`` too.

Every sentence states something pgflow holds (a status, a timestamp, a recorded error, a
live worker or its absence); nothing is guessed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pgflow.core.flow import OUTCOME_WORDS, REATTEMPT
from pgflow.core.states import RunStatus

from ..why import POLICY_OF_OUTCOME, failure, span, why

__all__ = ["POLICY_OF_OUTCOME", "explain", "span"]

ENDED = (RunStatus.FINISHED, RunStatus.CANCELLED)


def explain(facts: dict[str, Any], *, now: datetime) -> list[str]:
    """The run page's sentence (:func:`pgflow_dashboard.why.why`) first, then what an agent
    may add: the tools that act on a paused run, a reattempt's failure, the re-run's
    original, a changed definition."""
    status = facts["status"]
    sentences = [why(facts, now=now)]
    error = facts.get("last_error")
    if status == RunStatus.PAUSED:
        sentences.append("resume_run schedules a fresh attempt of that step; skip_step moves past it")
    elif status not in ENDED and error and error.get("outcome") == OUTCOME_WORDS[REATTEMPT]:
        sentences.append(f"the last attempt {failure(error)}")
    rerun_of = facts.get("rerun_of")
    if rerun_of:
        sentences.append(f"re-run of #{rerun_of['run_id']} from step {rerun_of['step_name']}")
    if facts.get("definition_changed"):
        sentences.append("its workflow's definition changed since the run started: it may stop on a step that is gone")
    return sentences
