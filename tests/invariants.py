"""The exactly-once checker every reliability test ends with.

Global totals (``step_completed`` events == runs x steps) let a duplicate in one run hide a
gap in another. This checks each run on its own, from the rows a user can read:

- every closed attempt has exactly one event that closed it, the one its outcome names, and
  an open attempt has none;
- a step's attempts are numbered 1, 2, 3 ... without gaps or repeats;
- at most one attempt of a run is open at any time: each attempt opens no earlier than the
  one before it closed, and at most one is open now;
- an ended run (finished or cancelled) has exactly one ending event, and no event after it.

``violations`` is pure (plain dicts in, messages out) so the checker itself is tested on
hand-made rows; ``assert_exactly_once`` reads the rows from the database.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

OPEN = {"scheduled", "waiting", "in_progress"}
ENDED = {"finished", "cancelled"}

# The event that records an attempt's end, by the outcome written on the attempt.
CLOSED_BY = {"completed": "step_completed", "lost": "lease_lost", "handed_back": "handed_back", "skipped": "skipped"}
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
        late = [e["event"] for e in events if e["created_at"] > run["finished_at"]]
        if late:
            found.append(f"{name}: events after it ended: {late}")
    if run["status"] in ENDED and open_now:
        found.append(f"{name} is {run['status']} with an open attempt")
    return found


def assert_exactly_once(run_ids: Iterable[Any] | None = None) -> int:
    """Check every run (or those given) in the database; returns how many runs were checked."""
    from pgflow.models import Event, Step, WorkflowRun

    runs = WorkflowRun.objects.all()
    if run_ids is not None:
        runs = runs.filter(pk__in=list(run_ids))
    run_rows = list(runs.values("id", "status", "finished_at"))
    ids = [row["id"] for row in run_rows]
    step_rows = list(
        Step.objects.filter(run_id__in=ids).values(
            "id", "run_id", "step_name", "attempt", "status", "outcome", "created_at", "finished_at"
        )
    )
    event_rows = list(Event.objects.filter(run_id__in=ids).values("id", "run_id", "step_id", "event", "created_at"))
    found = violations(run_rows, step_rows, event_rows)
    assert not found, f"{len(found)} exactly-once violations:\n" + "\n".join(found[:20])
    return len(run_rows)
