"""Alert rules: their shape, checked once with messages naming what is accepted, the
fire/resolve decision with its cooldown, delivery backoff, and the webhook signature.

A rule is a dict, in ``PGFLOW["ALERTS"]`` or stored by the admin (durations as seconds)::

    {"name": "checkout queued", "kind": "phase_p95", "phase": "queued", "threshold": 30,
     "window": timedelta(hours=1), "workflow_class": "shop.flows.Checkout", "step": "charge",
     "targets": ["mail_admins", {"webhook": "https://…", "secret": "…"}, {"callable": "app.alerts.page"}],
     "cooldown": timedelta(minutes=30)}

Pure: no Django, no database, no clock reads.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .. import search
from . import phases

PHASES = phases.PHASES  # a phase_p95 rule's phase: any phase of an attempt
# kind: (its parameters, the required ones); each has its measure in pgflow.observability.alerts
ALERT_KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "phase_p95": (("phase", "threshold", "window", "workflow_class", "step"), ("phase", "threshold")),
    "runs_paused": (("count", "workflow_class"), ()),
    "steps_overdue": (("count", "after", "queue"), ()),
    "waits_past_deadline": (("count",), ()),
    "queue_without_worker": (("queue", "after"), ()),
    "failure_rate": (("percent", "window", "workflow_class", "step", "min_attempts"), ("percent",)),
    # The runs a search matches (pgflow.search), written out or a saved view's by name; its
    # threshold is a count of runs (the rule fires above it), not a duration.
    "runs_matching": (("query", "view", "threshold"), ()),
    # Approval steps (pgflow.Approval) waiting longer than `after` for a decision: a reminder,
    # or an escalation with a longer `after` and other targets.
    "approvals_waiting": (("count", "after", "workflow_class", "step"), ()),
}
COUNT_THRESHOLD = ("runs_matching",)  # the kinds whose threshold is a count, 0 or more
DURATION_PARAMS = ("threshold", "window", "after")
DEFAULTS: dict[str, Any] = {"window": 3600.0, "after": 300.0, "count": 0, "min_attempts": 1}
COMMON = ("name", "kind", "targets", "cooldown", "enabled")
DEFAULT_COOLDOWN = 1800.0  # seconds after a firing before the rule may fire again
MAX_DELIVERY_ATTEMPTS = 10  # a target still failing after this many tries is given up (and logged)


@dataclass(frozen=True, kw_only=True)
class Rule:
    name: str
    kind: str
    params: dict[str, Any]  # every parameter of the kind, durations in seconds, defaults filled in
    targets: tuple[Any, ...]
    cooldown: float  # seconds
    enabled: bool = True


def _seconds(value: Any) -> float | None:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def target_problem(target: Any) -> str | None:
    if target == "mail_admins":
        return None
    if isinstance(target, dict) and set(target) <= {"webhook", "secret"} and "webhook" in target:
        url, secret = target["webhook"], target.get("secret")
        if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
            return f"a webhook target's URL must start with http:// or https://, got {url!r}"
        if not (isinstance(secret, str) and secret):
            return "a webhook target needs a 'secret' (a non-empty string) to sign its body with"
        return None
    if isinstance(target, dict) and set(target) == {"callable"} and isinstance(target["callable"], str):
        return None
    return (
        f"a target must be 'mail_admins', {{'webhook': url, 'secret': str}} or "
        f"{{'callable': 'dotted.path'}}, got {target!r}"
    )


def rule_problems(raw: Any) -> list[str]:
    """Every problem with one rule dict, as messages naming what is accepted."""
    if not isinstance(raw, dict):
        return [f"a rule must be a dict with 'name' and 'kind', got {type(raw).__name__}"]
    problems = []
    name, kind = raw.get("name"), raw.get("kind")
    if not (isinstance(name, str) and name.strip() and len(name) <= 200):
        problems.append(f"'name' must be a non-empty string of at most 200 characters, got {name!r}")
    if kind not in ALERT_KINDS:
        return [*problems, f"'kind' must be one of {', '.join(ALERT_KINDS)}, got {kind!r}"]
    accepted, required = ALERT_KINDS[kind]
    for key in raw:
        if key not in accepted and key not in COMMON:
            problems.append(f"unknown key {key!r} for kind {kind!r} (accepted: {', '.join((*accepted, *COMMON))})")
    for key in required:
        if raw.get(key) is None:
            problems.append(f"kind {kind!r} needs {key!r}")
    if kind == "phase_p95" and raw.get("phase") is not None and raw["phase"] not in PHASES:
        problems.append(f"'phase' must be one of {', '.join(PHASES)}, got {raw['phase']!r}")
    if kind in COUNT_THRESHOLD:
        problems.extend(_search_problems(raw))
    for key in DURATION_PARAMS:
        if kind in COUNT_THRESHOLD and key == "threshold":
            continue
        if raw.get(key) is not None and not ((_seconds(raw[key]) or 0) > 0):
            problems.append(f"{key!r} must be a positive timedelta or number of seconds, got {raw[key]!r}")
    for key in ("count", "min_attempts"):
        if raw.get(key) is not None and not (type(raw[key]) is int and raw[key] >= 0):
            problems.append(f"{key!r} must be a whole number, 0 or more, got {raw[key]!r}")
    percent = raw.get("percent")
    if percent is not None and not (_seconds(percent) is not None and 0 <= float(percent) <= 100):
        problems.append(f"'percent' must be a number from 0 to 100, got {percent!r}")
    for key in ("workflow_class", "step", "queue"):
        if raw.get(key) is not None and not (isinstance(raw[key], str) and raw[key]):
            problems.append(f"{key!r} must be a non-empty string or None, got {raw[key]!r}")
    cooldown = _seconds(raw["cooldown"]) if raw.get("cooldown") is not None else 0.0
    if cooldown is None or cooldown < 0:
        problems.append(f"'cooldown' must be a timedelta or number of seconds, 0 or more, got {raw['cooldown']!r}")
    targets = raw.get("targets", [])
    if not isinstance(targets, list | tuple):
        problems.append(f"'targets' must be a list, got {targets!r}")
    else:
        problems.extend(problem for problem in map(target_problem, targets) if problem)
    return problems


def _search_problems(raw: dict[str, Any]) -> list[str]:
    """A runs_matching rule: a query the search language reads, or a saved view's name (one
    of them), and a whole-number threshold."""
    query, view, threshold = raw.get("query"), raw.get("view"), raw.get("threshold")
    problems = []
    if (query is None) == (view is None):
        problems.append(
            "kind 'runs_matching' needs either 'query' (a run search, e.g. \"attr.plan:gold status:paused\") "
            "or 'view' (a saved view's name), not both"
        )
    if query is not None:
        if not (isinstance(query, str) and query.strip()):
            problems.append(f"'query' must be a non-empty search, got {query!r}")
        else:
            try:
                search.parse(query)
            except search.SearchError as exc:
                problems.append(f"'query' cannot be read: {exc}")
    if view is not None and not (isinstance(view, str) and view.strip()):
        problems.append(f"'view' must be a saved view's name, got {view!r}")
    if threshold is not None and not (type(threshold) is int and threshold >= 0):
        problems.append(f"'threshold' must be a whole number of runs, 0 or more, got {threshold!r}")
    return problems


def parse(raw: dict[str, Any]) -> Rule:
    """A checked rule dict as a Rule; raises ValueError naming every problem."""
    problems = rule_problems(raw)
    if problems:
        raise ValueError("; ".join(problems))
    accepted, _ = ALERT_KINDS[raw["kind"]]
    params = {key: raw.get(key, DEFAULTS.get(key)) for key in accepted}
    if raw["kind"] in COUNT_THRESHOLD:
        params["threshold"] = raw.get("threshold") or 0
    for key in DURATION_PARAMS:
        if raw["kind"] in COUNT_THRESHOLD and key == "threshold":
            continue
        if params.get(key) is not None:
            params[key] = _seconds(params[key])
    cooldown = raw.get("cooldown")
    return Rule(
        name=raw["name"],
        kind=raw["kind"],
        params=params,
        targets=tuple(raw.get("targets", ())),
        cooldown=DEFAULT_COOLDOWN if cooldown is None else float(_seconds(cooldown) or 0),
        enabled=bool(raw.get("enabled", True)),
    )


def decide(
    *, holds: bool, open_since: datetime | None, last_fired: datetime | None, cooldown: float, now: datetime
) -> str | None:
    """``"fire"``, ``"resolve"`` or None. A rule fires when its condition holds and no alert
    of it is open, unless it fired less than ``cooldown`` seconds ago; an open alert
    resolves when the condition stops holding."""
    if open_since is not None:
        return None if holds else "resolve"
    if not holds:
        return None
    if last_fired is not None and (now - last_fired).total_seconds() < cooldown:
        return None
    return "fire"


def retry_delay(attempts: int) -> float:
    """Seconds before the next try of a delivery that failed ``attempts`` times: 30 s, doubling, at most an hour."""
    return float(min(30 * 2 ** max(attempts - 1, 0), 3600))


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Pgflow-Signature`` of a webhook: HMAC-SHA256 of ``"<timestamp>.<body>"``, hex."""
    digest = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"
