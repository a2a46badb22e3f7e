"""Alerts: each kind fires once while its condition holds, resolves when it stops, honours
its cooldown; deliveries are signed, retried, and a failing target never stops the others."""

from __future__ import annotations

import hmac
import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.db.models import F

import pgflow
from pgflow.core import alerting
from pgflow.models import Alert, AlertDelivery, AlertRule, Step
from pgflow.observability import alerts
from pgflow.runtime import presence, sweep
from pgflow.store import now
from pgflow.testing import run_workflow
from tests import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)

CALLED: list[dict] = []


def record(body: dict) -> None:
    CALLED.append(body)


def broken(body: dict) -> None:
    raise RuntimeError("pager is down")


def rules(settings, *declared: dict) -> None:
    settings.PGFLOW = {
        **settings.PGFLOW,
        "ALERTS": [
            {"targets": [{"callable": "tests.integration.test_alerts.record"}], "cooldown": 600, **rule}
            for rule in declared
        ],
    }


def states(name: str) -> list[tuple[bool, bool]]:
    """(fired, resolved) of each alert of the rule, oldest first."""
    return [
        (True, resolved is not None)
        for resolved in Alert.objects.filter(rule__name=name).order_by("fired_at").values_list("resolved_at", flat=True)
    ]


def check(at) -> int:
    alerts.sync_declared(at)
    return alerts.evaluate(at)


def test_runs_paused_fires_once_resolves_and_honours_its_cooldown(settings):
    rules(settings, {"name": "paused", "kind": "runs_paused", "count": 0})
    run = wf.ThreeSteps.start()
    t0 = now()
    assert check(t0) == 0 and states("paused") == []
    run.pause()
    assert check(t0 + timedelta(seconds=1)) == 1
    assert check(t0 + timedelta(seconds=2)) == 0, "fires once while the condition holds"
    assert states("paused") == [(True, False)]
    run.resume()
    assert check(t0 + timedelta(seconds=3)) == 1 and states("paused") == [(True, True)]
    run.pause()
    assert check(t0 + timedelta(seconds=60)) == 0, "within the cooldown (600 s) it does not fire again"
    assert check(t0 + timedelta(seconds=602)) == 1
    assert states("paused") == [(True, True), (True, False)]
    alert = Alert.objects.filter(rule__name="paused").latest("fired_at")
    assert alert.value == 1 and "1 runs of every workflow paused" in alert.message


def test_steps_overdue_and_queue_without_worker(settings):
    rules(
        settings,
        {"name": "overdue", "kind": "steps_overdue", "count": 0, "after": 60},
        {"name": "orphan", "kind": "queue_without_worker", "after": 60},
    )
    run = wf.ThreeSteps.start()
    t0 = now()
    assert check(t0 + timedelta(seconds=30)) == 0
    assert check(t0 + timedelta(seconds=61)) == 2
    assert states("overdue") == [(True, False)] and states("orphan") == [(True, False)]
    assert "workflows" in Alert.objects.get(rule__name="orphan").message
    presence.register(name="w1", queues=["workflows"], concurrency=1, at=t0 + timedelta(seconds=62))
    assert check(t0 + timedelta(seconds=62)) == 1 and states("orphan") == [(True, True)]
    run.cancel()
    assert check(t0 + timedelta(seconds=63)) == 1 and states("overdue") == [(True, True)]


def test_waits_past_deadline(settings):
    rules(settings, {"name": "deadline", "kind": "waits_past_deadline"})
    run = run_workflow(wf.WaitsForPayment.start())
    assert Step.objects.get(run=run, step_name="charge").status == "waiting"
    t0 = now()
    assert check(t0) == 0
    assert check(t0 + timedelta(hours=1, seconds=1)) == 1
    pgflow.signal(run, "payment", 10)
    assert check(t0 + timedelta(hours=1, seconds=2)) == 1 and states("deadline") == [(True, True)]


def test_failure_rate_over_a_window(settings):
    rules(
        settings,
        {
            "name": "failing",
            "kind": "failure_rate",
            "percent": 50,
            "window": 3600,
            "workflow_class": "tests.workflows.Failing",
        },
    )
    run_workflow(wf.ThreeSteps.start())
    run_workflow(wf.Failing.start())
    t0 = now()
    assert check(t0 + timedelta(seconds=1)) == 1
    assert Alert.objects.get(rule__name="failing").value == 100.0
    assert check(t0 + timedelta(hours=2)) == 1, "the failure left the window"
    assert states("failing") == [(True, True)]


def test_phase_p95_of_a_step(settings):
    rules(
        settings,
        {
            "name": "slow queue",
            "kind": "phase_p95",
            "phase": "queued",
            "threshold": 50,
            "workflow_class": "tests.workflows.ThreeSteps",
            "step": "one",
            "window": 3600,
        },
    )
    run = wf.ThreeSteps.start()
    Step.objects.filter(run=run).update(scheduled_at=now() - timedelta(seconds=100))  # due 100 s before the claim
    run_workflow(run)
    t0 = now()
    assert check(t0) == 1
    assert 90 < Alert.objects.get(rule__name="slow queue").value < 110
    assert check(t0 + timedelta(hours=2)) == 1 and states("slow queue") == [(True, True)]


def test_phase_p95_of_the_throttled_phase(settings):
    """A rule on the throttled phase (the time a limit held a due attempt) is accepted and fires."""
    rules(
        settings,
        {"name": "held", "kind": "phase_p95", "phase": "throttled", "threshold": 50, "step": "one", "window": 3600},
    )
    run = run_workflow(wf.ThreeSteps.start())
    # As the claim of a limited step records it: due 100 s before its start, let through 1 s before.
    Step.objects.filter(run=run, step_name="one").update(
        scheduled_at=F("started_at") - timedelta(seconds=100), throttled_until=F("started_at") - timedelta(seconds=1)
    )
    t0 = now()
    assert check(t0) == 1
    alert = Alert.objects.get(rule__name="held")
    assert 90 < alert.value < 110 and "p95 of throttled" in alert.message


def test_each_kind_is_checked_with_a_message_naming_what_is_accepted():
    assert alerting.rule_problems({"name": "x", "kind": "nope"}) == [
        "'kind' must be one of phase_p95, runs_paused, steps_overdue, waits_past_deadline, queue_without_worker, "
        "failure_rate, runs_matching, approvals_waiting, got 'nope'"
    ]
    problems = alerting.rule_problems(
        {"name": "x", "kind": "phase_p95", "phase": "slept", "threshold": -1, "targets": ["sms"]}
    )
    assert any("'phase' must be one of waited, throttled, queued, ran, waiting, got 'slept'" in p for p in problems)
    assert any("'threshold' must be a positive" in p for p in problems)
    assert any("a target must be 'mail_admins'" in p for p in problems)


class Receiver(BaseHTTPRequestHandler):
    secret = "hook-secret"
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        stamp = self.headers["X-Pgflow-Timestamp"]
        expected = "sha256=" + hmac.new(self.secret.encode(), f"{stamp}.".encode() + body, "sha256").hexdigest()
        ok = hmac.compare_digest(expected, self.headers["X-Pgflow-Signature"])
        if ok:
            Receiver.received.append(json.loads(body))
        self.send_response(200 if ok else 401)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_sweep_delivers_a_signed_webhook_and_a_failing_target_is_retried_without_stopping_others(settings):
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    CALLED.clear()
    Receiver.received.clear()
    settings.PGFLOW = {
        **settings.PGFLOW,
        "ALERTS": [
            {
                "name": "paused",
                "kind": "runs_paused",
                "targets": [
                    {"callable": "tests.integration.test_alerts.broken"},
                    {"webhook": url, "secret": "hook-secret"},
                    {"webhook": "http://127.0.0.1:9/refused", "secret": "x"},
                    {"callable": "tests.integration.test_alerts.record"},
                ],
            },
            {
                "name": "broken rule",
                "kind": "phase_p95",
                "phase": "ran",
                "threshold": 1,
                "workflow_class": "tests.workflows.ThreeSteps",
            },
        ],
    }
    wf.ThreeSteps.start().pause()
    try:
        counts = sweep.run(worker="test")
        assert counts["alerts"] == 1
        for thread in threading.enumerate():
            if thread.name == "pgflow-alerts":
                thread.join(30)
        assert [body["rule"] for body in Receiver.received] == ["paused"]
        assert Receiver.received[0]["event"] == "fired" and "paused" in Receiver.received[0]["message"]
        assert [body["event"] for body in CALLED] == ["fired"]
        failed = AlertDelivery.objects.filter(delivered_at__isnull=True).order_by("pk")
        assert [d.attempts for d in failed] == [1, 1] and all(d.next_at is not None for d in failed)
        assert "pager is down" in failed[0].last_error
        # A later sweep tries them again once their backoff passed; the delivered ones are not resent.
        later = failed[0].next_at + timedelta(seconds=1)
        assert alerts.deliver_due(later) == 0
        assert [d.attempts for d in AlertDelivery.objects.filter(delivered_at__isnull=True)] == [2, 2]
        assert len(Receiver.received) == 1 and len(CALLED) == 1
    finally:
        server.shutdown()


def test_a_muted_rule_records_its_alert_but_sends_nothing(settings):
    rules(settings, {"name": "paused", "kind": "runs_paused"})
    alerts.sync_declared(now())
    AlertRule.objects.filter(name="paused").update(muted_until=now() + timedelta(hours=1))
    wf.ThreeSteps.start().pause()
    assert check(now()) == 1
    assert AlertDelivery.objects.count() == 0


def test_the_admin_lists_alerts_acknowledges_them_and_checks_a_rule(settings, admin_client):
    rules(settings, {"name": "paused", "kind": "runs_paused"})
    wf.ThreeSteps.start().pause()
    assert check(now()) == 1
    alert = Alert.objects.get()
    page = admin_client.get("/admin/pgflow/alert/")
    assert page.status_code == 200 and b"runs of every workflow paused" in page.content
    answer = admin_client.post("/admin/pgflow/alert/", {"action": "acknowledge", "_selected_action": [alert.pk]})
    assert answer.status_code == 302
    alert.refresh_from_db()
    assert alert.acknowledged_at is not None and alert.acknowledged_by == "user:admin"
    bad = admin_client.post(
        "/admin/pgflow/alertrule/add/",
        {
            "name": "bad",
            "kind": "phase_p95",
            "params": '{"phase": "slept", "threshold": 5}',
            "targets": "[]",
            "cooldown": "00:30:00",
            "enabled": "on",
        },
    )
    assert (
        bad.status_code == 200
        and b"&#x27;phase&#x27; must be one of waited, throttled, queued, ran, waiting" in bad.content
    )
    good = admin_client.post(
        "/admin/pgflow/alertrule/add/",
        {
            "name": "slow",
            "kind": "phase_p95",
            "params": '{"phase": "ran", "threshold": 5}',
            "targets": '["mail_admins"]',
            "cooldown": "00:30:00",
            "enabled": "on",
        },
    )
    assert good.status_code == 302
    assert AlertRule.objects.get(name="slow").params["window"] == 3600.0


# --- who may act on alerts, and the webhook secret (issue 33, finding 10) ----------------------------

HOOK_SECRET = "whsec-do-not-show-9f8e7d"


def staff(username: str, *perms: str):
    from tests.dashboard_support import make_user

    return make_user(username, perms=perms)


def logged_in(user, *, csrf: bool = False):
    from django.test import Client

    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def webhook_rule() -> AlertRule:
    return AlertRule.objects.create(
        name="hooked",
        kind="runs_paused",
        params={"count": 0, "workflow_class": None},
        targets=["mail_admins", {"webhook": "https://hooks.example.com/a", "secret": HOOK_SECRET}],
        cooldown=timedelta(minutes=30),
        created_at=now(),
    )


def fired(rule: AlertRule) -> Alert:
    alert = Alert.objects.create(rule=rule, fired_at=now(), value=1, message="1 runs paused")
    AlertDelivery.objects.create(alert=alert, event="fired", target=rule.targets[1], next_at=None, created_at=now())
    return alert


def test_a_view_only_user_can_neither_mute_nor_acknowledge():
    rule = webhook_rule()
    alert = fired(rule)
    viewer = logged_in(staff("alert-viewer", "view_alert", "view_alertrule"))
    assert viewer.get("/admin/pgflow/alert/").status_code == 200
    for action in ("mute_rule", "acknowledge"):
        viewer.post("/admin/pgflow/alert/", {"action": action, "_selected_action": [alert.pk]})
    for action in ("mute_day", "mute_hour"):
        viewer.post("/admin/pgflow/alertrule/", {"action": action, "_selected_action": [rule.pk]})
    page = viewer.get("/admin/pgflow/alert/")
    assert b'value="mute_rule"' not in page.content and b'value="acknowledge"' not in page.content  # not offered
    rule.refresh_from_db()
    alert.refresh_from_db()
    assert rule.muted_until is None and alert.acknowledged_at is None

    # Each write with its change permission works.
    muter = logged_in(staff("alert-muter", "view_alert", "change_alertrule"))
    muter.post("/admin/pgflow/alert/", {"action": "mute_rule", "_selected_action": [alert.pk]})
    rule.refresh_from_db()
    assert rule.muted_until is not None
    acker = logged_in(staff("alert-acker", "view_alert", "change_alert"))
    acker.post("/admin/pgflow/alert/", {"action": "acknowledge", "_selected_action": [alert.pk]})
    alert.refresh_from_db()
    assert alert.acknowledged_by == "user:alert-acker"


def test_a_saved_webhook_secret_is_never_shown_and_is_kept_or_replaced_by_the_form():
    rule = webhook_rule()
    alert = fired(rule)
    viewer = logged_in(staff("rule-viewer", "view_alertrule", "view_alert", "view_alertdelivery"))
    for url in (f"/admin/pgflow/alertrule/{rule.pk}/change/", f"/admin/pgflow/alert/{alert.pk}/change/"):
        page = viewer.get(url)
        assert page.status_code == 200, url
        assert HOOK_SECRET.encode() not in page.content, url
        assert b"hooks.example.com/a" in page.content and b"(unchanged)" in page.content, url

    editor = logged_in(staff("rule-editor", "view_alertrule", "change_alertrule"))
    url = f"/admin/pgflow/alertrule/{rule.pk}/change/"
    page = editor.get(url)
    assert HOOK_SECRET.encode() not in page.content and b"(unchanged)" in page.content
    form = {
        "name": "hooked",
        "kind": "runs_paused",
        "params": '{"count": 0}',
        "cooldown": "00:30:00",
        "enabled": "on",
    }
    kept = '["mail_admins", {"webhook": "https://hooks.example.com/a", "secret": "(unchanged)"}]'
    assert editor.post(url, {**form, "targets": kept}).status_code == 302
    rule.refresh_from_db()
    assert rule.targets[1] == {"webhook": "https://hooks.example.com/a", "secret": HOOK_SECRET}

    moved = '[{"webhook": "https://elsewhere.example.com/", "secret": "(unchanged)"}]'
    refused = editor.post(url, {**form, "targets": moved})
    assert refused.status_code == 200
    assert b"has no saved secret to keep" in refused.content and HOOK_SECRET.encode() not in refused.content
    rule.refresh_from_db()
    assert rule.targets[1]["secret"] == HOOK_SECRET

    replaced = '[{"webhook": "https://hooks.example.com/a", "secret": "new-secret"}]'
    assert editor.post(url, {**form, "targets": replaced}).status_code == 302
    rule.refresh_from_db()
    assert rule.targets == [{"webhook": "https://hooks.example.com/a", "secret": "new-secret"}]


# --- a delivery's deadline, and one target never delays another (issue 33, finding 12) -----------


class Trickle(BaseHTTPRequestHandler):
    """Answers one byte of a valid answer every half second (~10 s in all): each read gets a
    byte well within any socket timeout. Records when pgflow let go of the connection."""

    closed_at: list[float] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        import time

        self.rfile.read(int(self.headers["Content-Length"]))
        try:
            for byte in b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n":
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.25)
        except OSError:
            pass
        finally:
            Trickle.closed_at.append(time.monotonic())

    def log_message(self, *args: object) -> None:
        pass


class Fast(BaseHTTPRequestHandler):
    status = 200
    received_at: list[float] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        import time

        self.rfile.read(int(self.headers["Content-Length"]))
        Fast.received_at.append(time.monotonic())
        self.send_response(self.status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class Silent(BaseHTTPRequestHandler):
    """Reads the request and never answers (until the test ends)."""

    release = threading.Event()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        Silent.release.wait(60)

    def log_message(self, *args: object) -> None:
        pass


def serve(handler: type[BaseHTTPRequestHandler]):
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/hook"


def deliveries_to(settings, *urls: str) -> list[AlertDelivery]:
    """One fired alert per URL, each of its own rule, the first URL's due first."""
    made = []
    for index, url in enumerate(urls):
        rule = AlertRule.objects.create(
            name=f"rule {index}",
            kind="runs_paused",
            params={"count": 0, "workflow_class": None},
            targets=[{"webhook": url, "secret": "s"}],
            cooldown=timedelta(minutes=30),
            created_at=now(),
        )
        alert = Alert.objects.create(rule=rule, fired_at=now(), value=1, message="paused")
        made.append(
            AlertDelivery.objects.create(
                alert=alert,
                event="fired",
                target=rule.targets[0],
                next_at=now() - timedelta(seconds=10 - index),
                created_at=now(),
            )
        )
    return made


def test_a_trickling_receiver_is_cut_at_the_deadline_and_never_delays_another_target(settings):
    settings.PGFLOW = {**settings.PGFLOW, "ALERT_DELIVERY_DEADLINE": 1}
    trickle, trickle_url = serve(Trickle)
    fast, fast_url = serve(Fast)
    Trickle.closed_at.clear()
    Fast.received_at.clear()
    Fast.status = 200
    try:
        slow_one, fast_one = deliveries_to(settings, trickle_url, fast_url)
        assert alerts.deliver_due() == 1
        slow_one.refresh_from_db()
        fast_one.refresh_from_db()
        assert fast_one.delivered_at is not None and fast_one.attempts == 1
        assert slow_one.delivered_at is None and slow_one.attempts == 1 and slow_one.next_at is not None
        assert "TimeoutError" in slow_one.last_error and "within 1s" in slow_one.last_error
        # The fast target was served while the trickling one was still being sent to.
        Silent.release.wait(0.5)  # let the trickle's handler notice the closed socket
        assert Fast.received_at[0] < Trickle.closed_at[0]
    finally:
        trickle.shutdown()
        fast.shutdown()


def test_a_non_2xx_answer_and_a_silence_past_the_deadline_count_as_failures(settings):
    settings.PGFLOW = {**settings.PGFLOW, "ALERT_DELIVERY_DEADLINE": 0.5}
    failing, failing_url = serve(Fast)
    silent, silent_url = serve(Silent)
    Fast.status = 503
    Silent.release.clear()
    try:
        answered, silence = deliveries_to(settings, failing_url, silent_url)
        assert alerts.deliver_due() == 0
        answered.refresh_from_db()
        silence.refresh_from_db()
        assert "the webhook answered 503" in answered.last_error
        assert "within 0.5s" in silence.last_error
        for delivery in (answered, silence):
            assert delivery.delivered_at is None and delivery.attempts == 1
            assert delivery.next_at is not None, "tried again after the backoff"
    finally:
        Fast.status = 200
        Silent.release.set()
        failing.shutdown()
        silent.shutdown()


def test_a_callable_past_the_deadline_is_recorded_as_failed_and_the_others_are_sent(settings):
    settings.PGFLOW = {**settings.PGFLOW, "ALERT_DELIVERY_DEADLINE": 0.5}
    CALLED.clear()
    Silent.release.clear()
    slow, quick = deliveries_to(settings, "http://unused.invalid/", "http://unused.invalid/")
    AlertDelivery.objects.filter(pk=slow.pk).update(target={"callable": "tests.integration.test_alerts.hang"})
    AlertDelivery.objects.filter(pk=quick.pk).update(target={"callable": "tests.integration.test_alerts.record"})
    try:
        assert alerts.deliver_due() == 1
    finally:
        Silent.release.set()
    slow.refresh_from_db()
    assert "did not finish within 0.5s" in slow.last_error and slow.next_at is not None
    assert [body["rule"] for body in CALLED] == ["rule 1"]


def hang(body: dict) -> None:
    Silent.release.wait(30)


# --- rules: one that truly fails, one removed from the setting ----------------------------------------


def test_a_rule_that_raises_never_stops_the_others(settings, caplog):
    # Stored before the good one, so it is evaluated first; its params lack the phase its
    # kind needs, so measuring it raises (KeyError), as a hand-edited row would.
    AlertRule.objects.create(
        name="raises", kind="phase_p95", params={}, targets=[], cooldown=timedelta(0), created_at=now()
    )
    with pytest.raises(KeyError):
        alerts.measure("phase_p95", {}, now())
    rules(settings, {"name": "paused", "kind": "runs_paused"})
    alerts.sync_declared(now())
    wf.ThreeSteps.start().pause()
    assert alerts.evaluate(now()) == 1
    assert states("paused") == [(True, False)] and states("raises") == []
    assert "rule 'raises' could not be evaluated" in caplog.text


def test_a_rule_removed_from_the_setting_is_disabled_and_declaring_it_again_enables_it(settings):
    rules(settings, {"name": "kept", "kind": "runs_paused"}, {"name": "removed", "kind": "runs_paused"})
    alerts.sync_declared(now())
    assert dict(AlertRule.objects.values_list("name", "enabled")) == {"kept": True, "removed": True}
    rules(settings, {"name": "kept", "kind": "runs_paused"})
    wf.ThreeSteps.start().pause()
    assert check(now()) == 1
    assert dict(AlertRule.objects.values_list("name", "enabled")) == {"kept": True, "removed": False}
    assert states("removed") == []
    rules(settings, {"name": "kept", "kind": "runs_paused"}, {"name": "removed", "kind": "runs_paused"})
    assert check(now()) == 1 and states("removed") == [(True, False)]
