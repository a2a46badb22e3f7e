"""The pure parts of observability: an attempt's phases, an alert's decision and backoff,
the webhook signature."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta

from pgflow.core import alerting, histogram, phases
from pgflow.observability import alerts
from pgflow.observability.metrics import BUCKETS

T = datetime(2026, 1, 1, tzinfo=UTC)


def test_phases_of_an_attempt_and_of_one_woken_by_its_signal():
    plain = phases.of_attempt(
        created=T,
        scheduled=T + timedelta(seconds=5),
        started=T + timedelta(seconds=7),
        waiting_since=None,
        finished=T + timedelta(seconds=10),
    )
    assert plain == {"waited": 5.0, "throttled": None, "queued": 2.0, "ran": 3.0, "waiting": None}
    woken = phases.of_attempt(
        created=T,
        scheduled=T + timedelta(seconds=60),
        started=T + timedelta(seconds=61),
        waiting_since=T + timedelta(seconds=1),
        finished=T + timedelta(seconds=62),
    )
    assert woken == {"waited": 1.0, "throttled": None, "queued": 1.0, "ran": 1.0, "waiting": 59.0}
    throttled = phases.of_attempt(
        created=T,
        scheduled=T + timedelta(seconds=5),
        throttled_until=T + timedelta(seconds=35),
        started=T + timedelta(seconds=36),
        waiting_since=None,
        finished=T + timedelta(seconds=40),
    )
    assert throttled == {"waited": 5.0, "throttled": 30.0, "queued": 1.0, "ran": 4.0, "waiting": None}
    let_through_at_once = phases.of_attempt(
        created=T,
        scheduled=T,
        throttled_until=T,
        started=T + timedelta(seconds=2),
        waiting_since=None,
        finished=T + timedelta(seconds=3),
    )
    assert let_through_at_once == {"waited": 0.0, "throttled": 0.0, "queued": 2.0, "ran": 1.0, "waiting": None}


def test_every_alert_kind_has_its_measure_and_every_measure_its_kind():
    # A kind without a measure would pass the rule check and fail only when the sweep reads it.
    assert list(alerts.MEASURES) == list(alerting.ALERT_KINDS)


def test_a_phase_p95_rule_accepts_every_phase_of_an_attempt():
    for phase in ("waited", "throttled", "queued", "ran", "waiting"):
        assert alerting.rule_problems({"name": "x", "kind": "phase_p95", "phase": phase, "threshold": 1}) == []
    assert alerting.PHASES == phases.PHASES


def test_decide_fires_once_resolves_and_waits_out_the_cooldown():
    assert alerting.decide(holds=True, open_since=None, last_fired=None, cooldown=60, now=T) == "fire"
    assert alerting.decide(holds=True, open_since=T, last_fired=T, cooldown=60, now=T) is None
    assert alerting.decide(holds=False, open_since=T, last_fired=T, cooldown=60, now=T) == "resolve"
    assert (
        alerting.decide(holds=True, open_since=None, last_fired=T, cooldown=60, now=T + timedelta(seconds=59)) is None
    )
    assert (
        alerting.decide(holds=True, open_since=None, last_fired=T, cooldown=60, now=T + timedelta(seconds=60)) == "fire"
    )


def test_retry_delay_doubles_up_to_an_hour():
    assert [alerting.retry_delay(n) for n in (1, 2, 3, 10)] == [30.0, 60.0, 120.0, 3600.0]


def test_signature_is_hmac_sha256_of_timestamp_dot_body():
    expected = hmac.new(b"k", b"1700000000.{}", hashlib.sha256).hexdigest()
    assert alerting.signature("k", 1700000000, b"{}") == f"sha256={expected}"


def test_parse_fills_defaults_and_takes_timedeltas():
    rule = alerting.parse({"name": "q", "kind": "phase_p95", "phase": "queued", "threshold": timedelta(seconds=30)})
    assert rule.params == {"phase": "queued", "threshold": 30.0, "window": 3600.0, "workflow_class": None, "step": None}
    assert rule.cooldown == alerting.DEFAULT_COOLDOWN


def test_metric_buckets_are_edges_of_the_insights_log_scale_buckets():
    for edge in BUCKETS:
        assert (
            histogram.bounds(histogram.bucket(edge))[0] == edge
            or abs(histogram.bounds(histogram.bucket(edge))[0] - edge) < edge * 1e-9
        )
