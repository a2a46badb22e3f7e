"""The run page's headline sentence (pgflow_dashboard.why): why a run stands where it does and
what to do next, from plain facts, one case per kind of stuck."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgflow_dashboard.why import cause_class, doing, member_error, reads_output, why

NOW = datetime(2025, 3, 4, 10, 16, tzinfo=UTC)  # a Tuesday


def _at(hours: int, minutes: int = 0) -> datetime:
    return datetime(2025, 3, 4, hours, minutes, tzinfo=UTC)


def _running(**step: object) -> dict[str, object]:
    return {"status": "running", "open_step": {"step_name": "charge", "queue": "mail", **step}, "live_queues": {}}


def test_a_signal_wait_names_the_signal_its_deadline_and_what_then():
    facts = _running(
        status="waiting",
        wait_for="payment",
        on_timeout="cancel",
        created_at=_at(10),
        waiting_since=_at(10, 2),
        deadline_at=_at(10, 2) + timedelta(days=1),
    )
    assert (
        why(facts, now=NOW)
        == "waiting for signal 'payment' since 10:02, times out at 10:02 on Wednesday (then: cancel)"
    )
    facts["open_step"]["deadline_at"] = None  # type: ignore[index]
    assert why(facts, now=NOW) == "waiting for signal 'payment' since 10:02, with no deadline (send it to go on)"


def test_a_due_step_names_the_missing_worker_and_the_command_to_start_one():
    facts = _running(status="scheduled", scheduled_at=NOW - timedelta(seconds=27))
    assert why(facts, now=NOW) == (
        "step charge queued 27.0 s: no live worker serves queue 'mail'; start `pgflow_worker --queues mail`"
    )
    facts["paused_queues"] = ["mail"]
    assert (
        why(facts, now=NOW) == "step charge queued 27.0 s: queue 'mail' is paused; resume the queue on the Queues page"
    )


def test_a_sleeping_step_and_a_throttled_one():
    sleeping = _running(status="scheduled", scheduled_at=NOW + timedelta(days=2, hours=23))
    assert why(sleeping, now=NOW) == "step charge is due at 09:16 on Friday (in 2 d 23 h): sleeping until then"
    held = _running(
        status="scheduled",
        scheduled_at=NOW - timedelta(minutes=3),
        held=True,
        held_by=["concurrency limit 2 for key 'acme'"],
    )
    assert why(held, now=NOW) == (
        "step charge throttled 3 min: held by concurrency limit 2 for key 'acme'; it runs when there is room"
    )


def test_a_parent_waits_for_its_children():
    facts = _running(status="waiting", created_at=_at(9), batch={"total": 12}, children={"total": 12, "ended": 9})
    assert why(facts, now=NOW) == "step charge is waiting for 12 child runs (9 ended)"


def test_paused_and_cancelled_by_a_policy_name_the_policy_and_the_error():
    error = {
        "step_name": "charge",
        "attempt": 2,
        "error_class": "shop.errors.PaymentDeclined",
        "error_message": "card declined\nmore",
        "outcome": "paused",
    }
    paused = {"status": "paused", "paused_at": _at(9, 12), "last_error": error}
    assert why(paused, now=NOW) == (
        "paused since 09:12: step charge (attempt 2) failed with PaymentDeclined: card declined (policy: pause); "
        "resume after fixing the cause"
    )
    cancelled = {"status": "cancelled", "finished_at": _at(8), "last_error": {**error, "outcome": "cancelled"}}
    assert why(cancelled, now=NOW) == (
        "cancelled at 08:00 by its policy: step charge (attempt 2) failed with PaymentDeclined: card declined "
        "(policy: cancel)"
    )
    by_hand = {"status": "paused", "paused_at": _at(9), "paused_reason": "paused by user:ada"}
    assert why(by_hand, now=NOW) == "paused since 09:00: paused by user:ada; resume to go on"


def test_a_failed_fan_out_says_the_members_own_error_not_fan_out_failed():
    error = {
        "step_name": "notify_vendors",
        "attempt": 1,
        "error_class": "pgflow.exceptions.FanOutFailed",
        "error_message": "1 of 2 jobs failed (batch 7)",
        "outcome": "paused",
    }
    text = (
        "vendor 13's inbox refuses mail : Traceback (most recent call last):\n"
        '  File "shop/tasks.py", line 9, in notify\n    raise ValueError("vendor 13\'s inbox refuses mail")\n'
        "ValueError: vendor 13's inbox refuses mail\n"
    )
    error_class, message = member_error(text)
    assert (error_class, message) == ("ValueError", "vendor 13's inbox refuses mail")
    member = {"position": 1, "func": "shop.tasks.notify", "error_class": error_class, "error_message": message}
    said = why({"status": "paused", "paused_at": _at(9), "last_error": error, "member_error": member}, now=NOW)
    assert said == (
        "paused since 09:00: step notify_vendors (attempt 1) fan-out failed: 1 of 2 jobs failed (batch 7); the first, "
        "job 1 (shop.tasks.notify), failed with ValueError: vendor 13's inbox refuses mail (policy: pause); "
        "resume after fixing the cause"
    )
    # The run list's badge and insights' stuck groups name the member's class, too.
    assert cause_class(error, member) == "ValueError"
    assert cause_class(error, None) == "FanOutFailed"  # no member read: what was recorded
    assert cause_class(error, {**member, "error_class": None}) == "FanOutFailed"
    paused = {"status": "paused", "last_error": error, "member_error": member}
    assert doing(paused, now=NOW) == ("paused", "paused: ValueError")


def test_a_members_error_text_without_a_traceback():
    assert member_error("child run #4 was cancelled") == (None, "child run #4 was cancelled")
    assert member_error("could not be handed to django-q2: OSError: refused : Traceback") == ("OSError", "refused")
    assert member_error(None) == (None, "")


def test_the_steps_that_read_a_steps_output():
    sources = {
        "two": 'def two(self):\n    return self.outputs["one"]["n"] + 1\n',
        "three": "def three(self):\n    return self.outputs.get( 'one')\n",
        "four": 'def four(self):\n    return self.outputs["onerous"]\n',
    }
    assert reads_output("one", sources) == ["two", "three"]
    assert reads_output("two", sources) == []


def test_the_run_lists_badge_says_what_the_run_is_doing():
    sleeping = _running(status="scheduled", scheduled_at=NOW + timedelta(days=2, hours=23))
    assert doing(sleeping, now=NOW) == ("scheduled", "due in 2d 23h")
    held = _running(status="scheduled", scheduled_at=NOW, held=True, held_by=["concurrency limit 2 for key 'acme'"])
    assert doing(held, now=NOW) == ("throttled", "throttled: concurrency limit 2 for key 'acme'")
    assert doing(_running(status="scheduled", scheduled_at=NOW), now=NOW) == ("queued", "no worker on mail")
    signal = _running(status="waiting", wait_for="payment", created_at=NOW)
    assert doing(signal, now=NOW) == ("waiting", "waiting for signal 'payment'")
    error = {"error_class": "shop.errors.PaymentDeclined", "step_name": "charge", "attempt": 1}
    assert doing({"status": "paused", "last_error": error}, now=NOW) == ("paused", "paused: PaymentDeclined")
    assert doing({"status": "finished"}, now=NOW) == ("finished", "finished")
