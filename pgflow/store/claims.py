"""Taking attempts: the claim statements (``claim``, ``claim_notified``, ``claim_step``,
which enforce the gates of ``pgflow.Limit``, ``Rate`` and ``Singleton``), what a claim
returns (``Claim``, ``Claimed``, ``Kinds``) and ``next_due``. Holding and losing a claimed
attempt (heartbeat, hand back, the fencing check, a lost lease or connection) is in
``leases``; ``prepare`` and ``finish`` are in ``attempts``; the rows a claim returns are
built in ``rows``.

One concept over ~450 lines: most of it is the claim's SQL and the comments saying why it
is written so (each figure in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import json
import uuid
import weakref
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.contrib.contenttypes.models import ContentType

from .. import db
from ..conf import pgflow_settings
from ..core.limits import RATE_GATE, SINGLETON_GATE, gate_prefix
from ..db import connection
from ..exceptions import WorkflowNotFound
from ..models import WorkflowRun
from ..registry import resolve
from .cursors import compact, hot_cursor, text_array
from .locking import now
from .rows import CLAIMED, CLAIMED_STEP, OUTPUTS_CAP, RUN_COLUMNS, STEP_COLUMNS, deferred

# A gate of each kind, on a row ``k`` of pgflow_gate (the kinds: pgflow.core.limits).
_K_SINGLETON = f"k.name LIKE '{gate_prefix(SINGLETON_GATE)}%%'"
_K_RATE = f"k.name LIKE '{gate_prefix(RATE_GATE)}%%'"
_RETURNING = "RETURNING " + CLAIMED

# A gate's place in words of SQL, on a row ``k`` of pgflow_gate: the holders that may still
# hold a place (an attempt not yet ended, a singleton's run still open; a row this statement
# cannot see was claimed after its snapshot, so it holds too), a rate's starts inside the
# window, when the last place came free, and how many places are free now.
_GATE_ROOM = f"""
    LATERAL (
        SELECT coalesce(array_agg(h.id) FILTER (WHERE h.held), '{{}}') AS holders,
               max(h.ended) FILTER (WHERE NOT h.held) AS freed_at
        FROM (SELECT u.id,
                     CASE WHEN {_K_SINGLETON} THEN coalesce(r.status IN ('running', 'paused'), true)
                          ELSE coalesce(s.status IN ('scheduled', 'in_progress'), true) END AS held,
                     CASE WHEN {_K_SINGLETON} THEN r.finished_at ELSE s.finished_at END AS ended
              FROM unnest(k.holders) AS u(id)
              LEFT JOIN pgflow_step_live AS s ON s.id = u.id AND NOT {_K_SINGLETON}
              LEFT JOIN pgflow_run AS r ON r.id = u.id AND {_K_SINGLETON}) AS h
    ) AS kept,
    LATERAL (
        SELECT coalesce(array_agg(t) FILTER (WHERE t > %(now)s::timestamptz - make_interval(secs => k.per)), '{{}}')
                   AS starts,
               max(t) FILTER (WHERE t <= %(now)s::timestamptz - make_interval(secs => k.per))
                   + make_interval(secs => k.per) AS freed_at
        FROM unnest(k.starts) AS t
    ) AS recent
"""
_ROOM = f"k.size - CASE WHEN {_K_RATE} THEN cardinality(recent.starts) ELSE cardinality(kept.holders) END"

# Whether the attempt ``{a}`` (a row of pgflow_step) is an async body's, by its class and step
# name (``%(async_keys)s``, "path:step"; the name alone first, so a worker with no async step
# never reads the run), and whether its kind has a free slot: a worker claims only for free
# slots of the right kind (``%(threads)s``, ``%(awaiting)s``), so neither bound is passed.
_IS_ASYNC = (
    "({a}.step_name = ANY(%(async_names)s::text[]) AND (SELECT k_r.workflow_class FROM pgflow_run AS k_r "
    "WHERE k_r.id = {a}.run_id) || ':' || {a}.step_name = ANY(%(async_keys)s::text[]))"
)
_KIND_FREE = "(CASE WHEN " + _IS_ASYNC + " THEN %(awaiting)s > 0 ELSE %(threads)s > 0 END)"

# Both claims' first parts: the queues not paused, and each one's due ungated attempts (see
# CLAIM_SQL's comment below); ``{also}`` is a further condition on those attempts.
_OPEN_QUEUES = """open_queues AS (
    SELECT q.name FROM unnest(%(queues)s::text[]) AS q(name)
    WHERE NOT EXISTS (SELECT 1 FROM pgflow_queue_state AS p WHERE p.queue = q.name AND p.paused)
)"""
_CANDIDATES = (
    """candidates AS (
    SELECT c.id, c.priority, c.scheduled_at, c.is_async
    FROM open_queues AS q,
    LATERAL (
        SELECT x.id, x.priority, x.scheduled_at, """
    + _IS_ASYNC.format(a="x")
    + """ AS is_async FROM pgflow_step_live AS x
        WHERE x.status = 'scheduled' AND NOT x.gated AND x.queue = q.name AND x.scheduled_at <= %(now)s {also}
            AND """
    + _KIND_FREE.format(a="x")
    + """
        ORDER BY x.priority DESC, x.scheduled_at, x.id
        LIMIT (SELECT least(count(*) FILTER (WHERE NOT due_now.is_async), %(threads)s)
                    + least(count(*) FILTER (WHERE due_now.is_async), %(awaiting)s) FROM (
            SELECT """
    + _IS_ASYNC.format(a="y")
    + """ AS is_async FROM pgflow_step_live AS y WHERE y.status = 'scheduled' AND y.queue = q.name
                AND timezone('UTC', y.scheduled_at) <= timezone('UTC', %(now)s::timestamptz) AND """
    + _KIND_FREE.format(a="y")
    + """
            ORDER BY timezone('UTC', y.scheduled_at) LIMIT %(limit)s) AS due_now)
        FOR UPDATE OF x SKIP LOCKED
    ) AS c
)"""
)
# Each kind's attempts of ``{rows}`` up to its free slots, first in the claim's ``{order}`` (a
# kind's cut is unlocked when the statement ends).
_WITHIN_KINDS = """(SELECT w.*, row_number() OVER (
            PARTITION BY w.is_async ORDER BY {order})
        <= CASE WHEN w.is_async THEN %(awaiting)s ELSE %(threads)s END AS fits FROM {rows} AS w) AS kinds"""

# The claim, one statement. Paused queues are left out first.
#
# Ungated attempts (no limit): each queue's due attempts in its own ordered scan of the claim
# index (LATERAL), merged and cut to the limit. With ``queue = ANY(...)`` the claim index
# cannot give the order across queues, so PostgreSQL would read and sort every due row of the
# queues, and a claim behind a backlog would cost what the backlog's size does. Each scan
# stops at the number due (counted, up to the limit, on pgflow_step_due): past the due rows of
# a priority lie its delayed ones, and a scan asked for more than are due walks them all.
# That count is each kind's, up to its free slots: a scan stopped at the total locked the
# sync attempts an async slot's share would have taken (a worker with one thread free and
# 100 async slots locked 101 attempts to claim one, a WAL record each, pg_waldump showed).
# SKIP LOCKED sits in the per-queue scans; a candidate cut by the merge is unlocked when the
# claim's transaction (this statement) ends. The runs are joined to the claimed rows only: joined inside the UPDATE, a
# planner working from stale statistics (a table just truncated or filled) drove the claim
# from every run instead.
#
# Gated attempts (pgflow.Limit, Rate, Singleton): a loose scan of pgflow_step_gated walks the
# groups (queue, gate, rate_gate) with scheduled attempts, one probe each, from where this
# process's last claim of the queue stopped (its cursor, ``after_gate`` / ``after_rate``),
# round the end back to the start, and stops after ``visits`` groups (gate_visits: a few more
# than the claim's limit) or a whole lap. So a claim visits, locks and reads a bounded number
# of gates however many keys have work due: walking every group and locking every gate row
# with room made a claim's cost grow with the keys due (benchmarks/gated_claim.py), and the
# next claim carries on with the groups after, so every key gets its turn. The visited gate
# rows with room in this statement's snapshot are locked FOR UPDATE SKIP LOCKED, which reads
# their latest version: their room is worked out again from it, so two claims never both
# fill a gate's last place (a gate another claim holds is skipped this round, never waited
# for). Each group then gives at most its room of due attempts, in its own index order; a gate
# shared by several groups is cut to its room by rank. A singleton's open run passes its own
# gate without taking a place, so that needs no lock (a run leaves the holders only once it
# ended, when it has no attempt left). The merge takes every group's first attempt before any
# group's second, least recently served gate first (round-robin across keys), and the gates
# record what passed. An attempt let through a place that came free at ``freed_at`` (an
# attempt's finish, a rate's window end, stamped by another process's clock) starts no
# earlier: its own times then show it never overlapped what it replaced. It was throttled
# from its due time until then. The first row also gives where each queue's walk stopped.
_GATED_QUEUES = """open_queues AS (
    SELECT q.name, q.after_gate, q.after_rate
    FROM unnest(%(queues)s::text[], %(after_gates)s::text[], %(after_rates)s::text[]) AS q(name, after_gate, after_rate)
    WHERE NOT EXISTS (SELECT 1 FROM pgflow_queue_state AS p WHERE p.queue = q.name AND p.paused)
)"""
# The group after (gate, rate_gate) ``{after}`` in queue ``{queue}``, else (once a walk, not
# wrapped yet: ``{wrap}``) the queue's first group, flagged ``wrapped``.
_NEXT_GROUP = """LATERAL (SELECT * FROM (
        (SELECT queue, gate, rate_gate, {wrapped} AS wrapped FROM pgflow_step_live
         WHERE status = 'scheduled' AND gated AND queue = {queue} AND (gate, rate_gate) > {after}
         ORDER BY gate, rate_gate LIMIT 1)
        UNION ALL
        (SELECT queue, gate, rate_gate, true FROM pgflow_step_live
         WHERE {wrap} AND status = 'scheduled' AND gated AND queue = {queue}
         ORDER BY gate, rate_gate LIMIT 1)
    ) AS found LIMIT 1)"""
CLAIM_SQL = (
    """
WITH RECURSIVE """
    + _GATED_QUEUES
    + ", "
    + _CANDIDATES.format(also="")
    + """, groups(queue, gate, rate_gate, after_gate, after_rate, visit, wrapped) AS (
    SELECT f.queue, f.gate, f.rate_gate, q.after_gate, q.after_rate, 1, f.wrapped FROM open_queues AS q, """
    + _NEXT_GROUP.format(wrapped="false", queue="q.name", after="(q.after_gate, q.after_rate)", wrap="true")
    + """ AS f
    UNION ALL
    SELECT n.queue, n.gate, n.rate_gate, g.after_gate, g.after_rate, g.visit + 1, n.wrapped FROM groups AS g, """
    + _NEXT_GROUP.format(wrapped="g.wrapped", queue="g.queue", after="(g.gate, g.rate_gate)", wrap="NOT g.wrapped")
    + """ AS n
    WHERE g.visit < %(visits)s AND NOT (n.wrapped AND (n.gate, n.rate_gate) > (g.after_gate, g.after_rate))
), stopped AS (
    SELECT array_agg(queue) AS queues, array_agg(gate) AS gates, array_agg(rate_gate) AS rates
    FROM (SELECT DISTINCT ON (queue) queue, gate, rate_gate FROM groups ORDER BY queue, visit DESC) AS last
), worth AS (
    SELECT k.name FROM pgflow_gate AS k,"""
    + _GATE_ROOM
    + """
    WHERE k.name IN (SELECT gate FROM groups UNION SELECT rate_gate FROM groups) AND """
    + _ROOM
    + """ > 0
), locked AS (
    SELECT k.name, k.size, k.per, k.holders, k.starts, k.served_at FROM pgflow_gate AS k
    WHERE k.name IN (SELECT name FROM worth) ORDER BY k.name FOR UPDATE SKIP LOCKED
), room AS (
    SELECT k.name, k.served_at, kept.holders, recent.starts, greatest(kept.freed_at, recent.freed_at) AS freed_at,
           """
    + _ROOM
    + """ AS room
    FROM locked AS k,"""
    + _GATE_ROOM
    + """
), pool AS (
    SELECT c.id, c.priority, c.scheduled_at, c.run_id, false AS owner, g.gate, g.rate_gate,
           coalesce(fc.served_at, fr.served_at) AS served_at, greatest(fc.freed_at, fr.freed_at) AS freed_at,
           fc.room AS c_room, fr.room AS r_room, c.is_async
    FROM groups AS g
    LEFT JOIN room AS fc ON fc.name = g.gate
    LEFT JOIN room AS fr ON fr.name = g.rate_gate
    CROSS JOIN LATERAL (
        SELECT s.id, s.priority, s.scheduled_at, s.run_id, """
    + _IS_ASYNC.format(a="s")
    + """ AS is_async FROM pgflow_step_live AS s
        WHERE s.status = 'scheduled' AND s.gated AND s.queue = g.queue AND s.gate = g.gate
            AND s.rate_gate = g.rate_gate AND s.scheduled_at <= %(now)s AND """
    + _KIND_FREE.format(a="s")
    + """
        ORDER BY s.priority DESC, s.scheduled_at, s.id
        LIMIT least(%(limit)s, greatest(coalesce(fc.room, %(limit)s), 0), greatest(coalesce(fr.room, %(limit)s), 0))
        FOR UPDATE SKIP LOCKED
    ) AS c
    WHERE (g.gate = '' OR fc.name IS NOT NULL) AND (g.rate_gate = '' OR fr.name IS NOT NULL)
    UNION ALL
    SELECT s.id, s.priority, s.scheduled_at, s.run_id, true, s.gate, s.rate_gate,
           coalesce(k.served_at, fr.served_at), fr.freed_at, 0, fr.room, """
    + _IS_ASYNC.format(a="s")
    + """
    FROM pgflow_gate AS k
    JOIN pgflow_step_live AS s ON s.run_id = ANY(k.holders) AND s.gate = k.name
    LEFT JOIN room AS fr ON fr.name = s.rate_gate
    WHERE k.name IN (SELECT gate FROM groups WHERE gate LIKE '"""
    + gate_prefix(SINGLETON_GATE)
    + """%%') AND s.status = 'scheduled'
        AND s.scheduled_at <= %(now)s AND s.queue IN (SELECT name FROM open_queues)
        AND (s.rate_gate = '' OR fr.name IS NOT NULL) AND """
    + _KIND_FREE.format(a="s")
    + """
), ranked AS (
    SELECT p.*,
           row_number() OVER (PARTITION BY p.gate, p.owner ORDER BY p.priority DESC, p.scheduled_at, p.id) AS c_rank,
           row_number() OVER (PARTITION BY p.rate_gate ORDER BY p.priority DESC, p.scheduled_at, p.id) AS r_rank,
           row_number() OVER (PARTITION BY p.gate, p.rate_gate ORDER BY p.priority DESC, p.scheduled_at, p.id) AS turn
    FROM pool AS p
), allowed AS (
    SELECT * FROM ranked
    WHERE (gate = '' OR owner OR c_rank <= c_room) AND (rate_gate = '' OR r_rank <= r_room)
), merged AS (
    SELECT id, %(now)s::timestamptz AS started_at, NULL::timestamptz AS throttled_until, priority, 1::bigint AS turn,
           scheduled_at AS served_at, scheduled_at, is_async
    FROM candidates
    UNION ALL
    SELECT id, greatest(%(now)s::timestamptz, freed_at), greatest(scheduled_at, freed_at), priority, turn, served_at,
           scheduled_at, is_async
    FROM allowed
), due AS (
    SELECT * FROM """
    + _WITHIN_KINDS.format(
        rows="merged", order="w.priority DESC, w.turn, w.served_at NULLS FIRST, w.scheduled_at, w.id"
    )
    + """ WHERE fits
    ORDER BY priority DESC, turn, served_at NULLS FIRST, scheduled_at, id
    LIMIT %(limit)s
), taken AS (
    SELECT a.id, a.run_id, a.gate, a.rate_gate, a.owner, due.started_at FROM allowed AS a JOIN due ON due.id = a.id
), passed AS (
    UPDATE pgflow_gate AS k
    SET holders = CASE
            WHEN """
    + _K_RATE
    + """ THEN k.holders
            WHEN """
    + _K_SINGLETON
    + """ THEN r.holders
                || ARRAY(SELECT DISTINCT t.run_id FROM taken AS t WHERE t.gate = k.name AND NOT t.owner)
            ELSE r.holders || ARRAY(SELECT t.id FROM taken AS t WHERE t.gate = k.name) END,
        starts = CASE WHEN """
    + _K_RATE
    + """
            THEN r.starts || ARRAY(SELECT t.started_at FROM taken AS t WHERE t.rate_gate = k.name)
            ELSE k.starts END,
        served_at = %(now)s
    FROM room AS r
    WHERE k.name = r.name AND EXISTS (SELECT 1 FROM taken AS t WHERE t.gate = k.name OR t.rate_gate = k.name)
    RETURNING 1
), claimed AS (
    UPDATE pgflow_step_live AS s
    SET status = 'in_progress', started_at = due.started_at, worker = %(worker)s, claim_token = gen_random_uuid(),
        lease_expires_at = %(lease_until)s, throttled_until = due.throttled_until
    FROM due WHERE s.id = due.id
    RETURNING """
    + CLAIMED_STEP
    + """
)
SELECT stopped.queues, stopped.gates, stopped.rates, """
    + CLAIMED
    + """ FROM stopped LEFT JOIN (claimed AS s JOIN pgflow_run AS r ON r.id = s.run_id) ON true
"""
)


def gate_visits(limit: int) -> int:
    """How many gated groups of a queue one claim of ``limit`` attempts visits at most: one
    per place it could fill, and as many again for full or locked gates it passes on the way."""
    return 2 * limit + 8


# Where this process's last gated claim of each queue stopped its walk of the groups
# (gate, rate_gate): the next claim starts after it, so the keys take turns however many
# there are. One process's claims come from its claim loop (one thread).
_AFTER: dict[str, tuple[str, str]] = {}


# It runs prepared, on a generic plan, which cannot know how few rows the claim takes: the
# claimed rows reach the steps and the runs through their primary keys (an array, a LATERAL
# probe), which no estimate can turn into a scan of either table.
#
# The claim while no gated attempt is scheduled in the queues, which is most of the time for
# most projects: CLAIM_SQL's gate logic is planned on every claim even with no gate
# (benchmarks/claim_cost.py), for more than the rest of the claim costs, and every start
# waits for a claim.
# This statement is CLAIM_SQL's ungated part alone, which then claims exactly what CLAIM_SQL
# would (its pool is empty); it claims nothing when gated attempts are scheduled in the open
# queues (the probe reads pgflow_step_gated) and says so in its first column, and the caller
# then claims with CLAIM_SQL. Its rows: that flag, when the earliest attempt it leaves
# scheduled comes due (NULL: none is; the worker's wait needs no query of its own), then the
# claimed columns (NULL when none).
# compact: it then fits psycopg's cache of parsed statements (cursors.CACHED_LENGTH).
UNGATED_CLAIM_SQL = compact(
    """
WITH """
    + _OPEN_QUEUES
    + """, probe AS (
    SELECT EXISTS (SELECT 1 FROM open_queues AS q, LATERAL (
        SELECT 1 FROM pgflow_step_live WHERE status = 'scheduled' AND gated AND queue = q.name LIMIT 1) AS g
    ) AS gated
), """
    + _CANDIDATES.format(also="AND NOT (SELECT gated FROM probe)")
    + """, due AS (
    SELECT id FROM """
    + _WITHIN_KINDS.format(rows="candidates", order="w.priority DESC, w.scheduled_at, w.id")
    + """ WHERE fits ORDER BY priority DESC, scheduled_at, id LIMIT %(limit)s
), claimed AS (
    UPDATE pgflow_step_live AS s
    SET status = 'in_progress', started_at = %(now)s, worker = %(worker)s, claim_token = gen_random_uuid(),
        lease_expires_at = %(lease_until)s, throttled_until = NULL
    WHERE s.id = ANY (ARRAY(SELECT id FROM due))
    RETURNING """
    + CLAIMED_STEP
    + """
), later AS (
    SELECT min(first.scheduled_at) AS next_due
    FROM open_queues AS q,
    LATERAL (SELECT scheduled_at FROM pgflow_step_live
             WHERE status = 'scheduled' AND queue = q.name AND id NOT IN (SELECT id FROM due)
             ORDER BY timezone('UTC', scheduled_at) LIMIT 1) AS first
)
SELECT probe.gated, later.next_due, """
    + CLAIMED
    + """ FROM probe CROSS JOIN later LEFT JOIN (
    claimed AS s CROSS JOIN LATERAL (SELECT """
    + ", ".join(RUN_COLUMNS)
    + """ FROM pgflow_run WHERE id = s.run_id LIMIT 1) AS r
) ON true
"""
)


NOT_READ: Any = object()  # Claim.subject when the claim loop did not read it
_SUBJECT: Any = WorkflowRun._meta.get_field("subject")  # its GenericForeignKey, whose cache run() fills


@dataclass(frozen=True, kw_only=True)
class Claim:
    """An attempt this worker holds: every write for it checks ``token``."""

    step_id: int
    run_id: int
    step_name: str
    attempt: int
    token: uuid.UUID
    started_at: datetime
    run_fields: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    step_fields: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # rows.STEP_COLUMNS
    # The run's outputs as the claim read them (rows.CLAIMED_OUTPUTS); None: not read.
    outputs: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    # The run's subject, read by the claim loop for a step with needs_subject (``with_subjects``).
    subject: Any = field(default=NOT_READ, compare=False, repr=False)

    def run(self) -> WorkflowRun:
        """The run as it was at the claim (no query); ``refresh_from_db()`` for now. Every
        column is the claim's (``rows.RUN_COLUMNS``), so reading a field costs no query, and
        ``run.subject`` is cached when the claim loop read it (``with_subjects``)."""
        run = deferred(WorkflowRun, self.run_fields, id=self.run_id)
        if self.subject is not NOT_READ:
            _SUBJECT.set_cached_value(run, self.subject)
        return run


_RUN_AT = 6  # where rows.CLAIMED's run columns begin, after Claim's own fields
_STEP_AT = _RUN_AT + len(RUN_COLUMNS)
_OUTPUTS_AT = _STEP_AT + len(STEP_COLUMNS)


def claims_of(rows: list[tuple[Any, ...]], at: int = 0) -> list[Claim]:
    """The claims in rows of CLAIMED's columns, beginning at column ``at`` (a claim's, or a
    handed attempt's read again); a row with no attempt there (NULL: an empty claim's one row)
    is skipped. Read in place, with no slice of the row: this is the serial claim loop's
    Python for every attempt."""
    claims = []
    run_at, step_at, outputs_at = at + _RUN_AT, at + _STEP_AT, at + _OUTPUTS_AT
    for row in rows:
        if row[at] is None:
            continue
        # zip's strict check is left to tests/unit/test_claims_of.py: CLAIMED is built from
        # the same column lists as these bounds.
        fields = dict(zip(RUN_COLUMNS, row[run_at:step_at]))  # noqa: B905
        for column in ("input", "attributes"):
            value = fields[column]
            if isinstance(value, str):  # a raw cursor may hand jsonb back as text
                fields[column] = {} if value == "{}" else json.loads(value)  # most runs set no attributes
        outputs = row[outputs_at]
        if isinstance(outputs, str):
            outputs = json.loads(outputs)
        # Claim's own __init__ (frozen) sets each field through object.__setattr__: a claim
        # of the serial claim loop pays it for every attempt. Its state is exactly these
        # fields (it has no __post_init__; tests/unit/test_claims_of.py holds it to that).
        held = Claim.__new__(Claim)
        held.__dict__.update(
            step_id=row[at],
            run_id=row[at + 1],
            step_name=row[at + 2],
            attempt=row[at + 3],
            token=row[at + 4],
            started_at=row[at + 5],
            run_fields=fields,
            step_fields=dict(zip(STEP_COLUMNS, row[step_at:outputs_at])),  # noqa: B905
            outputs=outputs,
            subject=NOT_READ,
        )
        claims.append(held)
    return claims


class Claimed(list[Claim]):
    """What a claim took, and when the earliest attempt it left scheduled on its queues comes
    due: ``next_due`` is None when none is scheduled, ``NOT_KNOWN`` when the claim cannot tell
    (ask ``next_due()``)."""

    def __init__(self, claims: list[Claim], next_due: datetime | None | object) -> None:
        super().__init__(claims)
        self.next_due = next_due


NOT_KNOWN = object()


def with_subjects(claims: list[Claim]) -> list[Claim]:
    """``claims``, those of a step with ``needs_subject`` carrying their run's subject, read
    here with one query per subject model (a body's ``self.subject`` then costs none). A
    subject whose model or row is gone is None, as ``run.subject`` would read it."""
    wanted: dict[int, set[str]] = {}
    for held in claims:
        if _needs_subject(held):
            wanted.setdefault(held.run_fields["subject_type_id"], set()).add(held.run_fields["subject_id"])
    if not wanted:
        return claims
    found: dict[tuple[int, str], Any] = {}
    for type_id, ids in wanted.items():
        model = ContentType.objects.db_manager(db.alias()).get_for_id(type_id).model_class()
        if model is None:
            continue
        for row in model._base_manager.filter(pk__in=sorted(ids)):
            found[(type_id, str(row.pk))] = row
    return [
        replace(held, subject=found.get((held.run_fields["subject_type_id"], held.run_fields["subject_id"])))
        if _needs_subject(held)
        else held
        for held in claims
    ]


def _needs_subject(held: Claim) -> bool:
    if held.run_fields.get("subject_type_id") is None or held.run_fields.get("subject_id") is None:
        return False
    try:
        definition = resolve(held.run_fields["workflow_class"]).steps().get(held.step_name)
    except WorkflowNotFound:
        return False
    return definition is not None and definition.needs_subject


@dataclass(frozen=True)
class Kinds:
    """A claim's free slots by kind: ``threads`` for sync bodies, ``awaiting`` for the async
    bodies of ``async_steps`` ("workflow path:step name"); every other attempt is sync."""

    threads: int
    awaiting: int
    async_steps: frozenset[str] = frozenset()
    # The steps whose claims bring the run's outputs ("workflow path:step name": those whose
    # body reads self.outputs, evaluation.reads_outputs).
    readers: frozenset[str] = frozenset()

    def is_async(self, held: Claim) -> bool:
        """The kind the claim counted ``held`` as."""
        return f"{held.run_fields.get('workflow_class', '')}:{held.step_name}" in self.async_steps

    def filled_by(self, claims: list[Claim]) -> bool:
        """Whether ``claims``, claimed for these free slots, filled those of a kind: more of
        that kind may be due. (Fewer than the total says nothing while the other kind's slots
        stay free: a worker whose classes have an async step has async slots free while its
        sync steps drain.)"""
        if not (self.threads and self.awaiting):
            return len(claims) >= self.threads + self.awaiting
        awaiting = sum(1 for held in claims if self.is_async(held))
        return awaiting >= self.awaiting or len(claims) - awaiting >= self.threads


def claim(
    *, worker: str, queues: list[str], limit: int, at: datetime | None = None, kinds: Kinds | None = None
) -> Claimed:
    """Take up to ``limit`` due attempts in one statement (``FOR UPDATE SKIP LOCKED``); with
    ``kinds``, at most ``kinds.threads`` sync ones and ``kinds.awaiting`` async ones."""
    if kinds is not None:
        limit = min(limit, kinds.threads + kinds.awaiting)
    if limit <= 0:
        return Claimed([], NOT_KNOWN)
    params: dict[str, Any] = {
        "queues": text_array(queues),
        "limit": limit,
        **_lease(worker, at),
        **_kind_params(kinds, limit),
    }
    # The ungated claim is a prepared statement with one generic plan: planning it cost more
    # than running it, on every start's path. Its plan does not depend on the values: each
    # queue's scan follows the claim index whatever the time and the limit.
    rows = _claim_rows(UNGATED_CLAIM_SQL, params)
    if not rows[0][0]:  # no gated attempt scheduled: this was the whole claim
        return Claimed(claims_of(rows, 2), rows[0][1])
    after = [_AFTER.get(queue, ("", "")) for queue in queues]
    params.update(after_gates=[a[0] for a in after], after_rates=[a[1] for a in after], visits=gate_visits(limit))
    # Django's cursor binds the values into the SQL text: planned for them each time.
    pooled = not pgflow_settings.NOTIFY  # no session state: the claim's settings for its transaction
    with db.atomic() if pooled else nullcontext(), connection.cursor() as cursor:
        if pooled:
            cursor.execute("SELECT set_config('synchronous_commit', 'off', true), set_config('jit', 'off', true)")
        cursor.execute(CLAIM_SQL, params)
        rows = cursor.fetchall()
    stopped_queues, gates, rates = rows[0][:3]
    for queue, gate, rate in zip(stopped_queues or (), gates or (), rates or (), strict=True):
        _AFTER[queue] = (gate, rate)
    return Claimed(claims_of(rows, 3), NOT_KNOWN)


# One attempt by its id: the one a start just announced (its NOTIFY names it), claimed as the
# ungated claim would, if it is still scheduled, ungated, due, on one of the worker's queues
# and not a paused one, and not locked by another claim; and, as that claim gives it, when
# the earliest attempt left scheduled on the queues comes due. Its plan is one probe of the
# primary key and one of each queue's due index; the ungated claim's scans of every queue's
# due rows are most of what an idle worker's claim after a start costs, all of it on the
# start latency.
CLAIM_NOTIFIED_SQL = compact(
    """
WITH claimed AS (
    UPDATE pgflow_step_live AS s
    SET status = 'in_progress', started_at = %(now)s, worker = %(worker)s, claim_token = gen_random_uuid(),
        lease_expires_at = %(lease_until)s, throttled_until = NULL
    WHERE s.id = (SELECT id FROM pgflow_step_live WHERE id = %(id)s AND status = 'scheduled' AND NOT gated
                  AND scheduled_at <= %(now)s AND queue = ANY(%(queues)s::text[]) FOR UPDATE SKIP LOCKED)
        AND NOT EXISTS (SELECT 1 FROM pgflow_queue_state AS p WHERE p.queue = s.queue AND p.paused)
    RETURNING """
    + CLAIMED_STEP
    + """
), later AS (
    SELECT min(first.scheduled_at) AS next_due
    FROM unnest(%(queues)s::text[]) AS q(name),
    LATERAL (SELECT scheduled_at FROM pgflow_step_live
             WHERE status = 'scheduled' AND queue = q.name AND id <> %(id)s
             ORDER BY timezone('UTC', scheduled_at) LIMIT 1) AS first
    WHERE NOT EXISTS (SELECT 1 FROM pgflow_queue_state AS p WHERE p.queue = q.name AND p.paused)
)
SELECT later.next_due, """
    + CLAIMED
    + """ FROM later LEFT JOIN (claimed AS s JOIN pgflow_run AS r ON r.id = s.run_id) ON true
"""
)


def claim_notified(
    step_id: int, *, worker: str, queues: list[str], at: datetime | None = None, readers: frozenset[str] = frozenset()
) -> Claimed:
    """Claim the attempt ``step_id`` if it is still claimable (see CLAIM_NOTIFIED_SQL), and say
    when the earliest attempt left scheduled on ``queues`` comes due, as ``claim()`` does.

    For a worker that knows nothing else is due on its queues: then this claims what
    ``claim()`` would, in a cheaper statement. It knows nothing of priorities.
    """
    params = {"id": step_id, "queues": text_array(queues), **_lease(worker, at), **outputs_params(readers)}
    rows = _claim_rows(CLAIM_NOTIFIED_SQL, params)
    return Claimed(claims_of(rows, 1), rows[0][0])


def _kind_params(kinds: Kinds | None, limit: int) -> dict[str, Any]:
    if kinds is None:  # every attempt counts as sync, up to the limit
        none = text_array(())
        return {"async_names": none, "async_keys": none, "threads": limit, "awaiting": 0, **outputs_params(frozenset())}
    keys = sorted(kinds.async_steps)
    names = sorted({key.rsplit(":", 1)[1] for key in keys})
    return {
        "async_names": text_array(names),
        "async_keys": text_array(keys),
        "threads": kinds.threads,
        "awaiting": kinds.awaiting,
        **outputs_params(kinds.readers),
    }


def outputs_params(readers: frozenset[str]) -> dict[str, Any]:
    """The parameters of rows.CLAIMED_OUTPUTS: whose claims bring the outputs, and up to what size."""
    return {"readers": text_array(sorted(readers)), "outputs_cap": OUTPUTS_CAP}


def _lease(worker: str, at: datetime | None) -> dict[str, Any]:
    """A claim's ``now``, ``worker`` and ``lease_until`` parameters."""
    at = at or now()
    return {"now": at, "worker": worker, "lease_until": at + timedelta(seconds=pgflow_settings.seconds("LEASE"))}


def _claim_rows(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Run a prepared claim statement on the claiming session; one statement is its own
    transaction (no BEGIN and COMMIT round trips around it)."""
    with hot_cursor() as prepared:
        if not pgflow_settings.NOTIFY:
            return _claim_rows_in_transaction(prepared, sql, params)
        _claim_session(prepared)
        prepared.execute(sql, params, prepare=True)
        return prepared.fetchall()


def _claim_rows_in_transaction(cursor: Any, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The claim with its settings (below) for its own transaction: with ``PGFLOW["NOTIFY"]``
    False the worker keeps no session state, and behind a transaction-mode pooler a session
    SET would stay on a server connection other clients use next (a start's commit not
    waiting for the WAL flush). Two round trips more; unprepared (the cursor prepares nothing)."""
    cursor.execute("BEGIN; SET LOCAL synchronous_commit = off; SET LOCAL jit = off")
    try:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
        cursor.execute("COMMIT")
    except BaseException:
        try:
            cursor.connection.rollback()  # sends ROLLBACK only if a transaction is open
        except Exception:  # noqa: BLE001,S110 - a broken connection has no transaction left to end
            pass
        raise
    return rows


# The claiming connection's session, set once per connection (the worker's claim loop has its
# own, which writes nothing else that must be durable first):
# - its commits do not wait for the WAL flush (docs/reliability.md, "The claim's commit"): a
#   claim lost with the server's last ~0.6 s of commits leaves its attempt scheduled, to be
#   claimed again, which at-least-once allows; any later durable commit (the attempt's
#   outcome) flushes the claim before itself, as the WAL is written in order; a lost
#   hand-back is taken over after the lease;
# - JIT is off: the planner cannot know how few gated groups and places there are, estimates
#   the claim's window functions over a million rows and JIT-compiles it, for far longer
#   than the claim runs (benchmarks/RESULTS.md, flow control);
# - prepared statements use their generic plan (the ungated claim's, see claim()); the gated
#   claim, whose plan does depend on the values, is not prepared and is planned each time.
_CLAIM_SESSION: weakref.WeakSet[Any] = weakref.WeakSet()


def _claim_session(cursor: Any) -> None:
    raw = cursor.connection
    if raw not in _CLAIM_SESSION:
        cursor.execute("SET synchronous_commit = off")
        cursor.execute("SET jit = off")
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        _CLAIM_SESSION.add(raw)


# The earliest scheduled attempt of each queue (one probe each of pgflow_step_due), then the
# earliest of those; a paused queue has none.
NEXT_DUE_SQL = """
SELECT min(first.scheduled_at)
FROM unnest(%(queues)s::text[]) AS q(name),
LATERAL (SELECT scheduled_at FROM pgflow_step_live WHERE status = 'scheduled' AND queue = q.name
         ORDER BY timezone('UTC', scheduled_at) LIMIT 1) AS first
WHERE NOT EXISTS (SELECT 1 FROM pgflow_queue_state AS p WHERE p.queue = q.name AND p.paused)
"""


def next_due(queues: list[str]) -> datetime | None:
    """When the next attempt on ``queues`` comes due (maybe already past); None when none is scheduled."""
    with connection.cursor() as cursor:
        cursor.execute(NEXT_DUE_SQL, {"queues": queues})
        row = cursor.fetchone()
    return row[0] if row else None


def claim_step(step_id: int, *, worker: str, at: datetime | None = None) -> Claim | None:
    """Claim one specific scheduled attempt, due or not (``pgflow.testing`` skips waits)."""
    with db.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgflow_step_live AS s SET status = 'in_progress', started_at = %(now)s, worker = %(worker)s, "
            "claim_token = gen_random_uuid(), lease_expires_at = %(lease_until)s, "
            "scheduled_at = LEAST(s.scheduled_at, %(now)s) "
            "FROM pgflow_run AS r WHERE s.id = %(id)s AND s.status = 'scheduled' AND r.id = s.run_id " + _RETURNING,
            {"id": step_id, **_lease(worker, at), **outputs_params(frozenset())},
        )
        rows = cursor.fetchall()
    claims = claims_of(rows)
    return claims[0] if claims else None
