"""``explain_run``: a few plain sentences about where a run stands and why. Pure: the facts
come in as plain values (see :func:`pgflow_dashboard.mcp.reads.explain_facts`), ``now`` too.

Every sentence states something pgflow holds (a status, a timestamp, a recorded error, a
live worker or its absence); nothing is guessed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pgflow.core.flow import ACTIONS, CANCEL, LOST, OUTCOME_WORDS, PAUSE, REATTEMPT
from pgflow.core.phases import PHASES
from pgflow.core.states import RunStatus, StepStatus

from ..timeline import children_note

# Step.outcome word -> the policy action that led to it
POLICY_OF_OUTCOME = {**{OUTCOME_WORDS[action]: action for action in ACTIONS}, LOST: "lease lost"}

MESSAGE_LIMIT = 200  # characters of an error message quoted in a sentence


def explain(facts: dict[str, Any], *, now: datetime) -> list[str]:
    status = facts["status"]
    sentences: list[str] = []
    error = facts.get("last_error")
    if status == RunStatus.FINISHED:
        sentences.append(_finished(facts))
    elif status == RunStatus.CANCELLED:
        reason = facts.get("end_reason")
        sentences.append(f"cancelled at {_at(facts['finished_at'], now)}" + (f": {reason}" if reason else ""))
        if error and error.get("outcome") == OUTCOME_WORDS[CANCEL]:
            sentences.append(_failure(error))
    elif status == RunStatus.PAUSED:
        since = _at(facts["paused_at"], now)
        if error and error.get("outcome") == OUTCOME_WORDS[PAUSE]:
            sentences.append(f"paused since {since}: {_failure(error)}")
        else:
            sentences.append(
                f"paused since {since}" + (f": {facts['paused_reason']}" if facts.get("paused_reason") else "")
            )
        sentences.append("resume_run schedules a fresh attempt of that step; skip_step moves past it")
    else:
        sentences.extend(_running(facts, now))
        if error and error.get("outcome") == OUTCOME_WORDS[REATTEMPT]:
            sentences.append(f"the last attempt {_failure(error)}")
    rerun_of = facts.get("rerun_of")
    if rerun_of:
        sentences.append(f"re-run of #{rerun_of['run_id']} from step {rerun_of['step_name']}")
    if facts.get("definition_changed"):
        sentences.append("its workflow's definition changed since the run started: it may stop on a step that is gone")
    return sentences


def _finished(facts: dict[str, Any]) -> str:
    total = (facts["finished_at"] - facts["created_at"]).total_seconds()
    phases = facts.get("phases") or {}
    sentence = f"finished in {span(total)}"
    spent = {name: phases.get(name) or 0.0 for name in PHASES}
    longest = max(spent, key=lambda name: spent[name])
    if spent[longest] > 0:
        sentence += f"; most time {longest} ({span(spent[longest])})"
    return sentence


def _failure(error: dict[str, Any]) -> str:
    message = (error.get("error_message") or "").strip().splitlines()
    text = message[0][:MESSAGE_LIMIT] if message else ""
    name = (error.get("error_class") or "an error").rsplit(".", 1)[-1]
    outcome = error.get("outcome") or ""
    policy = POLICY_OF_OUTCOME.get(outcome, outcome or "?")
    return (
        f"step {error['step_name']} (attempt {error['attempt']}) failed with {name}"
        + (f": {text}" if text else "")
        + f" (policy: {policy})"
    )


def _running(facts: dict[str, Any], now: datetime) -> list[str]:
    step = facts.get("open_step")
    if step is None:
        return ["running, with no open step (between two transitions)"]
    name = step["step_name"]
    if step["status"] == StepStatus.SCHEDULED:
        if step["scheduled_at"] > now:
            return [f"step {name} is due at {_at(step['scheduled_at'], now)} (a wait before it)"]
        if step.get("held"):
            waited = span((now - step["scheduled_at"]).total_seconds())
            return [f"step {name} throttled {waited}: held by {'; '.join(step['held_by'])}"]
        queue = step["queue"]
        queued = f"step {name} queued {span((now - step['scheduled_at']).total_seconds())}"
        live = facts.get("live_queues") or {}
        if queue not in live:
            return [f"{queued}: no live worker serves queue {queue!r}"]
        count = live[queue]
        return [
            f"{queued} on queue {queue!r}, which {count} live worker{'s' if count != 1 else ''} serve"
            f"{'' if count != 1 else 's'} (they may be busy)"
        ]
    if step["status"] == StepStatus.IN_PROGRESS:
        sentence = (
            f"step {name} running for {span((now - step['started_at']).total_seconds())} on worker {step['worker']}"
        )
        lease = step.get("lease_expires_at")
        if lease is not None and lease < now:
            sentence += f", whose lease ran out at {_at(lease, now)} (the sweep runs it again)"
        return [sentence]
    if step.get("children"):
        return [f"step {name} is {children_note(step['children'])}"]
    if step.get("batch"):
        batch = step["batch"]
        return [
            f"step {name} waits for its fan-out batch: {batch['succeeded']} of {batch['total']} succeeded, "
            f"{batch['failed']} failed"
        ]
    signal = step.get("wait_for")
    since = _at(step.get("waiting_since") or step["created_at"], now)
    sentence = f"waiting for signal {signal!r} since {since}" if signal else f"step {name} waiting since {since}"
    if step.get("deadline_at") is not None:
        sentence += f", times out at {_at(step['deadline_at'], now)} (then: {step.get('on_timeout') or 'pause'})"
    return [sentence]


def span(seconds: float) -> str:
    """A duration for a sentence: ``3.2 s``, ``14 min``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def _at(when: datetime, now: datetime) -> str:
    """A moment as read by someone at ``now``: ``10:02``, ``10:02 on Tuesday``, ``2025-03-01 10:02``."""
    when = when.astimezone(now.tzinfo)
    clock = f"{when:%H:%M}"
    if when.date() == now.date():
        return clock
    if abs((when.date() - now.date()).days) < 7:
        return f"{clock} on {when:%A}"
    return f"{when:%Y-%m-%d} {clock}"
