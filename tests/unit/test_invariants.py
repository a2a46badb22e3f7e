"""The exactly-once checker on hand-made rows: each kind of breach is caught, and named (runs,
batches, schedule ticks, gates, signals)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.invariants import batch_violations, gate_violations, signal_violations, tick_violations, violations

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


def test_a_rerun_recorded_on_a_finished_original_is_not_a_late_event():
    run, steps, events = finished_run(1)
    events.append({"id": 7, "run_id": 1, "step_id": None, "event": "rerun_as", "created_at": at(10)})
    assert check((run, steps, events)) == []
    events.append({"id": 8, "run_id": 1, "step_id": None, "event": "paused", "created_at": at(11)})
    assert check((run, steps, events)) == ["run 1: events after it ended: ['paused']"]


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


# --- batches, schedule ticks, gates and signals -----------------------------------------------


def batch(status="finished", total=3, succeeded=2, failed=1, batch_id="b1") -> dict:
    return {"id": batch_id, "status": status, "total": total, "succeeded": succeeded, "failed": failed}


def members(*statuses: str, children: tuple = ()) -> list[dict]:
    return [
        {"batch_id": "b1", "position": n, "status": status, "child_id": children[n] if n < len(children) else None}
        for n, status in enumerate(statuses)
    ]


def test_a_batch_whose_counts_equal_its_members_passes():
    finished = [{"batch_id": "b1", "total": 3, "succeeded": 2, "failed": 1}]
    assert batch_violations([batch()], members("succeeded", "succeeded", "failed"), finished, {}) == []
    still_open = batch(status="open", succeeded=1, failed=0)
    assert batch_violations([still_open], members("succeeded", "pending", "skipped"), [], {}) == []


def test_a_member_counted_twice_and_one_lost_are_caught():
    twice = batch(succeeded=3, failed=1)  # one success counted twice
    assert batch_violations([twice], members("succeeded", "succeeded", "failed"), [], {}) == [
        "batch b1: counted succeeded 3, 2 members succeeded",
        "batch b1: finished with 4 of 3 counted, 0 pending",
    ]
    lost = batch(status="open", succeeded=1, failed=1)  # the third member succeeded uncounted
    assert batch_violations([lost], members("succeeded", "succeeded", "failed"), [], {}) == [
        "batch b1: counted succeeded 1, 2 members succeeded"
    ]


def test_a_batch_finished_early_or_left_open_is_caught():
    early = batch(succeeded=1, failed=1)
    assert batch_violations([early], members("succeeded", "failed", "pending"), [], {}) == [
        "batch b1: finished with 2 of 3 counted, 1 pending"
    ]
    left = batch(status="open")
    assert batch_violations([left], members("succeeded", "succeeded", "failed"), [], {}) == [
        "batch b1: open with all 3 of 3 members counted"
    ]
    assert batch_violations([batch(total=4)], members("succeeded", "succeeded", "failed"), [], {}) == [
        "batch b1: total 4, 3 members",
        "batch b1: finished with 3 of 4 counted, 0 pending",
    ]


def test_a_child_member_that_disagrees_with_its_child_and_a_second_finished_event_are_caught():
    rows = members("succeeded", "succeeded", "failed", children=(7, 8, 9))
    said = {"batch_id": "b1", "total": 3, "succeeded": 2, "failed": 1}
    assert batch_violations([batch()], rows, [said], {7: "finished", 8: "cancelled", 9: "cancelled"}) == [
        "batch b1 member 1: succeeded, but its child run 8 is cancelled"
    ]
    wrong = {**said, "succeeded": 3, "failed": 0}
    assert batch_violations([batch()], rows, [said, wrong], {}) == [
        "batch b1: 2 fan_out_finished events, expected at most 1",
        "batch b1: fan_out_finished says {'total': 3, 'succeeded': 3, 'failed': 0}, the batch counted "
        "{'total': 3, 'succeeded': 2, 'failed': 1}",
    ]


def tick(tick_id: int, seconds: float, outcome: str = "started", run_id: int | None = None) -> dict:
    return {"id": tick_id, "schedule_id": 5, "tick_at": at(seconds), "outcome": outcome, "run_id": run_id}


def tick_run(run_id: int, seconds: float | None = None, key: str | None = None) -> dict:
    if key is None and seconds is not None:
        key = f"schedule:5:{at(seconds).isoformat()}"
    return {"id": run_id, "key": key, "rerun_of_id": None}


def test_each_tick_with_its_one_run_passes():
    ticks = [tick(1, 0, run_id=10), tick(2, 60, "skipped"), tick(3, 120, run_id=11), tick(4, 130, "manual", 12)]
    runs = [tick_run(10, 0), tick_run(11, 120), tick_run(12, key="schedule:5:now:x:ab12")]
    assert tick_violations(ticks, runs) == []


def test_a_tick_that_started_two_runs_is_caught():
    ticks = [tick(1, 0, run_id=10), tick(2, 0, run_id=11)]
    runs = [tick_run(10, 0), tick_run(11, key="schedule:5:2025-01-01T00:00:00+00:00#2")]
    assert tick_violations(ticks, runs) == [
        "schedule 5 tick 2025-01-01T00:00:00+00:00: started 2 runs",
        "schedule 5 tick 2025-01-01T00:00:00+00:00 (started): its run 11 has the key "
        "'schedule:5:2025-01-01T00:00:00+00:00#2'",
    ]


def test_a_started_tick_without_its_run_a_run_started_twice_and_a_run_without_its_tick_are_caught():
    ticks = [tick(1, 0), tick(2, 60, run_id=11), tick(3, 120, run_id=11)]
    runs = [tick_run(11, 60), tick_run(12, 180)]
    assert tick_violations(ticks, runs) == [
        "run 11: started by 2 ticks",
        "schedule 5 tick 2025-01-01T00:00:00+00:00 (started): recorded without its run",
        "schedule 5 tick 2025-01-01T00:02:00+00:00 (started): its run 11 has the key "
        "'schedule:5:2025-01-01T00:01:00+00:00'",
        "run 12 has a schedule's key 'schedule:5:2025-01-01T00:03:00+00:00' but no tick that started it",
    ]


def attempt(attempt_id: int, start: float | None, end: float | None, *, run_id: int | None = None, **gate) -> dict:
    return {
        "id": attempt_id,
        "run_id": run_id or attempt_id,
        "status": "in_progress" if end is None else "completed",
        "started_at": None if start is None else at(start),
        "finished_at": None if end is None else at(end),
        **{"gate": "", "gate_max": 0, "rate_gate": "", "rate_limit": 0, "rate_per": 0.0, **gate},
    }


def test_a_gate_at_its_max_passes_and_a_place_freed_at_the_instant_it_is_taken_is_free():
    limit = {"gate": "c:acct-1", "gate_max": 2}
    rows = [attempt(1, 0, 10, **limit), attempt(2, 1, 5, **limit), attempt(3, 5, None, **limit)]
    rows.append(attempt(4, None, None, **limit) | {"status": "scheduled"})  # not claimed: holds nothing
    assert gate_violations(rows) == []


def test_a_gate_over_its_max_is_caught():
    limit = {"gate": "c:acct-1", "gate_max": 2}
    rows = [attempt(1, 0, 10, **limit), attempt(2, 1, 5, **limit), attempt(3, 4, None, **limit)]
    assert gate_violations(rows) == [
        "gate c:acct-1: 3 attempts in progress at 2025-01-01T00:00:04+00:00 (max 2): [1, 2, 3]"
    ]


def test_a_singleton_counts_runs_not_attempts():
    key = {"gate": "s:tests.Sync:acct-1", "gate_max": 1}
    one_run = [attempt(1, 0, 2, run_id=7, **key), attempt(2, 2, 4, run_id=7, **key)]
    assert gate_violations(one_run) == []
    two_runs = [*one_run, attempt(3, 3, 5, run_id=8, **key)]
    assert gate_violations(two_runs) == [
        "gate s:tests.Sync:acct-1: 2 runs in progress at 2025-01-01T00:00:03+00:00 (max 1): [7, 8]"
    ]


def test_a_rate_over_its_limit_in_one_window_is_caught():
    rate = {"rate_gate": "r:api", "rate_limit": 2, "rate_per": 10.0}
    within = [attempt(1, 0, 1, **rate), attempt(2, 5, 6, **rate), attempt(3, 10, 11, **rate)]
    assert gate_violations(within) == []  # the start at 0 left the window as 10 began
    over = [*within, attempt(4, 12, 13, **rate)]
    assert gate_violations(over) == ["rate r:api: 3 starts within 10s up to 2025-01-01T00:00:12+00:00 (limit 2)"]


def signal(signal_id: int, consumed_by: int | None, *, run_id: int = 1, name: str = "go") -> dict:
    return {
        "id": signal_id,
        "run_id": run_id,
        "name": name,
        "consumed_at": at(signal_id) if consumed_by else None,
        "consumed_by_id": consumed_by,
    }


def holder(step_id: int, signal_id: int | None, *, step_name: str = "hold", run_id: int = 1) -> dict:
    return {"id": step_id, "run_id": run_id, "step_name": step_name, "signal_id": signal_id}


def received(count: int, name: str = "go") -> list[dict]:
    return [{"run_id": 1, "name": name}] * count


def test_signals_consumed_once_and_carried_to_a_reattempt_pass():
    signals = [signal(1, 10), signal(2, None)]
    steps = [holder(10, 1), holder(11, 1)]  # 11 is a reattempt of the same step: it carries the signal
    assert signal_violations(signals, steps, received(2)) == []


def test_a_signal_consumed_by_two_steps_is_caught():
    steps = [holder(10, 1), holder(20, 1, step_name="later")]
    assert signal_violations([signal(1, 10)], steps, received(1)) == [
        "run 1 signal 1 'go': held by attempts of [(1, 'hold'), (1, 'later')], consumed twice"
    ]


def test_a_step_consuming_two_signals_and_a_signal_held_but_pending_are_caught():
    signals = [signal(1, 10), signal(2, 10), signal(3, None)]
    steps = [holder(10, 1), holder(30, 3, step_name="other")]
    assert signal_violations(signals, steps, received(3)) == [
        "step 10 consumed 2 signals",
        "run 1 signal 2 'go': its consumer 10 holds signal 1",
        "run 1 signal 3 'go': not consumed, yet attempts [30] hold it",
    ]


def test_a_signal_stored_twice_for_one_delivery_is_caught():
    assert signal_violations([signal(1, None), signal(2, None)], [], received(1)) == [
        "run 1 signal 'go': 2 stored, 1 signal_received events"
    ]


def test_a_failure_its_policy_skipped_closes_with_its_step_failed_and_its_skipped_once_each():
    run, steps, events = finished_run(1, steps=1)
    steps[0].update(status="failed", outcome="skipped")
    events[1]["event"] = "step_failed"
    events.insert(2, {**events[1], "id": 777, "event": "skipped"})
    assert check((run, steps, events)) == []
    events.append({**events[2], "id": 778})
    assert check((run, steps, events)) == [
        "run 1 s0#1 (failed, outcome skipped): closing events {'step_failed': 1, 'skipped': 2}, "
        "expected {'step_failed': 1, 'skipped': 1}"
    ]
