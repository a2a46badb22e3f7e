"""One sentence of why a run stands where it does, and what an operator does next: the run
page's headline, the first sentence of the MCP ``explain_run`` tool and the run list's reason
column all come from :func:`why`. Pure: the facts come in as plain values (see
:func:`pgflow_dashboard.runfacts.facts`), ``now`` too.

Every clause states something pgflow holds (a status, a timestamp, a recorded error, a live
worker or its absence); nothing is guessed.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pgflow.approvals import PREFIX as APPROVAL_PREFIX
from pgflow.core.flow import ACTIONS, CANCEL, LOST, OUTCOME_WORDS, PAUSE
from pgflow.core.phases import PHASES
from pgflow.core.states import RunStatus, StepStatus

from .timeformat import duration
from .timeline import children_note

# Step.outcome word -> the policy action that led to it
POLICY_OF_OUTCOME = {**{OUTCOME_WORDS[action]: action for action in ACTIONS}, LOST: "lease lost"}

MESSAGE_LIMIT = 200  # characters of an error message quoted in a sentence
FAN_OUT_FAILED = "FanOutFailed"

# "ValueError: vendor 13's inbox refuses mail", the last such line of a traceback.
_ERROR_LINE = re.compile(r"^(?P<cls>(?:[A-Za-z_]\w*\.)*[A-Z]\w*): ?(?P<msg>.*)$")


def why(facts: dict[str, Any], *, now: datetime) -> str:
    """The one sentence: why the run is where it is, and what next."""
    status = facts["status"]
    error = facts.get("last_error")
    if status == RunStatus.FINISHED:
        return _finished(facts)
    if status == RunStatus.CANCELLED:
        at = _at(facts["finished_at"], now)
        if error and error.get("outcome") == OUTCOME_WORDS[CANCEL]:
            return f"cancelled at {at} by its policy: {failure(error, facts.get('member_error'))}"
        reason = facts.get("end_reason")
        return f"cancelled at {at}" + (f": {reason}" if reason else "")
    if status == RunStatus.PAUSED:
        since = _at(facts["paused_at"], now)
        if error and error.get("outcome") == OUTCOME_WORDS[PAUSE]:
            return f"paused since {since}: {failure(error, facts.get('member_error'))}; resume after fixing the cause"
        reason = facts.get("paused_reason")
        return f"paused since {since}" + (f": {reason}" if reason else "") + "; resume to go on"
    return _running(facts, now)


def doing(facts: dict[str, Any], *, now: datetime) -> tuple[str, str]:
    """What the run is doing, in two or three words for the run list's badge: ``(kind,
    words)``, the kind naming its colour (``waiting``, ``scheduled``, ``throttled``,
    ``queued``, ``running``, ``paused``, ``finished``, ``cancelled``)."""
    status = facts["status"]
    if status == RunStatus.PAUSED:
        error = facts.get("last_error")
        cause = cause_class(error, facts.get("member_error")) if error else _reason_words(facts.get("paused_reason"))
        return "paused", f"paused: {cause}" if cause else "paused"
    if status != RunStatus.RUNNING:
        return str(status), str(status)
    step = facts.get("open_step")
    if step is None:
        return "running", "running"
    if step["status"] == StepStatus.SCHEDULED:
        if step["scheduled_at"] > now:
            return "scheduled", f"due in {duration(step['scheduled_at'] - now)}"
        if step.get("held"):
            return "throttled", f"throttled: {step['held_by'][0]}"
        if step["queue"] in (facts.get("paused_queues") or ()):
            return "paused", f"queue {step['queue']} paused"
        if step["queue"] not in (facts.get("live_queues") or {}):
            return "queued", f"no worker on {step['queue']}"
        return "queued", f"queued {duration(now - step['scheduled_at'])}"
    if step["status"] == StepStatus.IN_PROGRESS:
        return "running", f"running {step['step_name']}"
    if step.get("children"):
        return "waiting", "waiting for child runs"
    if step.get("batch"):
        return "waiting", "waiting for fan-out"
    if step.get("wait_for"):
        if step["wait_for"].startswith(APPROVAL_PREFIX):
            return "waiting", "waiting for approval"
        return "waiting", f"waiting for signal {step['wait_for']!r}"
    return "waiting", "waiting"


def _reason_words(reason: str | None) -> str:
    text = first_line(reason)
    return text if len(text) <= 40 else text[:39] + "…"


def failure(error: dict[str, Any], member: dict[str, Any] | None = None) -> str:
    """``step charge (attempt 2) failed with PaymentDeclined: card declined (policy: pause)``;
    for a failed fan-out, the failed member's own error instead of ``FanOutFailed``."""
    outcome = error.get("outcome") or ""
    policy = POLICY_OF_OUTCOME.get(outcome, outcome or "?")
    head = f"step {error['step_name']} (attempt {error['attempt']})"
    if member is not None and short_class(error.get("error_class")) == FAN_OUT_FAILED:
        name = cause_class(error, member) if member.get("error_class") else "an error"
        text = first_line(member.get("error_message"))
        return (
            f"{head} fan-out failed: {first_line(error.get('error_message'))}; the first, job {member['position']} "
            f"({member['func']}), failed with {name}" + (f": {text}" if text else "") + f" (policy: {policy})"
        )
    name = short_class(error.get("error_class")) or "an error"
    text = first_line(error.get("error_message"))
    return f"{head} failed with {name}" + (f": {text}" if text else "") + f" (policy: {policy})"


def cause_class(error: dict[str, Any], member: dict[str, Any] | None = None) -> str:
    """The error class that names a failure (short): a failed fan-out's first failed member's
    own class (``member``, :func:`pgflow_dashboard.runfacts.first_failed_members`) rather
    than ``FanOutFailed``, which says only that some member failed."""
    name = short_class(error.get("error_class"))
    if name == FAN_OUT_FAILED and member is not None and member.get("error_class"):
        return short_class(member["error_class"])
    return name


def member_error(text: str | None) -> tuple[str | None, str]:
    """A fan-out member's stored error (free text: a django-q2 result, a traceback, "child run
    #4 was cancelled") as (error class, message): the last ``Class: message`` line of a
    traceback, else (None, the first line)."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    for line in reversed(lines):
        # django-q2 writes "message : Traceback ..." on one line before the traceback
        found = _ERROR_LINE.match(line)
        if found:
            return found["cls"], found["msg"]
    if lines:
        found = re.search(r"(?:^|: )([A-Za-z_][\w.]*(?:Error|Exception)): (.*?)(?: : Traceback|$)", lines[0])
        if found:
            return found[1], found[2]
    return None, lines[0] if lines else ""


def reads_output(step_name: str, sources: dict[str, str]) -> list[str]:
    """The steps (of ``sources``: name -> body source) whose body reads ``outputs[step_name]``
    (or ``outputs.get(step_name)``): those a skipped ``step_name`` leaves without its output."""
    quoted = re.escape(step_name)
    pattern = re.compile(rf"""outputs\s*(?:\[\s*|\.get\(\s*)(?:"{quoted}"|'{quoted}')""")
    return [name for name, source in sources.items() if pattern.search(source)]


def short_class(path: str | None) -> str:
    return (path or "").rsplit(".", 1)[-1]


def first_line(message: str | None) -> str:
    lines = (message or "").strip().splitlines()
    return lines[0][:MESSAGE_LIMIT] if lines else ""


def _finished(facts: dict[str, Any]) -> str:
    total = (facts["finished_at"] - facts["created_at"]).total_seconds()
    phases = facts.get("phases") or {}
    sentence = f"finished in {span(total)}"
    spent = {name: phases.get(name) or 0.0 for name in PHASES}
    longest = max(spent, key=lambda name: spent[name])
    if spent[longest] > 0:
        sentence += f"; most time {longest} ({span(spent[longest])})"
    return sentence


def _running(facts: dict[str, Any], now: datetime) -> str:
    step = facts.get("open_step")
    if step is None:
        return "running, with no open step (between two transitions)"
    name = step["step_name"]
    if step["status"] == StepStatus.SCHEDULED:
        if step["scheduled_at"] > now:
            due = span((step["scheduled_at"] - now).total_seconds())
            return f"step {name} is due at {_at(step['scheduled_at'], now)} (in {due}): sleeping until then"
        if step.get("held"):
            waited = span((now - step["scheduled_at"]).total_seconds())
            return f"step {name} throttled {waited}: held by {'; '.join(step['held_by'])}; it runs when there is room"
        queue = step["queue"]
        queued = f"step {name} queued {span((now - step['scheduled_at']).total_seconds())}"
        if queue in (facts.get("paused_queues") or ()):
            return f"{queued}: queue {queue!r} is paused; resume the queue on the Queues page"
        live = facts.get("live_queues") or {}
        if queue not in live:
            return f"{queued}: no live worker serves queue {queue!r}; start `pgflow_worker --queues {queue}`"
        count = live[queue]
        return (
            f"{queued} on queue {queue!r}, which {count} live worker{'s' if count != 1 else ''} serve"
            f"{'' if count != 1 else 's'} (they may be busy)"
        )
    if step["status"] == StepStatus.IN_PROGRESS:
        sentence = (
            f"step {name} running for {span((now - step['started_at']).total_seconds())} on worker {step['worker']}"
        )
        lease = step.get("lease_expires_at")
        if lease is not None and lease < now:
            sentence += f", whose lease ran out at {_at(lease, now)} (the sweep runs it again)"
        return sentence
    if step.get("children"):
        return f"step {name} is {children_note(step['children'])}"
    if step.get("batch"):
        batch = step["batch"]
        return (
            f"step {name} waits for its fan-out batch: {batch['succeeded']} of {batch['total']} succeeded, "
            f"{batch['failed']} failed"
        )
    signal = step.get("wait_for")
    since = _at(step.get("waiting_since") or step["created_at"], now)
    approval = bool(signal and signal.startswith(APPROVAL_PREFIX))
    if approval:
        sentence = f"step {name} waiting for approval since {since}"
    else:
        sentence = f"waiting for signal {signal!r} since {since}" if signal else f"step {name} waiting since {since}"
    if step.get("deadline_at") is not None:
        sentence += f", times out at {_at(step['deadline_at'], now)} (then: {step.get('on_timeout') or 'pause'})"
    elif approval:
        sentence += ", with no deadline (an approver decides it in the inbox, /admin/pgflow/inbox/)"
    elif signal:
        sentence += ", with no deadline (send it to go on)"
    return sentence


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
