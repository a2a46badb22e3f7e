"""The exactly-once checker every reliability test ends with.

Global totals (``step_completed`` events == runs x steps) let a duplicate in one run hide a
gap in another. This checks each run on its own, from the rows a user can read:

- every closed attempt has exactly one event that closed it, the one its outcome names (a
  failed attempt its policy skipped: its ``step_failed`` and its ``skipped``), and an open
  attempt has none;
- a step's attempts are numbered 1, 2, 3 ... without gaps or repeats;
- at most one attempt of a run is open at any time: each attempt opens no earlier than the
  one before it closed, and at most one is open now;
- an ended run (finished or cancelled) has exactly one ending event, and no event after it.

And what the second wave added, each from its own rows:

- batches (``batch_violations``): a batch's counts equal its members' outcomes (no member
  counted twice or lost), it finished exactly when they all were, a child run's member says
  how the child ended, and at most one ``fan_out_finished`` names it, with its counts;
- schedule ticks (``tick_violations``): no tick starts two runs, a ``started`` or ``manual``
  tick has its run (a ``started`` one with the tick's key), and every run with a tick's key
  has its tick;
- gates (``gate_violations``): at no instant more attempts of one concurrency key in progress
  than its max, more runs of one singleton key than one, or more starts of one rate key in a
  window than its limit, from the attempts' own ``started_at`` / ``finished_at``;
- signals (``signal_violations``): each stored once (one ``signal_received`` each), consumed
  by at most one step (a reattempt of that step carries it), and a step's signal consumed.

Each of those is pure (plain dicts in, messages out) so the checker itself is tested on
hand-made rows; ``assert_exactly_once`` reads the rows from the database and runs them all,
and ``cluster_violations`` runs them all on a cluster of a test's own, with the same
statements read through a psycopg connection.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

OPEN = {"scheduled", "waiting", "in_progress"}
ENDED = {"finished", "cancelled"}

# The event that records an attempt's end, by the outcome written on the attempt.
CLOSED_BY = {"completed": "step_completed", "lost": "lease_lost", "handed_back": "handed_back", "skipped": "skipped"}
# Events that may follow a run's end: they point at it and change nothing (a re-run of a
# finished run records, on the original, the run that re-runs it).
AFTER_END = {"rerun_as"}
CLOSERS = {"step_completed", "step_failed", "lease_lost", "handed_back", "skipped"}

Row = dict[str, Any]


def closing_event(step: Row) -> str | None:
    """The closer event an attempt must have exactly one of, or None where its end is recorded
    by the run's own event (an operator's pause or cancel, ``finish()``)."""
    if step["outcome"] in CLOSED_BY:
        return CLOSED_BY[step["outcome"]]
    if step["status"] == "failed":
        return "step_failed"
    return None


def violations(runs: Iterable[Row], steps: Iterable[Row], events: Iterable[Row]) -> list[str]:
    """Every breach of exactly-once in these rows, one message each naming the run."""
    steps_of: dict[Any, list[Row]] = defaultdict(list)
    for step in steps:
        steps_of[step["run_id"]].append(step)
    events_of: dict[Any, list[Row]] = defaultdict(list)
    for event in events:
        events_of[event["run_id"]].append(event)
    found: list[str] = []
    for run in runs:
        found.extend(_run_violations(run, steps_of[run["id"]], events_of[run["id"]]))
    return found


def _run_violations(run: Row, steps: list[Row], events: list[Row]) -> list[str]:
    found: list[str] = []
    name = f"run {run['id']}"
    closers = Counter((e["step_id"], e["event"]) for e in events if e["event"] in CLOSERS)
    for step in steps:
        attempt = f"{name} {step['step_name']}#{step['attempt']}"
        mine = {kind: n for (step_id, kind), n in closers.items() if step_id == step["id"]}
        expected = None if step["status"] in OPEN else closing_event(step)
        wanted = {expected: 1} if expected else {}
        if step["status"] == "failed" and step["outcome"] == "skipped":
            # The error and the skip its policy chose: step_failed, then the skip that moved on.
            wanted = {"step_failed": 1, "skipped": 1}
        if mine != wanted:
            found.append(
                f"{attempt} ({step['status']}, outcome {step['outcome'] or '-'}): closing events {mine}, "
                f"expected {wanted}"
            )
    by_name: dict[str, list[int]] = defaultdict(list)
    for step in steps:
        by_name[step["step_name"]].append(step["attempt"])
    for step_name, numbers in by_name.items():
        if sorted(numbers) != list(range(1, len(numbers) + 1)):
            found.append(f"{name} {step_name}: attempts numbered {sorted(numbers)}, expected 1..{len(numbers)}")
    ordered = sorted(steps, key=lambda s: (s["created_at"], s["id"]))
    open_now = [s for s in ordered if s["status"] in OPEN]
    if len(open_now) > 1:
        found.append(f"{name}: {len(open_now)} attempts open at once")
    for before, after in zip(ordered, ordered[1:], strict=False):
        if before["finished_at"] is None or after["created_at"] < before["finished_at"]:
            found.append(
                f"{name}: {after['step_name']}#{after['attempt']} opened before "
                f"{before['step_name']}#{before['attempt']} closed"
            )
    if run["status"] in ENDED:
        endings = [e for e in events if e["event"] == run["status"]]
        if len(endings) != 1:
            found.append(f"{name} is {run['status']} with {len(endings)} '{run['status']}' events, expected 1")
        late = [e["event"] for e in events if e["created_at"] > run["finished_at"] and e["event"] not in AFTER_END]
        if late:
            found.append(f"{name}: events after it ended: {late}")
    if run["status"] in ENDED and open_now:
        found.append(f"{name} is {run['status']} with an open attempt")
    return found


# --- batches ------------------------------------------------------------------------------------


def batch_violations(
    batches: Iterable[Row], members: Iterable[Row], fan_out_finished: Iterable[Row], child_status: dict[Any, str]
) -> list[str]:
    """``batches``: id, status, total, succeeded, failed; ``members``: batch_id, position,
    status, child_id; ``fan_out_finished``: the events' details; ``child_status``: the
    status of each member's child run."""
    members_of: dict[Any, list[Row]] = defaultdict(list)
    for member in members:
        members_of[str(member["batch_id"])].append(member)
    events_of: dict[str, list[Row]] = defaultdict(list)
    for details in fan_out_finished:
        events_of[str(details.get("batch_id"))].append(details)
    found: list[str] = []
    for batch in batches:
        name = f"batch {batch['id']}"
        mine = members_of[str(batch["id"])]
        by_status = Counter(m["status"] for m in mine)
        if batch["total"] != len(mine):
            found.append(f"{name}: total {batch['total']}, {len(mine)} members")
        for column in ("succeeded", "failed"):
            if batch[column] != by_status[column]:
                found.append(f"{name}: counted {column} {batch[column]}, {by_status[column]} members {column}")
        done = batch["succeeded"] + batch["failed"]
        if batch["status"] == "finished" and (by_status["pending"] or done != batch["total"]):
            found.append(f"{name}: finished with {done} of {batch['total']} counted, {by_status['pending']} pending")
        if batch["status"] == "open" and batch["total"] and done >= batch["total"]:
            found.append(f"{name}: open with all {done} of {batch['total']} members counted")
        for member in mine:
            child = member.get("child_id")
            ended = {"succeeded": "finished", "failed": "cancelled"}.get(member["status"])
            if child is not None and ended and child_status.get(child, ended) != ended:
                found.append(
                    f"{name} member {member['position']}: {member['status']}, but its child run {child} "
                    f"is {child_status[child]}"
                )
        events = events_of[str(batch["id"])]
        if len(events) > 1:
            found.append(f"{name}: {len(events)} fan_out_finished events, expected at most 1")
        for details in events:
            said = {column: details.get(column) for column in ("total", "succeeded", "failed")}
            counted = {column: batch[column] for column in said}
            if not details.get("vanished") and said != counted:
                found.append(f"{name}: fan_out_finished says {said}, the batch counted {counted}")
    return found


# --- schedule ticks ------------------------------------------------------------------------------

STARTED_TICKS = {"started", "manual"}


def _tick_key(schedule_id: Any, tick_at: datetime) -> str:
    # pgflow.schedules.run_key, written out: the checker must not trust the code it checks.
    return f"schedule:{schedule_id}:{tick_at.astimezone(UTC).isoformat()}"


def tick_violations(ticks: Iterable[Row], runs: Iterable[Row]) -> list[str]:
    """``ticks``: id, schedule_id, tick_at, outcome, run_id; ``runs``: id, key, rerun_of_id
    of the runs the ticks name and of the runs with a schedule's key."""
    ticks = list(ticks)
    key_of = {run["id"]: run["key"] for run in runs}
    found: list[str] = []
    started = [t for t in ticks if t["outcome"] == "started"]
    per_tick = Counter((t["schedule_id"], t["tick_at"]) for t in started)
    for (schedule_id, tick_at), count in per_tick.items():
        if count > 1:
            found.append(f"schedule {schedule_id} tick {tick_at.isoformat()}: started {count} runs")
    per_run = Counter(t["run_id"] for t in ticks if t["outcome"] in STARTED_TICKS and t["run_id"] is not None)
    for run_id, count in per_run.items():
        if count > 1:
            found.append(f"run {run_id}: started by {count} ticks")
    for tick in ticks:
        if tick["outcome"] not in STARTED_TICKS:
            continue
        name = f"schedule {tick['schedule_id']} tick {tick['tick_at'].isoformat()} ({tick['outcome']})"
        if tick["run_id"] is None:
            found.append(f"{name}: recorded without its run")
        elif tick["outcome"] == "started" and tick["run_id"] in key_of:
            if key_of[tick["run_id"]] != _tick_key(tick["schedule_id"], tick["tick_at"]):
                found.append(f"{name}: its run {tick['run_id']} has the key {key_of[tick['run_id']]!r}")
    ticked = {t["run_id"] for t in ticks if t["outcome"] in STARTED_TICKS}
    for run in runs:
        key = run["key"] or ""
        if key.startswith("schedule:") and run.get("rerun_of_id") is None and run["id"] not in ticked:
            found.append(f"run {run['id']} has a schedule's key {key!r} but no tick that started it")
    return found


# --- gates ---------------------------------------------------------------------------------------

_FOREVER = datetime.max.replace(tzinfo=UTC)


def _held(attempt: Row) -> tuple[datetime, datetime] | None:
    """When the attempt held its place: from its claim to its end (still held while in progress)."""
    if attempt["started_at"] is None:
        return None
    if attempt["finished_at"] is not None:
        return attempt["started_at"], attempt["finished_at"]
    return (attempt["started_at"], _FOREVER) if attempt["status"] == "in_progress" else None


def gate_violations(attempts: Iterable[Row]) -> list[str]:
    """``attempts``: id, run_id, status, started_at, finished_at, gate, gate_max, rate_gate,
    rate_limit, rate_per. A concurrency gate (``c:``) counts attempts in progress, a singleton
    (``s:``) counts runs; an end at the same instant as a start frees the place first."""
    by_gate: dict[str, list[Row]] = defaultdict(list)
    by_rate: dict[str, list[Row]] = defaultdict(list)
    for attempt in attempts:
        if attempt.get("gate"):
            by_gate[attempt["gate"]].append(attempt)
        if attempt.get("rate_gate") and attempt["started_at"] is not None:
            by_rate[attempt["rate_gate"]].append(attempt)
    found: list[str] = []
    for gate, rows in sorted(by_gate.items()):
        moments: list[tuple[datetime, int, Row]] = []
        for row in rows:
            held = _held(row)
            if held is not None:
                moments += [(held[0], 1, row), (held[1], 0, row)]
        holding: Counter[Any] = Counter()
        for at, opens, row in sorted(moments, key=lambda m: (m[0], m[1], m[2]["id"])):
            who = row["run_id"] if gate.startswith("s:") else row["id"]
            holding[who] += 1 if opens else -1
            if not holding[who]:
                del holding[who]
            limit = 1 if gate.startswith("s:") else row["gate_max"]
            if opens and len(holding) > limit:
                what = "runs" if gate.startswith("s:") else "attempts"
                found.append(
                    f"gate {gate}: {len(holding)} {what} in progress at {at.isoformat()} (max {limit}): "
                    f"{sorted(holding)}"
                )
                break  # one breach names the gate; the rest follow from it
    for gate, rows in sorted(by_rate.items()):
        starts = sorted(rows, key=lambda r: (r["started_at"], r["id"]))
        first = 0
        for last, row in enumerate(starts):
            window = timedelta(seconds=row["rate_per"])
            while starts[first]["started_at"] <= row["started_at"] - window:
                first += 1
            if last - first + 1 > row["rate_limit"]:
                found.append(
                    f"rate {gate}: {last - first + 1} starts within {row['rate_per']:g}s up to "
                    f"{row['started_at'].isoformat()} (limit {row['rate_limit']})"
                )
                break
    return found


# --- signals -------------------------------------------------------------------------------------


def signal_violations(signals: Iterable[Row], steps: Iterable[Row], received: Iterable[Row]) -> list[str]:
    """``signals``: id, run_id, name, consumed_at, consumed_by_id; ``steps``: id, run_id,
    step_name, signal_id of the attempts holding or consuming one; ``received``: run_id and
    name of each ``signal_received`` event."""
    signals = list(signals)
    step_of = {step["id"]: step for step in steps}
    holders: dict[Any, list[Row]] = defaultdict(list)
    for step in step_of.values():
        if step["signal_id"] is not None:
            holders[step["signal_id"]].append(step)
    found: list[str] = []
    stored = Counter((s["run_id"], s["name"]) for s in signals)
    events = Counter((e["run_id"], e["name"]) for e in received)
    for run_id, name in sorted(set(stored) | set(events), key=str):
        if stored[(run_id, name)] != events[(run_id, name)]:
            found.append(
                f"run {run_id} signal {name!r}: {stored[(run_id, name)]} stored, "
                f"{events[(run_id, name)]} signal_received events"
            )
    consumers = Counter(s["consumed_by_id"] for s in signals if s["consumed_by_id"] is not None)
    for step_id, count in consumers.items():
        if count > 1:
            found.append(f"step {step_id} consumed {count} signals")
    for signal in signals:
        name = f"run {signal['run_id']} signal {signal['id']} {signal['name']!r}"
        mine = holders.pop(signal["id"], [])
        consumer = signal["consumed_by_id"]
        if (signal["consumed_at"] is None) != (consumer is None):
            found.append(f"{name}: consumed_at {signal['consumed_at']} but consumed_by {consumer}")
        if signal["consumed_at"] is None:
            if mine:
                found.append(f"{name}: not consumed, yet attempts {sorted(s['id'] for s in mine)} hold it")
            continue
        places = {(s["run_id"], s["step_name"]) for s in mine}
        if len(places) > 1 or any(run_id != signal["run_id"] for run_id, _ in places):
            found.append(f"{name}: held by attempts of {sorted(places)}, consumed twice")
        if consumer in step_of and step_of[consumer]["signal_id"] != signal["id"]:
            found.append(f"{name}: its consumer {consumer} holds signal {step_of[consumer]['signal_id']}")
    for signal_id, mine in holders.items():
        found.append(f"signal {signal_id}: held by attempts {sorted(s['id'] for s in mine)} but not stored")
    return found


# Reads rows: an SQL statement and its parameters in, one dict per row out. The checks below
# read through one, so the suite's Django connection and a psycopg connection to a test's own
# cluster are checked by the same statements.
Rows = Callable[[str, Sequence[Any]], list[Row]]


def _reader(cursor: Any) -> Rows:
    """A ``Rows`` on a DB-API cursor (Django's, or psycopg's: a connection's ``cursor()``)."""

    def rows(sql: str, params: Sequence[Any] = ()) -> list[Row]:
        cursor.execute(sql, params)
        names = [column[0] for column in cursor.description or []]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    return rows


def _of_runs(run_ids: list[Any] | None, column: str = "run_id") -> tuple[str, list[Any]]:
    """The condition keeping the rows of these runs (None: every row), and its parameters."""
    return ("TRUE", []) if run_ids is None else (f"{column} = ANY(%s)", [run_ids])


def _run_violations_read(rows: Rows, run_ids: list[Any] | None) -> tuple[int, list[str]]:
    """How many runs were read, and the breaches of ``violations`` in them."""
    where, params = _of_runs(run_ids, "id")
    runs = rows(f"SELECT id, status, finished_at FROM pgflow_run WHERE {where}", params)
    where, params = _of_runs(run_ids)
    steps = rows(
        "SELECT id, run_id, step_name, attempt, status, outcome, created_at, finished_at "
        f"FROM pgflow_step WHERE {where}",
        params,
    )
    events = rows(f"SELECT id, run_id, step_id, event, created_at FROM pgflow_event WHERE {where}", params)
    return len(runs), violations(runs, steps, events)


def assert_exactly_once(run_ids: Iterable[Any] | None = None) -> int:
    """Check every run (or those given) in the database; returns how many runs were checked."""
    # Imported here, not at the top: the pure checkers above are tested without Django.
    from pgflow.db import connection

    ids = None if run_ids is None else list(run_ids)
    with connection.cursor() as cursor:
        rows = _reader(cursor)
        checked, found = _run_violations_read(rows, ids)
        found += _flow_violations_read(rows, ids)
    assert not found, f"{len(found)} exactly-once violations:\n" + "\n".join(found[:20])
    return checked


def cluster_violations(conn: Any) -> list[str]:
    """Every breach ``assert_exactly_once`` looks for, in the database ``conn`` (a psycopg
    connection) is open on: a test's own cluster, which the suite's Django connection does not
    reach."""
    rows = _reader(conn.cursor())
    return _run_violations_read(rows, None)[1] + _flow_violations_read(rows, None)


def flow_violations(run_ids: list[Any] | None = None) -> list[str]:
    """The batches, schedule ticks, gates and signals of these runs (None: of every run), read
    and checked, and the links between runs."""
    from pgflow.db import connection  # as assert_exactly_once's import: the pure checkers need no Django

    with connection.cursor() as cursor:
        return _flow_violations_read(_reader(cursor), run_ids)


def _flow_violations_read(rows: Rows, run_ids: list[Any] | None) -> list[str]:
    where, params = _of_runs(run_ids)
    batches = rows(f"SELECT id, status, total, succeeded, failed FROM pgflow_batch WHERE {where}", params)
    members = rows(
        "SELECT batch_id, position, status, child_id FROM pgflow_batch_member WHERE batch_id = ANY(%s)",
        [[b["id"] for b in batches]],
    )
    children = list({m["child_id"] for m in members if m["child_id"] is not None})
    child_status = {
        r["id"]: r["status"] for r in rows("SELECT id, status FROM pgflow_run WHERE id = ANY(%s)", [children])
    }
    # As text, decoded here: Django's connection reads jsonb as text, psycopg's as objects.
    finished = [
        json.loads(r["details"])
        for r in rows(f"SELECT details::text FROM pgflow_event WHERE event = 'fan_out_finished' AND {where}", params)
    ]
    # Every tick of the schedules that started these runs: a started tick without its run too.
    ticks = rows(
        "SELECT id, schedule_id, tick_at, outcome, run_id FROM pgflow_schedule_tick "
        f"WHERE schedule_id IN (SELECT schedule_id FROM pgflow_schedule_tick WHERE {where})",
        params,
    )
    where_id, params_id = _of_runs(run_ids, "id")
    keyed = rows(f"SELECT id, key, rerun_of_id FROM pgflow_run WHERE key LIKE 'schedule:%%' AND {where_id}", params_id)
    ticked = rows(
        "SELECT id, key, rerun_of_id FROM pgflow_run WHERE id = ANY(%s)",
        [[t["run_id"] for t in ticks if t["run_id"] is not None]],
    )
    # A gate's attempts come from every run that passed it, not only the runs checked.
    limited = f"SELECT {{}} FROM pgflow_step WHERE {where} AND (gate <> '' OR rate_gate <> '')"
    gated = rows(
        "SELECT id, run_id, status, started_at, finished_at, gate, gate_max, rate_gate, rate_limit, rate_per "
        "FROM pgflow_step WHERE (gate <> '' OR rate_gate <> '') "
        f"AND (gate IN ({limited.format('gate')}) OR rate_gate IN ({limited.format('rate_gate')}))",
        params * 2,
    )
    signals = rows(f"SELECT id, run_id, name, consumed_at, consumed_by_id FROM pgflow_signal WHERE {where}", params)
    signal_steps = rows(
        "SELECT id, run_id, step_name, signal_id FROM pgflow_step "
        f"WHERE (signal_id IS NOT NULL AND {where}) OR id = ANY(%s)",
        [*params, [s["consumed_by_id"] for s in signals if s["consumed_by_id"] is not None]],
    )
    received = rows(
        f"SELECT run_id, details->>'name' AS name FROM pgflow_event WHERE event = 'signal_received' AND {where}",
        params,
    )
    return (
        batch_violations(batches, members, finished, child_status)
        + tick_violations(ticks, [*keyed, *ticked])
        + gate_violations(gated)
        + signal_violations(signals, signal_steps, received)
        + _link_violations_read(rows)
    )


# Links between runs that are not foreign keys (pgflow.store.links): table, column.
RUN_LINKS = [
    ("pgflow_run", "rerun_of_id"),
    ("pgflow_run", "parent_id"),
    ("pgflow_batch_member", "child_id"),
    ("pgflow_schedule", "last_run_id"),
    ("pgflow_schedule_tick", "run_id"),
]


# The rows a run owns, whose key to it is not checked by the database either (migration 0022):
# table, column. Each partitioned table is read through its parent, every day of history too.
OWNED_ROWS = [
    ("pgflow_step", "run_id"),
    ("pgflow_event", "run_id"),
    ("pgflow_signal", "run_id"),
    ("pgflow_batch", "run_id"),
]


def link_violations() -> list[str]:
    """Every row in the database whose link names a run that is not there, and every row of a
    run's own (an attempt, an event, a signal, a batch) whose run is gone."""
    from pgflow.db import connection  # as assert_exactly_once's import: the pure checkers need no Django

    with connection.cursor() as cursor:
        return _link_violations_read(_reader(cursor))


def _link_violations_read(rows: Rows) -> list[str]:
    found: list[str] = []
    for table, column in [*RUN_LINKS, *OWNED_ROWS]:
        gone = rows(
            f"SELECT t.id, t.{column} AS run_id FROM {table} AS t WHERE t.{column} IS NOT NULL "
            f"AND NOT EXISTS (SELECT 1 FROM pgflow_run AS r WHERE r.id = t.{column}) ORDER BY t.id"
        )
        found += [f"{table} {row['id']}: {column} names run {row['run_id']}, which is gone" for row in gone]
    return found
