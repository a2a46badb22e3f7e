"""The audit trail's vocabulary: every kind of ``Event`` a run records, and which transition
writes it. Pure: no Django, no database.

The stored strings are the members' values; a new kind is one member here (saying which
transition writes it) plus its write in ``pgflow/store/`` and a migration that only alters
``Event.event``'s choices.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class EventKind(StrEnum):
    # store.starting.start_run: a new run (details: workflow, key)
    STARTED = "started"
    # store.transitions.apply, or the group commit (store.commit): a body returned
    STEP_COMPLETED = "step_completed"
    # store.transitions.apply: an attempt ended with an error (details: error_class, action)
    STEP_FAILED = "step_failed"
    # store.transitions.apply (skip_if, a removed step, skip(), a timeout's or batch's "skip")
    # and store.controls.skip_step (an operator)
    SKIPPED = "skipped"
    # store.transitions.apply: a policy or reattempt() scheduled a fresh attempt (details: wait)
    REATTEMPTED = "reattempted"
    # store.transitions.pause_run: a policy, pause(), a failing wait, a lost worker too often,
    # or an operator (details: reason)
    PAUSED = "paused"
    # store.controls.resume / skip_step: a paused run runs again
    RESUMED = "resumed"
    # store.transitions.cancel_run: cancel_if, cancel(), an on_timeout / on_batch_failure of
    # "cancel", or an operator
    CANCELLED = "cancelled"
    # store.scheduling.finish_run (and the group commit): the last step ended, or finish()
    FINISHED = "finished"
    # store.attempts.prepare: a claimed attempt of a run that is no longer running
    STEP_CANCELLED = "step_cancelled"
    # store.leases.hand_back: a worker shutting down gave its attempt back
    HANDED_BACK = "handed_back"
    # store.leases.recover_lost: the attempt's lease ran out (details: worker, lost_in_a_row)
    LEASE_LOST = "lease_lost"
    # store.leases.reconnected: the worker holding the attempt lost its database connection
    # (the database away, read-only, or a silent socket) and reconnected; the attempt is still
    # its own (details: worker, away_seconds)
    RECONNECTED = "reconnected"
    # store.scheduling.next_by_history and store.mailbox: the class's steps changed since the run began
    DEFINITION_CHANGED = "definition_changed"
    # store.mailbox.deliver: a signal arrived (details: name, payload_bytes)
    SIGNAL_RECEIVED = "signal_received"
    # store.mailbox.time_out: a signal wait passed its deadline (details: signal, action)
    TIMED_OUT = "timed_out"
    # store.batches.open_batch: a fan-out's batch opened (details: batch_id, size)
    FAN_OUT_OPENED = "fan_out_opened"
    # store.batches: a fan-out's batch finished or vanished (details: counts, failures)
    FAN_OUT_FINISHED = "fan_out_finished"
    # store.rerun.rerun_from, on the new run: it re-runs another from a step (details: original,
    # step_name, copied, definition_changed)
    RERUN_OF = "rerun_of"
    # store.rerun.rerun_from, on the original: a re-run of it started (details: rerun, step_name)
    RERUN_AS = "rerun_as"
    # store.commit (the group commit) and store.transitions.apply: a body's set_attributes()
    # merged into the run's attributes at the step's commit (details: attributes, the keys set)
    ATTRIBUTES_SET = "attributes_set"

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")


# The kinds that end a paused period on the timeline.
PAUSE_ENDS = frozenset({EventKind.RESUMED, EventKind.CANCELLED, EventKind.FINISHED})
# The kinds that end a run.
RUN_ENDS = frozenset({EventKind.CANCELLED, EventKind.FINISHED})

# Who an event or a change names (``Event.actor``, ``QueueState.changed_by``): the one format.
SYSTEM = "system"  # pgflow itself: the sweep, a policy, a worker
ACTOR_LIMIT = 200  # characters kept (the columns' max_length)


# What an operator typed on a confirmation page, after the actor it explains:
# "user:ada (reason: card declined twice)". Who acted is what comes before it.
REASON_MARK = " (reason: "


def with_reason(actor: Any, reason: str) -> str:
    """``actor`` named with the reason an operator gave for acting, cut to ACTOR_LIMIT."""
    return f"{actor_name(actor)}{REASON_MARK}{reason})"[:ACTOR_LIMIT]


def without_reason(actor: str) -> str:
    """Who an actor names, without the reason an operator gave (``with_reason``)."""
    return actor.partition(REASON_MARK)[0]


def actor_name(actor: Any) -> str:
    """``None`` -> ``"system"``; a user (anything with ``get_username()``) -> ``"user:<username>"``;
    anything else (``"agent:x for user:y"``, a schedule's name) its str(), cut to ACTOR_LIMIT."""
    if actor is None:
        return SYSTEM
    if callable(getattr(actor, "get_username", None)):
        return f"user:{actor.get_username()}"[:ACTOR_LIMIT]
    return str(actor)[:ACTOR_LIMIT]
