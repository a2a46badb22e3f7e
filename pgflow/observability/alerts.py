"""Alerts: the sweep checks each rule against the rollup and live counts, records a
firing or a resolution as an ``Alert`` row, and delivers it to the rule's targets.

Evaluation runs in the sweep's housekeeping (one worker at a time). Delivery never holds
the sweep up: each notice is an ``AlertDelivery`` row sent by a background thread, and a
failed send is tried again by a later sweep after a backoff (``pgflow.core.alerting``),
up to MAX_DELIVERY_ATTEMPTS. A rule whose figure cannot be read, or a target that fails,
is logged and never stops the other rules or targets. A muted rule still records its
alerts; it just sends nothing until ``muted_until``.

Each send has a total deadline, ``PGFLOW["ALERT_DELIVERY_DEADLINE"]`` (10 s), and the sends
of one pass run side by side in a bounded pool (SEND_THREADS), so a slow target never
delays another. A socket timeout bounds each read, not the request (a receiver answering a
byte every few seconds never trips it), so a webhook's connection is shut by a timer at its
deadline; a callable or ``mail_admins`` cannot be stopped, so one past its deadline is
recorded as failed and left to finish in its thread.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import socket
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.core.mail import mail_admins
from django.db import connections
from django.utils import timezone
from django.utils.module_loading import import_string

from .. import backlog, db, rollup, search
from ..conf import pgflow_settings
from ..core import alerting, filing, histogram
from ..db import connection
from ..exceptions import WorkflowNotFound
from ..models import Alert, AlertDelivery, AlertRule, SavedView, Step, Worker
from ..registry import resolve
from ..searching import runs_matching

logger = logging.getLogger("pgflow")

SEND_THREADS = 8  # targets sent to at once by one pass; the others wait for a free thread
BATCH = 100  # deliveries one pass takes
LEASE_MARGIN = 60.0  # seconds a taken delivery stays leased past the pass's longest possible run
_sending = threading.Lock()


def sync_declared(at: datetime) -> None:
    """Make the rules of PGFLOW["ALERTS"] rows (by name); a settings rule gone from them is disabled."""
    declared = {}
    for raw in pgflow_settings.ALERTS:
        rule = alerting.parse(raw)
        declared[rule.name] = rule
        fields = {
            "origin": AlertRule.Origin.SETTINGS,
            "kind": rule.kind,
            "params": rule.params,
            "targets": list(rule.targets),
            "cooldown": timedelta(seconds=rule.cooldown),
            "enabled": rule.enabled,
        }
        AlertRule.objects.update_or_create(
            name=rule.name,
            defaults=fields,
            create_defaults={**fields, "created_at": at},
        )
    (
        AlertRule.objects.filter(origin=AlertRule.Origin.SETTINGS, enabled=True)
        .exclude(name__in=declared)
        .update(enabled=False)
    )


def run(at: datetime) -> int:
    """The sweep's step: evaluate every rule, then send what is due in the background.
    Returns how many alerts fired or resolved."""
    try:
        sync_declared(at)
    except Exception:
        logger.exception("alerts: PGFLOW['ALERTS'] could not be synced", extra={"action": "alert_error"})
    changed = evaluate(at)
    if AlertDelivery.objects.filter(next_at__lte=at).exists():
        threading.Thread(target=_deliver_in_thread, name="pgflow-alerts", daemon=True).start()
    return changed


def evaluate(at: datetime) -> int:
    changed = 0
    for rule in AlertRule.objects.filter(enabled=True).order_by("pk"):
        try:
            changed += _evaluate_one(rule, at)
        except Exception:  # one broken rule never stops the others
            logger.exception(
                "alerts: rule %r could not be evaluated", rule.name, extra={"action": "alert_error", "rule": rule.name}
            )
    return changed


def _evaluate_one(rule: AlertRule, at: datetime) -> int:
    holds, value, message = measure(rule.kind, rule.params, at)
    with db.atomic():
        locked = AlertRule.objects.select_for_update().get(pk=rule.pk)
        open_alert = Alert.objects.filter(rule=locked, resolved_at__isnull=True).first()
        last = Alert.objects.filter(rule=locked).order_by("-fired_at").values_list("fired_at", flat=True).first()
        decision = alerting.decide(
            holds=holds,
            open_since=open_alert.fired_at if open_alert else None,
            last_fired=last,
            cooldown=locked.cooldown.total_seconds(),
            now=at,
        )
        if decision == "fire":
            alert = Alert.objects.create(rule=locked, fired_at=at, value=value, message=message)
            _queue(locked, alert, "fired", at)
        elif decision == "resolve" and open_alert is not None:
            open_alert.resolved_at = at
            open_alert.save(update_fields=["resolved_at"])
            _queue(locked, open_alert, "resolved", at)
    if decision:
        logger.warning(
            "alert %s: %s (%s)", decision, rule.name, message, extra={"action": f"alert_{decision}", "rule": rule.name}
        )
    return int(decision is not None)


def _queue(rule: AlertRule, alert: Alert, event: str, at: datetime) -> None:
    if rule.muted_until is not None and rule.muted_until > at:
        return
    AlertDelivery.objects.bulk_create(
        [AlertDelivery(alert=alert, event=event, target=target, next_at=at, created_at=at) for target in rule.targets]
    )


# --- what each kind measures -----------------------------------------------------------------


def measure(kind: str, params: dict[str, Any], at: datetime) -> tuple[bool, float | None, str]:
    """``(holds, value, message)`` for a rule of ``kind`` now."""
    return MEASURES[kind](params, at)


def _phase_p95(params: dict[str, Any], at: datetime) -> tuple[bool, float | None, str]:
    phase, window = params["phase"], params["window"]
    where = _scope(params)
    if phase == "waiting":
        merged = _waiting_histogram(params, at)
    else:
        counted = rollup.tally(at - timedelta(seconds=window), at, 3600)
        merged = {}
        for (path, step), tally in counted.steps.items():
            if _matches(params, path, step):
                histogram.merge(merged, getattr(tally, phase))
    (p95,) = histogram.quantiles(merged, [0.95])
    holds = p95 is not None and p95 > params["threshold"]
    shown = "no attempts" if p95 is None else f"{p95:.1f}s"
    return (
        holds,
        p95,
        (f"p95 of {phase} for {where} over the last {window:g}s is {shown} (threshold {params['threshold']:g}s)"),
    )


_WAITING_SQL = f"""
SELECT CASE WHEN s.scheduled_at > s.waiting_since THEN s.scheduled_at ELSE COALESCE(s.finished_at, %(now)s) END
       - s.waiting_since
FROM pgflow_step s JOIN pgflow_run r ON r.id = s.run_id
WHERE s.waiting_since IS NOT NULL AND COALESCE(s.finished_at, %(now)s) >= %(since)s
  AND {filing.filed_from("s.history_day", "day")}
  AND (%(path)s::text IS NULL OR r.workflow_class = %(path)s) AND (%(step)s::text IS NULL OR s.step_name = %(step)s)
"""


def _waiting_histogram(params: dict[str, Any], at: datetime) -> dict[int, int]:
    """Waits that ended in the window or are still going (the rollup does not hold waiting)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _WAITING_SQL,
            {
                "now": at,
                "since": at - timedelta(seconds=params["window"]),
                "day": filing.first_day(at - timedelta(seconds=params["window"])),  # the days before, left out
                "path": params.get("workflow_class"),
                "step": params.get("step"),
            },
        )
        return histogram.of(row[0].total_seconds() for row in cursor.fetchall())


def _failure_rate(params: dict[str, Any], at: datetime) -> tuple[bool, float | None, str]:
    counted = rollup.tally(at - timedelta(seconds=params["window"]), at, 3600)
    attempts = failures = 0
    for (path, step), tally in counted.steps.items():
        if _matches(params, path, step):
            attempts += tally.attempts
            failures += tally.failures
    rate = 100.0 * failures / attempts if attempts else None
    holds = rate is not None and attempts >= params["min_attempts"] and rate > params["percent"]
    return (
        holds,
        rate,
        (
            f"{failures} of {attempts} attempts of {_scope(params)} failed over the last "
            f"{params['window']:g}s (threshold {params['percent']:g} %)"
        ),
    )


def _count(sql: str, args: dict[str, Any]) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql, args)
        return int(cursor.fetchone()[0])


def _runs_paused(params: dict[str, Any], at: datetime) -> tuple[bool, float | None, str]:
    count = _count(
        "SELECT count(*) FROM pgflow_run WHERE status = 'paused' "
        "AND (%(path)s::text IS NULL OR workflow_class = %(path)s)",
        {"path": params.get("workflow_class")},
    )
    return count > params["count"], count, f"{count} runs of {_scope(params)} paused (more than {params['count']})"


def _steps_overdue(params: dict[str, Any], at: datetime) -> tuple[bool, float | None, str]:
    with connection.cursor() as cursor:
        named = params.get("queue")
        count = backlog.count_due_before(
            cursor, [named] if named else backlog.scheduled_queues(cursor), at - timedelta(seconds=params["after"])
        )
    return (
        count > params["count"],
        count,
        (f"{count} steps due for more than {params['after']:g}s and not claimed (more than {params['count']})"),
    )


def _waits_past_deadline(params: dict[str, Any], at: datetime) -> tuple[bool, float | None, str]:
    count = _count(
        # Open attempts are in the live partition only (pgflow.store.history).
        "SELECT count(*) FROM pgflow_step_live WHERE status = 'waiting' AND deadline_at <= %(now)s",
        {"now": at},
    )
    return count > params["count"], count, f"{count} signal waits past their deadline (more than {params['count']})"


def _queue_without_worker(params: dict[str, Any], at: datetime) -> tuple[bool, float | None, str]:
    served = {queue for names in Worker.objects.live(at).values_list("queues", flat=True) for queue in names or ()}
    with connection.cursor() as cursor:
        named = params.get("queue")
        unserved = [queue for queue in ([named] if named else backlog.scheduled_queues(cursor)) if queue not in served]
        orphaned = backlog.due_by(cursor, unserved, at - timedelta(seconds=params["after"]))
    return (
        bool(orphaned),
        len(orphaned),
        (
            f"queues with steps due for more than {params['after']:g}s and no live "
            f"worker: {', '.join(orphaned) or 'none'}"
        ),
    )


def _runs_matching(params: dict[str, Any], at: datetime) -> tuple[bool, float | None, str]:
    """The runs a search matches (the run list's, on its indexes), or a saved view's by name."""
    text, shown = params.get("query"), f"{params.get('query')!r}"
    if text is None:
        text = SavedView.objects.filter(name=params["view"]).values_list("query", flat=True).first()
        if text is None:
            return False, None, f"no saved view is named {params['view']!r}: nothing to count"
        shown = f"saved view {params['view']!r} ({text})"
    try:
        count = runs_matching(search.parse(text), now=at).count()
    except search.SearchError as exc:  # a saved view edited since, into a search that cannot be read
        return False, None, f"{shown} cannot be read: {exc}"
    threshold = params.get("threshold") or 0
    return count > threshold, count, f"{count} runs match {shown} (more than {threshold})"


def _approvals_waiting(params: dict[str, Any], at: datetime) -> tuple[bool, float | None, str]:
    """Approval steps waiting for a decision for longer than ``after`` (their class read once per step)."""
    waits = (
        Step.objects.live()
        .filter(status="waiting", batch__isnull=True, waiting_since__lte=at - timedelta(seconds=params["after"]))
        .values_list("run__workflow_class", "step_name", "run_id")
        .order_by("waiting_since", "id")
    )
    approval: dict[tuple[str, str], bool] = {}
    found = []
    for path, step, run_id in waits.iterator(chunk_size=1000):
        if (path, step) not in approval:
            try:
                definition = resolve(path).steps().get(step)
            except WorkflowNotFound:
                definition = None
            approval[(path, step)] = definition is not None and definition.approval is not None
        if approval[(path, step)] and _matches(params, path, step):
            found.append(f"{step} of run {run_id}")
    count = len(found)
    listed = f": {', '.join(found[:10])}{' …' if count > 10 else ''}" if found else ""
    return (
        count > params["count"],
        count,
        f"{count} approvals of {_scope(params)} waiting for a decision for more than {params['after']:g}s "
        f"(more than {params['count']}){listed}",
    )


# kind -> its measure: one for each of alerting.ALERT_KINDS (tests/unit/test_alerting.py checks it).
MEASURES = {
    "phase_p95": _phase_p95,
    "runs_paused": _runs_paused,
    "steps_overdue": _steps_overdue,
    "waits_past_deadline": _waits_past_deadline,
    "queue_without_worker": _queue_without_worker,
    "failure_rate": _failure_rate,
    "runs_matching": _runs_matching,
    "approvals_waiting": _approvals_waiting,
}


def _matches(params: dict[str, Any], path: str, step: str) -> bool:
    return params.get("workflow_class") in (None, path) and params.get("step") in (None, step)


def _scope(params: dict[str, Any]) -> str:
    path, step = params.get("workflow_class"), params.get("step")
    if path is None:
        return "every workflow" if step is None else f"step {step} of every workflow"
    return path if step is None else f"{path}.{step}"


# --- delivery -----------------------------------------------------------------------------------


def _deliver_in_thread() -> None:
    if not _sending.acquire(blocking=False):
        return  # this process is sending already; it picks these up too
    try:
        deliver_due()
    except Exception:
        logger.exception("alerts: delivery failed", extra={"action": "alert_delivery_error"})
    finally:
        _sending.release()
        connection.close()


def deliver_due(at: datetime | None = None) -> int:
    """Send every delivery due now, side by side, each within its deadline; returns how many were sent."""
    at = at or timezone.now()
    deadline = pgflow_settings.seconds("ALERT_DELIVERY_DEADLINE")
    with db.atomic():
        due = list(
            AlertDelivery.objects.select_for_update(skip_locked=True)
            .filter(next_at__lte=at)
            .select_related("alert__rule")
            .order_by("next_at")[:BATCH]
        )
        # Leased for as long as this pass may take (the pool's rounds of deadlines), so no
        # other process sends them meanwhile.
        rounds = math.ceil(len(due) / SEND_THREADS)
        lease = timedelta(seconds=rounds * deadline + LEASE_MARGIN)
        AlertDelivery.objects.filter(pk__in=[d.pk for d in due]).update(next_at=at + lease)
    if not due:
        return 0
    pool = ThreadPoolExecutor(max_workers=min(SEND_THREADS, len(due)), thread_name_prefix="pgflow-alert-send")
    started: dict[int, float] = {}
    pending: dict[Future[None], AlertDelivery] = {
        pool.submit(_send_in_pool, delivery, deadline, started): delivery for delivery in due
    }
    pool.shutdown(wait=False)  # a callable past its deadline finishes in its own thread
    sent = 0
    # A pass ends by this moment even if stuck callables hold every thread.
    give_up_at = time.monotonic() + rounds * (deadline + 1.0) + 1.0
    while pending:
        done, _ = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
        for future in done:
            delivery = pending.pop(future)
            error = future.exception()
            sent += _record(delivery, error)
        moment = time.monotonic()
        for future, delivery in list(pending.items()):
            begun = started.get(delivery.pk)
            # A webhook's own timer ends it at its deadline; this catches what cannot be stopped.
            if begun is not None and moment - begun > deadline + 1.0:
                problem = f"{_describe(delivery.target)} did not finish within {deadline:g}s"
            elif begun is None and moment > give_up_at:
                problem = "no sending thread came free (the others are stuck past their deadline)"
            else:
                continue
            del pending[future]
            future.cancel()
            _record(delivery, TimeoutError(problem))
    return sent


def _send_in_pool(delivery: AlertDelivery, deadline: float, started: dict[int, float]) -> None:
    started[delivery.pk] = time.monotonic()
    try:
        send(delivery.target, payload(delivery), deadline=deadline)
    finally:
        connections.close_all()  # a callable's queries opened this pool thread's own connection


def _record(delivery: AlertDelivery, error: BaseException | None) -> int:
    """Write one send's outcome on its row; 1 if it was delivered."""
    delivery.attempts += 1
    if error is None:
        delivery.next_at = None
        delivery.delivered_at = timezone.now()
    else:
        delivery.last_error = f"{type(error).__name__}: {error}"[:2000]
        give_up = delivery.attempts >= alerting.MAX_DELIVERY_ATTEMPTS
        delivery.next_at = (
            None if give_up else timezone.now() + timedelta(seconds=alerting.retry_delay(delivery.attempts))
        )
        logger.error(
            "alerts: delivering %s of %r to %s failed (try %d%s): %s",
            delivery.event,
            delivery.alert.rule.name,
            _describe(delivery.target),
            delivery.attempts,
            ", given up" if give_up else "",
            delivery.last_error,
            extra={"action": "alert_delivery_failed", "rule": delivery.alert.rule.name},
        )
    delivery.save(update_fields=["attempts", "next_at", "delivered_at", "last_error"])
    return int(error is None)


def payload(delivery: AlertDelivery) -> dict[str, Any]:
    alert, rule = delivery.alert, delivery.alert.rule
    return {
        "event": delivery.event,
        "alert_id": alert.pk,
        "rule": rule.name,
        "kind": rule.kind,
        "params": rule.params,
        "value": alert.value,
        "message": alert.message,
        "fired_at": alert.fired_at.isoformat(),
        "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
    }


def send(target: Any, body: dict[str, Any], *, deadline: float | None = None) -> None:
    """Deliver one notice; raises when the target failed. A webhook gets ``deadline`` seconds
    in all (``ALERT_DELIVERY_DEADLINE`` when None) to connect and answer."""
    if target == "mail_admins":
        word = "FIRING" if body["event"] == "fired" else "RESOLVED"
        mail_admins(
            f"[pgflow] {word}: {body['rule']}",
            f"{body['message']}\n\n{json.dumps(body, indent=2)}",
            fail_silently=False,
        )
    elif "webhook" in target:
        data = json.dumps(body, sort_keys=True).encode()
        stamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "pgflow-alerts",
            "X-Pgflow-Timestamp": str(stamp),
            "X-Pgflow-Signature": alerting.signature(target["secret"], stamp, data),
        }
        status = post(
            target["webhook"], data, headers, deadline=deadline or pgflow_settings.seconds("ALERT_DELIVERY_DEADLINE")
        )
        if not 200 <= status < 300:
            raise RuntimeError(f"the webhook answered {status}")
    else:
        import_string(target["callable"])(body)


def post(url: str, data: bytes, headers: dict[str, str], *, deadline: float) -> int:
    """POST ``data`` to ``url`` and return the answer's status, all within ``deadline``
    seconds: a timer shuts the socket then, whatever read it is in. Redirects are not
    followed (a 3xx is an answer, and not a 2xx)."""
    parts = urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname or "", parts.port, timeout=deadline)
    expired = threading.Event()

    def shut() -> None:
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the read blocked in the sending thread
            except OSError:
                pass

    timer = threading.Timer(deadline, shut)
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        if expired.is_set():
            raise TimeoutError
        target = parts.path or "/"
        conn.request("POST", f"{target}?{parts.query}" if parts.query else target, body=data, headers=headers)
        return conn.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        # The socket's own timeout (also the deadline) may fire before the timer's thread
        # is scheduled on a busy machine: either way the answer did not come in time.
        if expired.is_set() or isinstance(exc, TimeoutError):
            raise TimeoutError(f"{parts.netloc} sent no whole answer within {deadline:g}s") from None
        raise exc
    finally:
        timer.cancel()
        conn.close()


def _describe(target: Any) -> str:
    if isinstance(target, dict):
        return target.get("webhook") or target.get("callable") or str(target)
    return str(target)


# --- operator controls (the admin calls these) --------------------------------------------------


def acknowledge(alert_ids: list[int], *, actor: str, at: datetime) -> int:
    """Mark alerts as seen by ``actor``; an acknowledged alert stays open until its condition stops."""
    return Alert.objects.filter(pk__in=alert_ids, acknowledged_at__isnull=True).update(
        acknowledged_at=at, acknowledged_by=actor[:200]
    )


def mute(rule_ids: list[int], *, until: datetime | None) -> int:
    """Silence rules until ``until`` (None: unmute): their alerts are recorded, not sent."""
    return AlertRule.objects.filter(pk__in=rule_ids).update(muted_until=until)
