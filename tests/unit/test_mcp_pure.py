"""The MCP server's pure parts: redaction, explain_run's sentences, the REDACT setting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgflow.conf import DEFAULTS, validate
from pgflow_dashboard.mcp.explain import explain, span
from pgflow_dashboard.mcp.redact import MASK, redact, redact_text, secret_values

NOW = datetime(2025, 3, 4, 10, 16, tzinfo=UTC)  # a Tuesday


def test_redact_masks_matching_keys_at_any_depth_and_keeps_the_rest():
    value = {
        "plan": "pro",
        "Card_Number": "4242",
        "nested": [{"db-password": "x", "ok": 1}, ("token", 2)],
        "deep": {"a": {"b": {"API_KEY": "k"}}},
        3: "int key",
    }
    assert redact(value, DEFAULTS["REDACT"]) == {
        "plan": "pro",
        "Card_Number": MASK,
        "nested": [{"db-password": MASK, "ok": 1}, ["token", 2]],
        "deep": {"a": {"b": {"API_KEY": MASK}}},
        3: "int key",
    }
    assert value["Card_Number"] == "4242"  # the input is not changed
    assert redact("password", ["password"]) == "password"  # values are never matched, only keys
    assert redact({"password": 1}, []) == {"password": 1}


def test_redact_masks_secrets_in_text_after_their_key_in_urls_and_where_known():
    keys = DEFAULTS["REDACT"]
    assert redact_text("login failed: password=hunter2, user=ada", keys) == f"login failed: password={MASK}, user=ada"
    assert redact_text("""got {'api_key': 'sk_live_1', "Token": "t0k", 'n': 1}""", keys) == (
        f"""got {{'api_key': {MASK}, "Token": {MASK}, 'n': 1}}"""
    )
    assert redact_text("RuntimeError: db-password: s3cr3t", keys) == f"RuntimeError: db-password: {MASK}"
    assert redact_text("cannot reach postgres://app:pw0rd@db:5432/x", keys) == (
        f"cannot reach postgres://app:{MASK}@db:5432/x"
    )
    # A known secret value is masked wherever it appears, even with no key in front of it.
    assert redact_text("the card 4242 4242 was refused for ada", keys, {"4242 4242", "ada"}) == (
        f"the card {MASK} was refused for ada"  # "ada" is shorter than MIN_SECRET: ordinary words stay
    )
    assert redact_text("step charge (attempt 1) failed with RuntimeError: boom", keys) == (
        "step charge (attempt 1) failed with RuntimeError: boom"
    )
    assert secret_values({"plan": "pro", "profile": {"password": "hunter2", "card": 4242424242424242}}, keys) == {
        "hunter2",
        "4242424242424242",
    }
    # In structured answers, every string is redacted as text, at any depth.
    answer = {"events": [{"details": {"reason": "step b #1 failed: RuntimeError: hunter2 rejected"}}]}
    assert redact(answer, keys, {"hunter2"}) == {
        "events": [{"details": {"reason": f"step b #1 failed: RuntimeError: {MASK} rejected"}}]
    }


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"REDACT": "password"}, "PGFLOW['REDACT'] must be a list of key names"),
        ({"REDACT": ["password", ""]}, "PGFLOW['REDACT'] must be a list of key names"),
        ({"REDACT": [1]}, "PGFLOW['REDACT'] must be a list of key names"),
    ],
)
def test_redact_setting_is_validated(raw, problem):
    assert any(problem in message for message in validate(raw))


def test_redact_setting_accepts_a_list_of_names():
    assert validate({"REDACT": ["ssn", "iban"]}) == []


def _at(hours: int, minutes: int = 0) -> datetime:
    return datetime(2025, 3, 4, hours, minutes, tzinfo=UTC)


def test_explain_a_step_queued_with_no_live_worker():
    facts = {
        "status": "running",
        "open_step": {
            "step_name": "send",
            "status": "scheduled",
            "queue": "mail",
            "scheduled_at": NOW - timedelta(minutes=14),
        },
        "live_queues": {},
    }
    assert explain(facts, now=NOW) == [
        "step send queued 14 min: no live worker serves queue 'mail'; start `pgflow_worker --queues mail`"
    ]
    facts["live_queues"] = {"mail": 2}
    assert explain(facts, now=NOW) == [
        "step send queued 14 min on queue 'mail', which 2 live workers serve (they may be busy)"
    ]


def test_explain_a_signal_wait_with_its_deadline():
    facts = {
        "status": "running",
        "open_step": {
            "step_name": "charge",
            "status": "waiting",
            "wait_for": "payment_received",
            "on_timeout": "cancel",
            "created_at": _at(10, 1),
            "waiting_since": _at(10, 2),
            "deadline_at": _at(10, 2) + timedelta(days=7),
            "queue": "workflows",
            "scheduled_at": _at(10, 1),
            "batch": None,
        },
    }
    assert explain(facts, now=NOW) == [
        "waiting for signal 'payment_received' since 10:02, times out at 2025-03-11 10:02 (then: cancel)"
    ]
    facts["open_step"]["deadline_at"] = _at(10, 2) + timedelta(days=1)
    assert explain(facts, now=NOW)[0].endswith("times out at 10:02 on Wednesday (then: cancel)")


def test_explain_a_run_paused_by_its_policy():
    facts = {
        "status": "paused",
        "paused_at": _at(9, 12),
        "paused_reason": "whatever",
        "last_error": {
            "step_name": "charge",
            "attempt": 2,
            "error_class": "shop.errors.PaymentDeclined",
            "error_message": "card declined\nmore lines",
            "outcome": "paused",
        },
    }
    assert explain(facts, now=NOW)[0] == (
        "paused since 09:12: step charge (attempt 2) failed with PaymentDeclined: card declined (policy: pause); "
        "resume after fixing the cause"
    )


def test_explain_a_finished_run_names_where_its_time_went():
    facts = {
        "status": "finished",
        "created_at": NOW - timedelta(seconds=3.2),
        "finished_at": NOW,
        "phases": {"waited": 0.0, "queued": 2.9, "ran": 0.3, "waiting": 0.0},
    }
    assert explain(facts, now=NOW) == ["finished in 3.2 s; most time queued (2.9 s)"]


def test_explain_a_cancelled_run_and_a_lost_lease():
    cancelled = {"status": "cancelled", "finished_at": _at(8), "end_reason": "cancelled by user:ada"}
    assert explain(cancelled, now=NOW) == ["cancelled at 08:00: cancelled by user:ada"]
    running = {
        "status": "running",
        "open_step": {
            "step_name": "nap",
            "status": "in_progress",
            "worker": "w1",
            "started_at": _at(10),
            "lease_expires_at": _at(10, 1),
        },
    }
    assert explain(running, now=NOW) == [
        "step nap running for 16 min on worker w1, whose lease ran out at 10:01 (the sweep runs it again)"
    ]


def test_explain_a_parent_waiting_on_its_children_and_a_rerun():
    waiting = {
        "step_name": "spread",
        "status": "waiting",
        "created_at": _at(9),
        "waiting_since": _at(9, 1),
        "batch": {"total": 3, "succeeded": 1, "failed": 0},
        "children": {"total": 3, "ended": 1},
    }
    assert explain({"status": "running", "open_step": waiting}, now=NOW) == [
        "step spread is waiting for 3 child runs (1 ended)"
    ]
    tasks = {**waiting, "children": None}  # a batch of django-q2 tasks keeps its own sentence
    assert explain({"status": "running", "open_step": tasks}, now=NOW) == [
        "step spread waits for its fan-out batch: 1 of 3 succeeded, 0 failed"
    ]
    rerun = {
        "status": "finished",
        "created_at": _at(10),
        "finished_at": _at(10, 1),
        "rerun_of": {"run_id": 41, "step_name": "charge"},
    }
    assert explain(rerun, now=NOW) == ["finished in 1 min", "re-run of #41 from step charge"]


def test_span_reads_like_speech():
    assert [span(s) for s in (0.25, 59.9, 60, 3600, 3660, 86400 + 7200)] == [
        "0.2 s",
        "59.9 s",
        "1 min",
        "1 h",
        "1 h 1 min",
        "1 d 2 h",
    ]
