"""The worker's group commit: the outcomes of many attempts in one transaction, the common case in
a handful of set-based statements."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import pq
from psycopg.types.json import Jsonb

from .. import db
from ..core.definitions import scheduled_plainly
from ..core.events import EventKind
from ..core.flow import COMPLETE, Outcome
from ..core.states import RunStatus
from ..exceptions import StepNotFound, WorkflowNotFound
from ..models import Step, WorkflowRun
from ..registry import resolve
from .claims import Claim
from .cursors import bigint_array, hot_cursor, text_array
from .leases import log_ignored
from .locking import CHANNEL, now
from .rows import attempt_values
from .scheduling import WaitFailed, delay_of, outputs_of
from .transitions import apply

if TYPE_CHECKING:
    pass

logger = logging.getLogger("pgflow")


@dataclass(frozen=True, kw_only=True)
class Finished:
    """One attempt's end, for ``finish_many``."""

    claim: Claim
    outcome: Outcome
    output: Any = None
    error: dict[str, Any] | None = None
    # The body's set_attributes(), checked there: merged into the run's with this outcome
    # (None or {}: none set).
    attributes: dict[str, Any] | None = None


def finish_many(items: list[Finished], *, at: datetime | None = None) -> list[bool | None]:
    """``finish`` for many attempts in one transaction (the worker's group commit).

    Locks the runs it can lock now (``SKIP LOCKED``: a run another transaction holds, say a
    webhook's ``signal()`` inside a long ``atomic()``, never holds up the others), checks
    every claim token, applies the common case (a body that returned, on a running run of an
    unchanged definition) with a handful of set-based statements, and everything else
    through ``apply`` one by one. Returns, per item, whether it was applied, or None when its
    run was locked elsewhere: the caller tries it again in a later transaction.

    One outcome per attempt: a second item for an attempt already applied in this batch
    (a completion and a timeout that crossed) is ignored.
    """
    at = at or now()
    on = db.wrapper()
    if on.get_autocommit() and not on.in_atomic_block:
        applied = _finish_in_two_trips(items, at)
        if applied is not None:
            return applied
    with db.atomic(), hot_cursor() as cursor:
        cursor.execute(_LOCK, _lock_params(items), prepare=True)
        runs, tokens = _locked(cursor.fetchall())
        sorted_ = _sort(items, runs, tokens, _busy(cursor, items, runs))
        for claim, reason in sorted_.ignored:
            log_ignored(claim, reason)
        if sorted_.plain:
            completion = _completion(sorted_.plain, at=at)
            if completion.closing:
                with cursor.connection.pipeline():
                    _send(cursor, completion)
            _apply_each(completion.fallback, at)
        _apply_each(sorted_.other, at)
    return sorted_.applied


def _finish_in_two_trips(items: list[Finished], at: datetime) -> list[bool | None] | None:
    """``finish_many`` in two round trips when every item is the common case: BEGIN with the
    locks, then the statements with COMMIT, each a pipeline. Django's ``atomic()`` took four:
    BEGIN alone (psycopg waits for it, even in a pipeline), the locks, the statements, COMMIT,
    each a wake-up of the committing thread (benchmarks/RESULTS.md, issue 35 part I). The
    transaction is the connection's own (Django's is in autocommit, outside any ``atomic()``);
    None, with it rolled back and nothing written, when an item needs ``apply`` (which
    ``finish_many`` then does in an ``atomic()``, from the start)."""
    with hot_cursor() as cursor:
        raw = cursor.connection
        try:
            with raw.pipeline():
                cursor.execute("BEGIN")
                cursor.execute(_LOCK, _lock_params(items), prepare=True)
            runs, tokens = _locked(cursor.fetchall())
            sorted_ = _sort(items, runs, tokens, _busy(cursor, items, runs))
            completion = _completion(sorted_.plain, at=at)
            if sorted_.other or completion.fallback:
                raw.rollback()
                return None
            with raw.pipeline():
                if completion.closing:
                    _send(cursor, completion)
                cursor.execute("COMMIT")
        except BaseException:
            _roll_back(raw)
            raise
    for claim, reason in sorted_.ignored:
        log_ignored(claim, reason)
    return sorted_.applied


def _roll_back(raw: Any) -> None:
    """End a failed transaction of ``_finish_in_two_trips`` (a broken connection has none left)."""
    try:
        if raw.info.transaction_status != pq.TransactionStatus.IDLE:
            raw.rollback()
    except psycopg.Error:
        pass


def _lock_params(items: list[Finished]) -> dict[str, str]:
    return {
        "runs": bigint_array(sorted({item.claim.run_id for item in items})),
        "steps": bigint_array(sorted({item.claim.step_id for item in items})),
    }


def _locked(rows: list[tuple[Any, ...]]) -> tuple[dict[int, tuple[str, str, str]], dict[int, Any]]:
    """_LOCK's rows: the locked runs' (status, class, digest), and their attempts' tokens."""
    runs, tokens = {}, {}
    for kind, row_id, status, workflow_class, digest, token in rows:
        if kind == "run":
            runs[row_id] = (status, workflow_class, digest)
        else:
            tokens[row_id] = token
    return runs, tokens


def _busy(cursor: Any, items: list[Finished], runs: dict[int, Any]) -> set[int]:
    """The batch's runs _LOCK skipped that still exist: locked by another transaction."""
    missing = sorted({item.claim.run_id for item in items} - runs.keys())
    if not missing:  # locked elsewhere, or deleted (retention): only the first come back later
        return set()
    cursor.execute("SELECT id FROM pgflow_run WHERE id = ANY(%s)", [missing], prepare=True)
    return {row[0] for row in cursor.fetchall()}


@dataclass
class _Sorted:
    """A batch sorted by what applying each item takes."""

    applied: list[bool | None]  # finish_many's answer
    plain: list[tuple[Finished, str]] = field(default_factory=list)  # with its run's class
    other: list[Finished] = field(default_factory=list)  # through apply
    ignored: list[tuple[Claim, str]] = field(default_factory=list)  # and why, to log


def _sort(items: list[Finished], runs: dict[int, Any], tokens: dict[int, Any], busy: set[int]) -> _Sorted:
    result = _Sorted(applied=[False] * len(items))
    for index, item in enumerate(items):
        run = runs.get(item.claim.run_id)
        if run is None and item.claim.run_id in busy:
            result.applied[index] = None  # locked by another transaction: not now
            continue
        if run is None:
            result.ignored.append((item.claim, "its run no longer exists"))
            continue
        if tokens.pop(item.claim.step_id, None) != item.claim.token:
            result.ignored.append(
                (
                    item.claim,
                    "it was ended elsewhere (timed out, lease taken over, an operator acted, "
                    "or another outcome of it was applied)",
                )
            )
            continue
        result.applied[index] = True
        if (
            item.outcome.kind == COMPLETE
            and item.error is None
            and run[0] == RunStatus.RUNNING
            and _digest(run[1]) == run[2]
        ):
            result.plain.append((item, run[1]))
        else:
            result.other.append(item)
    return result


def _apply_each(items: list[Finished], at: datetime) -> None:
    """The rare cases, one by one, with the full rules."""
    for item in items:
        apply(
            WorkflowRun.objects.get(pk=item.claim.run_id),
            Step.objects.live().get(pk=item.claim.step_id),
            item.outcome,
            at=at,
            output=item.output,
            error=item.error,
            attributes=item.attributes,
        )


# The batch's runs that can be locked now (SKIP LOCKED), then the open attempts of those runs
# among the batch's, locked too, for their claim tokens: one round trip. The runs are locked
# first (the steps' scan needs all of them), as every transition locks a run before its steps.
_LOCK = """
WITH runs AS (
    SELECT id, status, workflow_class, definition_digest FROM pgflow_run
    WHERE id = ANY(%(runs)s::bigint[]) ORDER BY id FOR UPDATE SKIP LOCKED
), steps AS (
    SELECT id, claim_token FROM pgflow_step_live
    WHERE id = ANY(%(steps)s::bigint[]) AND status = 'in_progress' AND run_id IN (SELECT id FROM runs)
    ORDER BY id FOR UPDATE
)
SELECT 'run', id, status, workflow_class, definition_digest, NULL::uuid FROM runs
UNION ALL
SELECT 'step', id, NULL, NULL, NULL, claim_token FROM steps
"""


def _digest(workflow_class: str) -> str | None:
    """The current definition digest of ``workflow_class``; None when it does not import."""
    try:
        return resolve(workflow_class).definition_digest()
    except WorkflowNotFound:
        return None


# A batch's rows travel as jsonb (one parameter each, dumped by the json module's C encoder):
# psycopg dumps a list parameter element by element in Python, which cost more than the
# statements themselves. The updated rows are found by primary key (an array), and their new
# values looked up by id in a JSON object: no join a planner could turn into a table scan.
_CLOSE_COMPLETED = """
UPDATE pgflow_step_live AS s
SET status = 'completed', outcome = 'completed', finished_at = GREATEST(%(at)s, s.started_at), claim_token = NULL,
    lease_expires_at = NULL, output = %(outputs)s -> s.id::text
WHERE s.id = ANY(%(ids)s::bigint[])
"""
# The rest of a batch's common case in one statement (one round trip): the next attempts,
# the events, the runs moved on, and a NOTIFY per queue with a step due now. The attempts
# closed by _CLOSE_COMPLETED must be closed by then: the one-open-attempt index is checked
# as each row is inserted.
_ADVANCE = """
WITH next_steps AS (
    INSERT INTO pgflow_step_live (run_id, step_name, attempt, status, outcome, queue, priority, created_at,
                                  scheduled_at, worker)
    SELECT v.run_id, v.step_name, 1, 'scheduled', '', v.queue, v.priority, %(at)s, v.due, ''
    FROM jsonb_to_recordset(%(steps)s) AS v(run_id bigint, step_name text, queue text, priority int,
                                                   due timestamptz)
    RETURNING 1
), events AS (
    INSERT INTO pgflow_event_live (run_id, step_id, event, actor, details, created_at)
    SELECT v.run_id, v.step_id, v.event, 'system', coalesce(v.details, '{}'::jsonb), %(at)s
    FROM jsonb_to_recordset(%(events)s) AS v(n int, run_id bigint, step_id bigint, event text, details jsonb)
    ORDER BY v.n
    RETURNING 1
), moved AS (
    UPDATE pgflow_run AS r
    SET status = %(moves)s -> r.id::text ->> 'status', current_step = %(moves)s -> r.id::text ->> 'current_step',
        finished_at = CASE WHEN %(moves)s -> r.id::text ->> 'status' = 'finished' THEN %(at)s END,
        updated_at = %(at)s, paused_reason = '',
        attributes = CASE WHEN %(attributes)s ? r.id::text THEN r.attributes || (%(attributes)s -> r.id::text)
                          ELSE r.attributes END
    WHERE r.id = ANY(%(run_ids)s::bigint[])
    RETURNING 1
)
SELECT (SELECT count(*) FROM next_steps), (SELECT count(*) FROM events), (SELECT count(*) FROM moved),
       (SELECT count(pg_notify(%(channel)s, queue)) FROM unnest(%(due_queues)s::text[]) AS queue)
"""


def _outputs_with(item: Finished) -> Callable[[], dict[str, Any]]:
    """A loader of the run's outputs plus ``item``'s own, not yet written."""
    return lambda: {**outputs_of(item.claim.run()), item.claim.step_name: item.output}


def _children_finishing(done: list[tuple[Finished, str]]) -> set[int]:
    """The child runs (``batch.add_run``) among ``done`` whose step was their class's last,
    from the run columns the claim read (a query only for claims made without them)."""
    last = [item.claim for item, path in done if _is_last(path, item.claim.step_name)]
    if all("parent_id" in claim.run_fields for claim in last):  # as claimed: no query
        return {claim.run_id for claim in last if claim.run_fields["parent_id"] is not None}
    runs = [claim.run_id for claim in last]
    return set(WorkflowRun.objects.filter(pk__in=runs, parent__isnull=False).values_list("pk", flat=True))


def _is_last(workflow_class: str, step_name: str) -> bool:
    try:
        names = resolve(workflow_class).steps().names()
    except WorkflowNotFound:
        return False
    return bool(names) and names[-1] == step_name


@dataclass
class _Completion:
    """Completed attempts closed and their runs moved on (``_send``: two statements for all
    of them), and the items that go through ``apply`` instead."""

    at: datetime
    closing: list[int] = field(default_factory=list)  # the attempts closed
    outputs: dict[str, Any] = field(default_factory=dict)  # by attempt id: what its body returned (None: no key)
    steps: list[dict[str, Any]] = field(default_factory=list)  # the next attempts
    events: list[dict[str, Any]] = field(default_factory=list)
    moves: dict[str, dict[str, Any]] = field(default_factory=dict)  # by run id: its new status and current step
    attributes: dict[str, Any] = field(default_factory=dict)  # by run id: what its body's set_attributes() set
    due_queues: set[str] = field(default_factory=set)
    fallback: list[Finished] = field(default_factory=list)


def _completion(done: list[tuple[Finished, str]], *, at: datetime) -> _Completion:
    """The same transitions ``apply`` makes for a COMPLETE outcome on a running run, for
    all of ``done`` at once; a run whose next step cannot be worked out (its class or step is
    gone) goes to ``fallback``: ``apply`` pauses it with the reason."""
    completion = _Completion(at=at)
    steps, events, moves = completion.steps, completion.events, completion.moves
    outputs, attributes, closing = completion.outputs, completion.attributes, completion.closing
    due_queues, fallback = completion.due_queues, completion.fallback
    # A child run that ends counts its member in its parent's batch: that goes through apply.
    children = _children_finishing(done)
    at_text = at.isoformat()
    for item, workflow_class in done:
        claim = item.claim
        try:
            workflow = resolve(workflow_class)
            definitions = workflow.steps()
            if definitions.get(claim.step_name) is None:
                raise StepNotFound(claim.step_name)
            nxt = definitions.next_after(claim.step_name)
            # This step's own output is not written yet: the loader adds it to what the rows hold.
            # (Building the run's model costs more than the rest of this loop: only for a wait.)
            delay = delay_of(workflow, claim.run(), nxt, at, _outputs_with(item)) if nxt and nxt.waits else None
        except (StepNotFound, WorkflowNotFound, WaitFailed):
            fallback.append(item)  # apply() pauses the run, naming the failure
            continue
        if nxt is None and claim.run_id in children:
            fallback.append(item)  # apply() finishes the child and counts its member
            continue
        if nxt is not None and not scheduled_plainly(nxt, singleton=workflow.singleton, delay_worked_out=True):
            fallback.append(item)  # its gates' keys are worked out by schedule_attempt
            continue
        closing.append(claim.step_id)
        if item.output is not None:
            outputs[str(claim.step_id)] = item.output
        if item.attributes:
            attributes[str(claim.run_id)] = item.attributes
            events.append(
                {
                    "n": len(events),
                    "run_id": claim.run_id,
                    "step_id": claim.step_id,
                    "event": EventKind.ATTRIBUTES_SET,
                    "details": {"attributes": item.attributes},
                }
            )
        events.append(
            {"n": len(events), "run_id": claim.run_id, "step_id": claim.step_id, "event": EventKind.STEP_COMPLETED}
        )
        if nxt is None:
            moves[str(claim.run_id)] = {"status": RunStatus.FINISHED, "current_step": None}
            events.append({"n": len(events), "run_id": claim.run_id, "step_id": None, "event": EventKind.FINISHED})
            continue
        attempt = attempt_values(workflow, nxt)
        due = at + timedelta(seconds=delay) if delay else at
        # Due now (most): the batch's one time, formatted once.
        steps.append({"run_id": claim.run_id, **attempt, "due": due.isoformat() if delay else at_text})
        if due <= at:
            due_queues.add(attempt["queue"])
        moves[str(claim.run_id)] = {"status": RunStatus.RUNNING, "current_step": nxt.name}
    return completion


def _send(cursor: Any, completion: _Completion) -> None:
    """``completion``'s two statements, in the caller's pipeline (one round trip): the server
    runs them in order."""
    at = completion.at
    cursor.execute(
        _CLOSE_COMPLETED,
        {"at": at, "ids": bigint_array(completion.closing), "outputs": Jsonb(completion.outputs)},
        prepare=True,
    )
    cursor.execute(
        _ADVANCE,
        {
            "at": at,
            "steps": Jsonb(completion.steps),
            "events": Jsonb(completion.events),
            "moves": Jsonb(completion.moves),
            "attributes": Jsonb(completion.attributes),
            "run_ids": bigint_array(map(int, completion.moves)),
            "channel": CHANNEL,
            "due_queues": text_array(sorted(completion.due_queues)),
        },
        prepare=True,
    )
