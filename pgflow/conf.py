"""pgflow's settings: read lazily from ``settings.PGFLOW``, defaults in one place.

``pgflow_settings.LEASE`` reads the current Django settings each time, so tests that
override ``PGFLOW`` see their values. ``validate()`` lists what is wrong; the system check
(``pgflow.E001`` …) reports it at start-up.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from .core import approvalmail, archiving
from .core.alerting import rule_problems
from .core.definitions import QUEUE_RULE, valid_queue

DEFAULTS: dict[str, Any] = {
    "QUEUE": "workflows",  # default queue of step attempts
    "RETENTION": timedelta(days=30),  # finished/cancelled runs older than this are purged; None keeps them
    # Where retention writes runs before it purges them (pgflow.archive): None, or
    # {"STORAGE": a STORAGES alias, "PREFIX": "pgflow-archive/", "KEEP": "all" or "failed"}.
    "ARCHIVE": None,
    "ERROR_BACKTRACE_LINES": 50,
    "LEASE": timedelta(seconds=60),  # an attempt whose worker stops heartbeating is re-run after this
    "MAX_LOST_ATTEMPTS": 3,  # a step that loses its worker this many times in a row pauses the run
    "ERROR_REPORTER": None,  # dotted path of callable(error, context: dict)
    "BACKTRACE_CLEANER": None,  # dotted path of callable(frames) -> the frames error_backtrace keeps
    "MAX_INPUT_BYTES": 1_048_576,  # a start() input (as JSON) larger than this is refused
    # The plain start runs as a prepared statement (psycopg's, on the protocol): False behind a
    # transaction-mode pooler that keeps no prepared statements (PgBouncer before 1.21, or
    # max_prepared_statements = 0). A start that meets such a pooler turns it off by itself.
    "PREPARE_START": True,
    # An autocommit start() commits without waiting for the disk, so a worker is woken at once,
    # then waits for that commit's flush (and a synchronous standby) before it returns: start()
    # is as durable when it returns, and its body may begin before it does. False: the start's
    # commit waits for the flush before any worker sees it.
    "WAKE_BEFORE_FLUSH": True,
    # An idle worker offers a slot, and an autocommit start() hands its first attempt straight
    # to it: the worker runs the body from the notification, with no claim of its own
    # (pgflow.store.offers). False: every attempt waits for a worker's claim.
    "HAND_OFF": True,
    "HEARTBEAT_INTERVAL": None,  # seconds between heartbeats; None = a third of LEASE
    "POLL_INTERVAL": timedelta(seconds=5),  # fallback poll when no NOTIFY arrives
    # The worker LISTENs for NOTIFYs on its claim connection. False: it polls every
    # POLL_INTERVAL instead and keeps no session state (no LISTEN, no prepared statement, its
    # settings and the sweep's lock per transaction): a worker behind a transaction-mode pooler.
    "NOTIFY": True,
    "SWEEP_INTERVAL": timedelta(seconds=10),
    "SHUTDOWN_GRACE": timedelta(seconds=30),  # how long SIGTERM lets running bodies finish
    "FAN_OUT_GRACE": timedelta(minutes=5),  # a finished batch whose callback is lost is resolved after this
    # Mail the approvers when an approval opens (pgflow/approval_mail.py): None, or
    # {"BASE_URL": "https://ops.example.com", "FROM_EMAIL": None, "SUBJECT_PREFIX": "[pgflow] "}.
    "APPROVAL_EMAIL": None,
    # Whether the MCP server's decide_approval tool may decide, as the token's user (audited).
    "MCP_MAY_DECIDE": False,
    # Keys masked at any depth in what the MCP server answers (matched case-insensitively, as substrings).
    "REDACT": ["password", "secret", "token", "api_key", "card"],
    # Who may read /metrics: clients from these addresses or networks, or any client sending
    # "Authorization: Bearer <METRICS_TOKEN>" when a token is set.
    "METRICS_ALLOWED_IPS": ["127.0.0.1", "::1"],
    # Reverse proxies (addresses or networks) whose X-Forwarded-For / Forwarded / X-Real-IP
    # /metrics believes. A request carrying one of those headers from any other address is
    # not let in by address (a proxy on the same host would make every client 127.0.0.1).
    "METRICS_TRUSTED_PROXIES": [],
    "METRICS_TOKEN": None,
    "METRICS_CACHE": timedelta(seconds=5),  # how long /metrics reuses its database gauges
    "ALERTS": [],  # alert rules (pgflow.core.alerting), synced to the admin's rules by name
    # Total time one alert notice may take to send (connect and the whole answer); a target
    # past it has failed and is tried again later. Targets are sent side by side.
    "ALERT_DELIVERY_DEADLINE": timedelta(seconds=10),
    # The Django database alias pgflow keeps its tables in and writes through (pgflow/db.py);
    # another than "default" needs pgflow.db.Router in DATABASE_ROUTERS.
    "DATABASE": "default",
    # A Django database alias (a streaming replica) for the run list, the insights and the
    # /metrics gauges; None reads everything from DATABASE (pgflow/readdb.py).
    "READ_DATABASE": None,
    # The worker's stream and file log handlers write from one thread of its own, so step
    # threads that log do not queue on a handler's lock (pgflow/runtime/logwriter.py).
    "LOG_WRITER": True,
    # Tenants (pgflow/tenants.py): dotted path (or callable) returning the current tenant's key
    # (a string, or None) when start() is called; stored on the run as run.tenant.
    "TENANT": None,
    # Dotted path (or callable) of callable(tenant) -> a context manager the worker enters
    # around each body, condition and wait method of a run that has a tenant.
    "TENANT_CONTEXT": None,
    # Dotted path (or callable) of callable(user) -> None (every tenant) or the set of tenant
    # keys whose runs that staff user sees in the dashboard and through MCP.
    "TENANT_VISIBLE": None,
}

_DURATIONS = (
    "LEASE",
    "POLL_INTERVAL",
    "SWEEP_INTERVAL",
    "SHUTDOWN_GRACE",
    "FAN_OUT_GRACE",
    "METRICS_CACHE",
    "ALERT_DELIVERY_DEADLINE",
)
# Durations counted in days or minutes: a bare number reads as that unit but would mean
# seconds ("RETENTION": 30 would purge every run half a minute after it ends), so only a
# timedelta is accepted. The others are seconds-long, and a number of seconds reads right.
_TIMEDELTA_ONLY = {"RETENTION": "days=30", "FAN_OUT_GRACE": "minutes=5"}


class _Settings:
    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"unknown pgflow setting {name!r} (one of {', '.join(DEFAULTS)})")
        return _user().get(name, DEFAULTS[name])

    def seconds(self, name: str) -> float:
        """A duration setting in seconds."""
        value = getattr(self, name)
        return value.total_seconds() if isinstance(value, timedelta) else float(value)

    @property
    def heartbeat_seconds(self) -> float:
        interval = self.HEARTBEAT_INTERVAL
        if interval is None:
            return max(self.seconds("LEASE") / 3, 0.05)
        return interval.total_seconds() if isinstance(interval, timedelta) else float(interval)

    def error_reporter(self) -> Callable[[BaseException, dict[str, Any]], Any] | None:
        path = self.ERROR_REPORTER
        if path is None:
            return None
        return path if callable(path) else import_string(path)

    def capture_options(self) -> dict[str, Any]:
        """What ``pgflow.core.errors.capture`` takes from the settings."""
        return {"backtrace_lines": self.ERROR_BACKTRACE_LINES, "cleaner": self.backtrace_cleaner()}

    def backtrace_cleaner(self) -> Callable[[list[Any]], list[Any]] | None:
        """The BACKTRACE_CLEANER callable; None for the default rule (pgflow.core.errors.clean).

        Asked on the error path, so a path that does not import (check pgflow.E001 names
        it) is logged and the default rule applies, rather than losing the step's error.
        """
        path = self.BACKTRACE_CLEANER
        if path is None or callable(path):
            return path
        try:
            return import_string(path)
        except ImportError:
            logging.getLogger("pgflow").exception(
                "BACKTRACE_CLEANER %r does not import; using the default rule",
                path,
                extra={"action": "backtrace_cleaner_failed"},
            )
            return None


def _user() -> dict[str, Any]:
    value = getattr(settings, "PGFLOW", None)
    return value if isinstance(value, dict) else {}


pgflow_settings = _Settings()


def validate(raw: object) -> list[str]:
    """Every problem with a ``PGFLOW`` value, as messages naming what is accepted."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        return [f"PGFLOW must be a dict, got {type(raw).__name__}"]
    problems = []
    for key in raw:
        if key not in DEFAULTS:
            problems.append(f"unknown key {key!r} in PGFLOW (accepted: {', '.join(DEFAULTS)})")
    for key in _DURATIONS:
        if key in raw and key not in _TIMEDELTA_ONLY and not _positive_duration(raw[key]):
            problems.append(f"PGFLOW[{key!r}] must be a positive timedelta or number of seconds, got {raw[key]!r}")
    for key, example in _TIMEDELTA_ONLY.items():
        value = raw.get(key)
        nullable = key == "RETENTION"
        if key not in raw or (nullable and value is None) or (isinstance(value, timedelta) and value > timedelta(0)):
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            problems.append(
                f"PGFLOW[{key!r}] must be a timedelta, got the bare number {value!r}, which would mean "
                f"{value!r} seconds; write timedelta({example}) or the length you mean"
            )
        else:
            problems.append(
                f"PGFLOW[{key!r}] must be a positive timedelta{' or None' if nullable else ''}, got {value!r}"
            )
    if "HEARTBEAT_INTERVAL" in raw and raw["HEARTBEAT_INTERVAL"] is not None:
        if not _positive_duration(raw["HEARTBEAT_INTERVAL"]):
            problems.append(
                "PGFLOW['HEARTBEAT_INTERVAL'] must be a positive timedelta, number of seconds or None, "
                f"got {raw['HEARTBEAT_INTERVAL']!r}"
            )
    for key in ("PREPARE_START", "NOTIFY", "WAKE_BEFORE_FLUSH", "HAND_OFF", "LOG_WRITER", "MCP_MAY_DECIDE"):
        if key in raw and not isinstance(raw[key], bool):
            problems.append(f"PGFLOW[{key!r}] must be True or False, got {raw[key]!r}")
    for key in ("ERROR_BACKTRACE_LINES", "MAX_LOST_ATTEMPTS", "MAX_INPUT_BYTES"):
        if key in raw and not (type(raw[key]) is int and raw[key] > 0):
            problems.append(f"PGFLOW[{key!r}] must be a positive whole number, got {raw[key]!r}")
    if "QUEUE" in raw and not valid_queue(raw["QUEUE"]):
        problems.append(f"PGFLOW['QUEUE'] must be {QUEUE_RULE}, got {raw['QUEUE']!r}")
    beat, lease = raw.get("HEARTBEAT_INTERVAL"), raw.get("LEASE", DEFAULTS["LEASE"])
    if _positive_duration(beat) and _positive_duration(lease) and _seconds(beat) >= _seconds(lease):
        problems.append(
            f"PGFLOW['HEARTBEAT_INTERVAL'] ({_seconds(beat):g}s) must be shorter than "
            f"PGFLOW['LEASE'] ({_seconds(lease):g}s), or every long step loses its lease"
        )
    for key in ("ERROR_REPORTER", "BACKTRACE_CLEANER", "TENANT", "TENANT_CONTEXT", "TENANT_VISIBLE"):
        problem = _callable_problem(key, raw.get(key))
        if problem:
            problems.append(problem)
    if "REDACT" in raw and not (
        isinstance(raw["REDACT"], list | tuple) and all(isinstance(key, str) and key.strip() for key in raw["REDACT"])
    ):
        problems.append(
            f"PGFLOW['REDACT'] must be a list of key names (non-empty strings), "
            f"e.g. ['password', 'token'], got {raw['REDACT']!r}"
        )
    problems.extend(_observability_problems(raw))
    problems.extend(_read_database_problems(raw))
    return problems


def _read_database_problems(raw: dict[str, Any]) -> list[str]:
    databases = getattr(settings, "DATABASES", {})
    aliases = ", ".join(repr(name) for name in databases)
    problems = []
    alias = raw.get("DATABASE", "default")
    if not (isinstance(alias, str) and alias in databases):
        problems.append(f"PGFLOW['DATABASE'] must be the alias of a database in DATABASES ({aliases}), got {alias!r}")
    alias = raw.get("READ_DATABASE")
    if alias is not None and not (isinstance(alias, str) and alias in databases):
        problems.append(
            f"PGFLOW['READ_DATABASE'] must be None or the alias of a database in DATABASES ({aliases}), got {alias!r}"
        )
    return problems


def _observability_problems(raw: dict[str, Any]) -> list[str]:
    problems = []
    for key in ("METRICS_ALLOWED_IPS", "METRICS_TRUSTED_PROXIES"):
        allowed = raw.get(key, [])
        if not isinstance(allowed, list | tuple):
            problems.append(
                f"PGFLOW[{key!r}] must be a list of addresses or networks, e.g. "
                f"['127.0.0.1', '10.0.0.0/8'], got {allowed!r}"
            )
            continue
        for entry in allowed:
            try:
                if not isinstance(entry, str):
                    raise TypeError(entry)  # ip_network takes an int too (5 is 0.0.0.5)
                ipaddress.ip_network(entry, strict=False)
            except (TypeError, ValueError):
                problems.append(
                    f"PGFLOW[{key!r}] holds {entry!r}, which is not an address or "
                    f"network (e.g. '127.0.0.1', '10.0.0.0/8')"
                )
    token = raw.get("METRICS_TOKEN")
    if token is not None and not (isinstance(token, str) and len(token) >= 16):
        problems.append("PGFLOW['METRICS_TOKEN'] must be None or a string of at least 16 characters")
    alerts = raw.get("ALERTS", [])
    if not isinstance(alerts, list | tuple):
        problems.append(f"PGFLOW['ALERTS'] must be a list of rule dicts, got {type(alerts).__name__}")
    else:
        for index, rule in enumerate(alerts):
            problems.extend(f"PGFLOW['ALERTS'][{index}]: {problem}" for problem in rule_problems(rule))
    problems.extend(archiving.problems(raw.get("ARCHIVE")))
    problems.extend(approvalmail.problems(raw.get("APPROVAL_EMAIL")))
    return problems


def _callable_problem(key: str, value: object) -> str | None:
    if value is None or callable(value):
        return None
    if not isinstance(value, str):
        return f"PGFLOW[{key!r}] must be None, a callable or the dotted path of one, got {value!r}"
    try:
        found = import_string(value)
    except (ImportError, TypeError, ValueError) as exc:
        return f"PGFLOW[{key!r}] must be None, a callable or the dotted path of one, got {value!r} ({exc})"
    if not callable(found):
        return (
            f"PGFLOW[{key!r}] must be None, a callable or the dotted path of one, got {value!r} "
            f"(a {type(found).__name__}, not a callable)"
        )
    return None


def _positive_duration(value: object) -> bool:
    if isinstance(value, timedelta):
        return value > timedelta(0)
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _seconds(value: Any) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)
