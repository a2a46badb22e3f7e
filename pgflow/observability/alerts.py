"""Alerts: the sweep checks each rule against the rollup and live counts, records a
firing or a resolution as an ``Alert`` row, and delivers it to the rule's targets.

Evaluation runs in the sweep's housekeeping (one worker at a time). Delivery never holds
the sweep up: each notice is an ``AlertDelivery`` row sent by a background thread, and a
failed send is tried again by a later sweep after a backoff (``pgflow.core.alerting``),
up to MAX_DELIVERY_ATTEMPTS. A rule whose figure cannot be read, or a target that fails,
is logged and never stops the other rules or targets. A muted rule still records its
alerts; it just sends nothing until ``muted_until``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from datetime import datetime, timedelta
from typing import Any

from django.core.mail import mail_admins
from django.db import connection, transaction
from django.utils.module_loading import import_string

from .. import rollup
from ..conf import pgflow_settings
from ..core import alerting, histogram
from ..models import Alert, AlertDelivery, AlertRule, Worker

logger = logging.getLogger("pgflow")

WEBHOOK_TIMEOUT = 10.0  # seconds per webhook request
DELIVERY_LEASE = timedelta(minutes=2)  # a delivery being sent is not picked again before this
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
    with transaction.atomic():
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
    return _MEASURES[kind](params, at)


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


_WAITING_SQL = """
SELECT CASE WHEN s.scheduled_at > s.waiting_since THEN s.scheduled_at ELSE COALESCE(s.finished_at, %(now)s) END
       - s.waiting_since
FROM pgflow_step s JOIN pgflow_run r ON r.id = s.run_id
WHERE s.waiting_since IS NOT NULL AND COALESCE(s.finished_at, %(now)s) >= %(since)s
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
    count = _count(
        "SELECT count(*) FROM pgflow_step WHERE status = 'scheduled' AND scheduled_at < %(before)s "
        "AND (%(queue)s::text IS NULL OR queue = %(queue)s)",
        {"before": at - timedelta(seconds=params["after"]), "queue": params.get("queue")},
    )
    return (
        count > params["count"],
        count,
        (f"{count} steps due for more than {params['after']:g}s and not claimed (more than {params['count']})"),
    )


def _waits_past_deadline(params: dict[str, Any], at: datetime) -> tuple[bool, float | None, str]:
    count = _count("SELECT count(*) FROM pgflow_step WHERE status = 'waiting' AND deadline_at <= %(now)s", {"now": at})
    return count > params["count"], count, f"{count} signal waits past their deadline (more than {params['count']})"


def _queue_without_worker(params: dict[str, Any], at: datetime) -> tuple[bool, float | None, str]:
    served = {queue for queues in Worker.objects.live(at).values_list("queues", flat=True) for queue in queues or ()}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT queue FROM pgflow_step WHERE status = 'scheduled' AND scheduled_at <= %(due)s "
            "AND (%(queue)s::text IS NULL OR queue = %(queue)s)",
            {"due": at - timedelta(seconds=params["after"]), "queue": params.get("queue")},
        )
        orphaned = sorted(row[0] for row in cursor.fetchall() if row[0] not in served)
    return (
        bool(orphaned),
        len(orphaned),
        (
            f"queues with steps due for more than {params['after']:g}s and no live "
            f"worker: {', '.join(orphaned) or 'none'}"
        ),
    )


_MEASURES = {
    "phase_p95": _phase_p95,
    "runs_paused": _runs_paused,
    "steps_overdue": _steps_overdue,
    "waits_past_deadline": _waits_past_deadline,
    "queue_without_worker": _queue_without_worker,
    "failure_rate": _failure_rate,
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
    """Send every delivery due now; returns how many were sent."""
    from django.utils import timezone

    at = at or timezone.now()
    with transaction.atomic():
        due = list(
            AlertDelivery.objects.select_for_update(skip_locked=True)
            .filter(next_at__lte=at)
            .select_related("alert__rule")
            .order_by("next_at")[:100]
        )
        AlertDelivery.objects.filter(pk__in=[d.pk for d in due]).update(next_at=at + DELIVERY_LEASE)
    sent = 0
    for delivery in due:
        try:
            send(delivery.target, payload(delivery))
        except Exception as exc:  # noqa: BLE001 - a failing target is retried, never stops the others
            delivery.attempts += 1
            delivery.last_error = f"{type(exc).__name__}: {exc}"[:2000]
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
        else:
            delivery.attempts += 1
            delivery.next_at = None
            delivery.delivered_at = timezone.now()
            sent += 1
        delivery.save(update_fields=["attempts", "next_at", "delivered_at", "last_error"])
    return sent


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


def send(target: Any, body: dict[str, Any]) -> None:
    """Deliver one notice; raises when the target failed."""
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
        request = urllib.request.Request(  # noqa: S310 - an http(s) URL the admin configured
            target["webhook"],
            data=data,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "User-Agent": "pgflow-alerts",
                "X-Pgflow-Timestamp": str(stamp),
                "X-Pgflow-Signature": alerting.signature(target["secret"], stamp, data),
            },
        )
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT) as answer:  # noqa: S310 - the admin's URL
            if answer.status >= 300:
                raise RuntimeError(f"the webhook answered {answer.status}")
    else:
        import_string(target["callable"])(body)


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
