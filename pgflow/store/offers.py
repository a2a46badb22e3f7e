"""Idle workers' offers of a slot, and the starts that take them (``models.Offer``).

An idle worker's start latency had two trips through the database after the start's commit:
the notification to the worker, then the worker's claim by id (its round trip, its UPDATE and
commit), about a quarter of the whole (benchmarks/RESULTS.md, issue 35). With an offer it has
the first only:

- a worker whose claim found nothing else due offers one slot as it goes to sleep
  (``offer``), on the session that LISTENs, and reserves that slot: its claims take for the
  others while the offer stands;
- a plain autocommit start takes an offer in its own statement (``TAKE``, in
  ``starting``): its first attempt is inserted claimed by that worker, with a claim token
  of its own, as ``claim_notified`` would have claimed it, and its notification carries the
  claim (``Note.handed``);
- the worker runs the body from the notification (``handed_claim``), with no statement of
  its own; a claim too large for a notification (a big input) comes as its id and token,
  and the worker reads it (``fetch``);
- a worker that needs its reserved slot, or stops, withdraws its offer first
  (``withdraw``); a withdraw that finds the offer taken means an attempt is on its way.

What a start passes over: an offer on a queue its attempt is not on, on a paused queue, one
whose listening session has ended (a killed worker: its backend is gone), and one past
``until`` (an offer is renewed at every idle wake; a worker cut off from the network renews
none). An attempt handed to a worker that dies before it runs it is an attempt claimed by
a worker that died, and one whose notification is lost with the worker's session is one
whose claim's answer was lost: its lease runs out and the sweep schedules it again.
"""

from __future__ import annotations

import json
import logging
import uuid
import weakref
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..conf import pgflow_settings
from ..db import connection
from .claims import Claim, claims_of, outputs_params
from .cursors import hot_cursor
from .rows import CLAIMED, RUN_COLUMNS, STEP_COLUMNS

logger = logging.getLogger("pgflow")

# A session that makes offers holds this advisory lock (two-int form: pgflow's class, the
# session's backend pid) until it ends, so a start tells an offer whose session has ended (a
# killed worker's) by probing the lock: a look into the lock table, where
# pg_stat_get_activity copied every backend's status on each start's statement. (A session's
# own locks never conflict with its probe: its own offer is alive by definition.)
SESSION_MARK = 1885824631  # "pgfw"
MARK_SQL = f"SELECT pg_try_advisory_lock({SESSION_MARK}, pg_backend_pid())"

# The part of the plain start's statement that takes an offer (its first CTE, ``taken``):
# parameters, in order: whether this start may take one, the attempt's queue, the start's
# time (an offer must stand past it), the queue again (not paused), then the start's time
# twice: the claim's started_at, and where its lease (the offering worker's) begins. Its
# attempt's status, worker, claim_token, started_at and lease_expires_at read ``taken``: a
# claimed attempt when it has a row, a scheduled one when not.
TAKE = f"""taken AS (
    DELETE FROM pgflow_offer WHERE worker = (
        SELECT o.worker FROM pgflow_offer AS o
        WHERE %s AND %s = ANY(o.queues) AND o.until > %s
            AND NOT EXISTS (SELECT 1 FROM pgflow_queue_state AS p WHERE p.queue = %s AND p.paused)
            AND (o.backend_pid = pg_backend_pid()
                OR NOT pg_try_advisory_xact_lock_shared({SESSION_MARK}, o.backend_pid))
        LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING worker, backend_pid, gen_random_uuid() AS token, %s::timestamptz AS started_at,
        %s::timestamptz + lease AS lease_until
)"""
# The values of the attempt's columns that ``taken`` decides.
TAKEN_VALUES = {
    "status": "coalesce((SELECT 'in_progress' FROM taken), 'scheduled')",
    "worker": "coalesce((SELECT worker FROM taken), '')",
    "claim_token": "(SELECT token FROM taken)",
    "started_at": "(SELECT started_at FROM taken)",
    "lease_expires_at": "(SELECT lease_until FROM taken)",
}
# What the start's notification adds for a taken offer, after the queue and the attempt's id:
# the claim as JSON (the run's RUN_COLUMNS of ``new_run``, the attempt's of ``new_step``),
# or only its worker and token when that would not fit a notification (8,000 bytes).
FITS = 7000
RUN_RETURNING = "id, " + ", ".join(RUN_COLUMNS)
STEP_RETURNING = "id, run_id, step_name, attempt, claim_token, started_at, " + ", ".join(STEP_COLUMNS)
HANDED = (
    f"(SELECT CASE WHEN octet_length(h.whole::text) <= {FITS} THEN h.whole::text ELSE h.bare::text END"
    " FROM (SELECT json_build_object('worker', t.worker, 'session', t.backend_pid, 'token', t.token) AS bare,"
    " json_build_object('worker', t.worker, 'session', t.backend_pid, 'token', t.token,"
    " 'run_id', s.run_id, 'step_name', s.step_name, 'attempt', s.attempt, 'started_at', s.started_at,"
    " 'run', json_build_object("
    + ", ".join(f"'{column}', r.{column}" for column in RUN_COLUMNS)
    + "), 'step', json_build_object("
    + ", ".join(f"'{column}', s.{column}" for column in STEP_COLUMNS)
    + ")) AS whole FROM taken AS t, new_step AS s, new_run AS r) AS h)"
)
# A start hands its attempt only when its claim fits its notification: its input and
# attributes at most this many bytes as compact JSON (PostgreSQL's text of them is at most
# 1.5 times that, the run's other columns about 1 kB). A larger one is claimed as before.
HANDED_INPUT = 3000


def fits(input: Any, attributes: Any) -> bool:
    """Whether a start with ``input`` and ``attributes`` may hand its attempt over."""
    return len(json.dumps(input)) + len(json.dumps(attributes or {})) <= HANDED_INPUT


_RUN_TIMES = ("created_at", "updated_at", "finished_at")
_STEP_TIMES = ("created_at", "scheduled_at", "waiting_since", "throttled_until")


@dataclass(frozen=True)
class Handed:
    """An attempt a start handed to ``worker``'s offer made on ``session`` (its backend pid:
    two workers started with one ``--name`` are told apart), from its notification's part
    after the id: ``claim`` when the notification carried it, None when the worker must
    ``fetch`` it."""

    worker: str
    session: int
    step_id: int
    token: uuid.UUID
    claim: Claim | None


def read_handed(step_id: int, text: str) -> Handed | None:
    """The hand-off in a notification's JSON part, or None for text that is not one."""
    try:
        data = json.loads(text)
        worker, session, token = data["worker"], data["session"], uuid.UUID(data["token"])
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(worker, str) or not isinstance(session, int):
        return None
    claim = None
    if "run" in data:
        run, step = dict(data["run"]), dict(data["step"])
        for fields, times in ((run, _RUN_TIMES), (step, _STEP_TIMES)):
            for column in times:
                if fields[column] is not None:
                    fields[column] = datetime.fromisoformat(fields[column])
        claim = Claim(
            step_id=step_id,
            run_id=data["run_id"],
            step_name=data["step_name"],
            attempt=data["attempt"],
            token=token,
            started_at=datetime.fromisoformat(data["started_at"]),
            run_fields=run,
            step_fields=step,
            # A new run has no outputs yet: a body reading self.outputs needs no query.
            outputs={} if run["rerun_of_id"] is None else None,
        )
    return Handed(worker=worker, session=session, step_id=step_id, token=token, claim=claim)


# The worker's own statements, on its claiming session (whose commits do not wait for the
# WAL flush: an unlogged table's rows have none to wait for anyway).
OFFER_SQL = """
INSERT INTO pgflow_offer (worker, queues, backend_pid, until, lease)
VALUES (%(worker)s, %(queues)s::text[], pg_backend_pid(), %(until)s, %(lease)s)
ON CONFLICT (worker) DO UPDATE SET queues = excluded.queues, backend_pid = excluded.backend_pid,
    until = excluded.until, lease = excluded.lease
"""
# A renewal finds no row when a start took the offer (or its session's row was replaced).
RENEW_SQL = (
    "UPDATE pgflow_offer SET until = %(until)s WHERE worker = %(worker)s AND backend_pid = pg_backend_pid() RETURNING 1"
)
WITHDRAW_SQL = "DELETE FROM pgflow_offer WHERE worker = %(worker)s AND backend_pid = pg_backend_pid() RETURNING 1"
# After the session that made an offer ended: the offer withdrawn if it still stands (no
# start takes it any more), and, if it was taken, the attempts handed to it meanwhile (first
# attempts claimed at their start, since the offer was made, that the worker does not hold),
# whose notifications went with the session. The statement's snapshot predates a start that
# took the offer and commits while the DELETE waits for it: that one's notification reaches
# the worker's new session.
SETTLE_SQL = (
    "WITH kept AS (DELETE FROM pgflow_offer WHERE worker = %(worker)s AND backend_pid = %(session)s RETURNING 1) "
    "SELECT " + CLAIMED + " FROM pgflow_step_live AS s JOIN pgflow_run AS r ON r.id = s.run_id"
    " WHERE NOT EXISTS (SELECT 1 FROM kept) AND s.worker = %(worker)s AND s.status = 'in_progress'"
    " AND s.attempt = 1 AND s.started_at = s.created_at AND s.started_at >= %(since)s"
    " AND s.id <> ALL(%(held)s::bigint[])"
)
# A handed attempt still ours: in progress with the token it was handed with.
FETCH_SQL = (
    "SELECT " + CLAIMED + " FROM pgflow_step_live AS s JOIN pgflow_run AS r ON r.id = s.run_id"
    " WHERE s.id = %(id)s AND s.claim_token = %(token)s AND s.status = 'in_progress'"
)


def session() -> int:
    """The backend pid of this thread's session (libpq knows it: no query), which an offer
    made on it names."""
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    return int(raw.info.backend_pid)


def offer(*, worker: str, queues: list[str], until: datetime) -> bool:
    """``worker`` offers one slot on ``queues`` until ``until``, on this thread's session
    (the one that LISTENs: a start hands its attempt to the session that made the offer).
    False: none was made, the session could not take its mark (``SESSION_MARK``) yet: a
    start held it a moment, probing an ended session's offer that had the same pid."""
    connection.ensure_connection()
    raw = connection.connection
    with hot_cursor() as cursor:
        if raw not in _marked:  # once a session: a session's advisory lock counts each taking
            cursor.execute(MARK_SQL)
            row = cursor.fetchone()
            if row is None or not row[0]:
                return False
            _marked.add(raw)
        lease = timedelta(seconds=pgflow_settings.seconds("LEASE"))
        cursor.execute(OFFER_SQL, {"worker": worker, "queues": queues, "until": until, "lease": lease}, prepare=True)
    return True


_marked: weakref.WeakSet[Any] = weakref.WeakSet()  # the connections whose session holds its mark
UNMARK_SQL = f"SELECT pg_advisory_unlock({SESSION_MARK}, pg_backend_pid())"


def unmark(raw: Any) -> None:
    """The session of ``raw`` (a psycopg connection) offers no more: its mark is let go, so a
    worker run inside another process (a test, an embedding) leaves the connection as it
    found it. A start then counts an offer that still names the session as ended."""
    if raw in _marked:
        _marked.discard(raw)
        raw.execute(UNMARK_SQL)


def renew(*, worker: str, until: datetime) -> bool:
    """``worker``'s standing offer now stands until ``until``. False: a start took it."""
    with hot_cursor() as cursor:
        cursor.execute(RENEW_SQL, {"worker": worker, "until": until}, prepare=True)
        return cursor.fetchone() is not None


def withdraw(*, worker: str) -> bool:
    """Take back the offer ``worker`` made on this session. False: a start took it (or none
    stood): an attempt handed to it is on its way in a notification, or was already."""
    with hot_cursor() as cursor:
        cursor.execute(WITHDRAW_SQL, {"worker": worker}, prepare=True)
        return cursor.fetchone() is not None


def fetch(handed: Handed, *, readers: frozenset[str]) -> Claim | None:
    """The claim of an attempt handed without it (too large for its notification, which
    ``fits`` keeps starts from handing); None if it is no longer ours (its lease ran out)."""
    params = {"id": handed.step_id, "token": handed.token, **outputs_params(readers)}
    with hot_cursor() as cursor:
        cursor.execute(FETCH_SQL, params)
        rows = cursor.fetchall()
    found = next(iter(claims_of(rows)), None)
    if found is None:
        logger.warning(
            "attempt %s handed to worker %s is no longer in progress under its token",
            handed.step_id,
            handed.worker,
            extra={"action": "hand_off_gone"},
        )
    return found


def settle(*, worker: str, session: int, since: datetime, held: list[int], readers: frozenset[str]) -> list[Claim]:
    """After the session ``session`` that made ``worker``'s offer (at ``since``) ended: the
    offer withdrawn if it still stands, else the attempts handed to it that the worker does
    not hold (``held``: step ids), to run. A twin started with the same ``--name`` may have
    had its own handed since: their bodies then run twice, their transitions once (the token)."""
    params: dict[str, Any] = {"worker": worker, "session": session, "since": since, "held": held}
    with hot_cursor() as cursor:
        cursor.execute(SETTLE_SQL, {**params, **outputs_params(readers)})
        return claims_of(cursor.fetchall())
