"""The exactly-once checker on hand-made rows: each kind of breach is caught, and named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.invariants import violations

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def finished_run(run_id: int, steps: int = 2) -> tuple[dict, list[dict], list[dict]]:
    """A clean finished run: ``steps`` steps, each completed in its first attempt."""
    run = {"id": run_id, "status": "finished", "finished_at": at(steps)}
    rows = [
        {
            "id": run_id * 100 + n,
            "run_id": run_id,
            "step_name": f"s{n}",
            "attempt": 1,
            "status": "completed",
            "outcome": "completed",
            "created_at": at(n),
            "finished_at": at(n + 1),
        }
        for n in range(steps)
    ]
    events = [{"id": run_id * 100, "run_id": run_id, "step_id": None, "event": "started", "created_at": at(0)}]
    events += [
        {
            "id": row["id"] + 1000,
            "run_id": run_id,
            "step_id": row["id"],
            "event": "step_completed",
            "created_at": row["finished_at"],
        }
        for row in rows
    ]
    events.append(
        {"id": run_id * 100 + 99, "run_id": run_id, "step_id": None, "event": "finished", "created_at": at(steps)}
    )
    return run, rows, events


def check(*parts: tuple[dict, list[dict], list[dict]]) -> list[str]:
    return violations([p[0] for p in parts], [s for p in parts for s in p[1]], [e for p in parts for e in p[2]])


def test_clean_runs_pass():
    assert check(finished_run(1), finished_run(2)) == []


def test_a_duplicate_in_one_run_and_a_gap_in_another_are_both_caught_though_the_totals_agree():
    dup, gap = finished_run(1), finished_run(2)
    dup[2].append({**dup[2][1], "id": 9999})  # step_completed applied twice in run 1
    gap[2].remove(gap[2][1])  # and lost in run 2: the total is unchanged
    found = check(dup, gap)
    assert len(found) == 2
    assert found[0].startswith("run 1 s0#1 (completed, outcome completed): closing events {'step_completed': 2}")
    assert found[1].startswith("run 2 s0#1 (completed, outcome completed): closing events {}")


def test_attempts_numbered_with_a_gap_are_caught():
    run, steps, events = finished_run(1, steps=1)
    lost = {
        **steps[0],
        "id": 500,
        "attempt": 1,
        "status": "failed",
        "outcome": "lost",
        "created_at": at(-1),
        "finished_at": at(0),
    }
    steps[0]["attempt"] = 3
    events.append({"id": 501, "run_id": 1, "step_id": 500, "event": "lease_lost", "created_at": at(0)})
    assert check((run, [lost, *steps], events)) == ["run 1 s0: attempts numbered [1, 3], expected 1..2"]


def test_two_attempts_open_at_once_are_caught():
    run = {"id": 1, "status": "running", "finished_at": None}
    steps = [
        {
            "id": n,
            "run_id": 1,
            "step_name": "s",
            "attempt": n,
            "status": "scheduled",
            "outcome": "",
            "created_at": at(n),
            "finished_at": None,
        }
        for n in (1, 2)
    ]
    assert check((run, steps, [])) == ["run 1: 2 attempts open at once", "run 1: s#2 opened before s#1 closed"]


def test_an_attempt_opened_before_the_previous_one_closed_is_caught():
    run, steps, events = finished_run(1)
    steps[1]["created_at"] = steps[0]["finished_at"] - timedelta(milliseconds=1)
    assert check((run, steps, events)) == ["run 1: s1#1 opened before s0#1 closed"]


def test_an_event_after_the_run_ended_and_a_second_ending_are_caught():
    run, steps, events = finished_run(1)
    events.append({"id": 7, "run_id": 1, "step_id": None, "event": "finished", "created_at": at(10)})
    assert check((run, steps, events)) == [
        "run 1 is finished with 2 'finished' events, expected 1",
        "run 1: events after it ended: ['finished']",
    ]


def test_an_open_attempt_with_a_closing_event_is_caught():
    run = {"id": 1, "status": "running", "finished_at": None}
    step = {
        "id": 1,
        "run_id": 1,
        "step_name": "s",
        "attempt": 1,
        "status": "in_progress",
        "outcome": "",
        "created_at": at(0),
        "finished_at": None,
    }
    event = {"id": 1, "run_id": 1, "step_id": 1, "event": "step_completed", "created_at": at(1)}
    assert check((run, [step], [event])) == [
        "run 1 s#1 (in_progress, outcome -): closing events {'step_completed': 1}, expected {}"
    ]
