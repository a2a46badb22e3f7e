"""Schedule arithmetic: when a schedule ticks, which due ticks start, and what overlap does.

Pure: plain values in, plain values out, ``now`` passed in. Every datetime given or
returned is aware; returned ticks are in UTC. Cron expressions are read by ``cronsim``,
which walks wall-clock time in the schedule's zone the way cron does across DST: on the
spring-forward day a tick inside the skipped hour fires once, at the first valid minute;
on the fall-back day a daily tick inside the repeated hour fires once (its first pass).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..exceptions import DefinitionError
from . import jsonvalue

OVERLAP = ("allow", "skip", "buffer_one", "cancel_previous")
# A tick this late is still on time, not missed: it starts even with catch_up=None. It
# covers a worker's sleep between checks and a burst of schedules due at once; it holds for
# every due tick, so a schedule shorter than the delay does not lose the older ones.
ON_TIME = timedelta(seconds=60)
MAX_COUNTED = 10_000  # missed ticks counted one by one; past this the walk jumps ahead
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, kw_only=True)
class Rule:
    """When a schedule ticks: a cron expression in a time zone, or a fixed interval.

    An interval ticks on multiples of ``every`` counted from the Unix epoch in UTC, so
    every worker computes the same ticks and ``every=timedelta(hours=1)`` ticks on the hour.
    """

    cron: str | None = None
    every: timedelta | None = None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise DefinitionError(ONE_RULE)
        zone(self.timezone)
        if self.cron is not None:
            check_cron(self.cron)
        if self.every is not None:
            check_every(self.every)

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment``, in UTC."""
        if self.every is not None:
            step = self.every.total_seconds()
            count = math.floor((moment - _EPOCH).total_seconds() / step) + 1
            tick = _EPOCH + timedelta(seconds=count * step)
            return tick if tick > moment else tick + self.every  # float rounding at a boundary
        assert self.cron is not None
        local = moment.astimezone(zone(self.timezone))
        return next(CronSim(self.cron, local)).astimezone(UTC)

    def upcoming(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` ticks after ``after``, in UTC."""
        ticks: list[datetime] = []
        moment = after
        for _ in range(count):
            moment = self.next_after(moment)
            ticks.append(moment)
        return ticks

    def describe(self) -> str:
        """The rule in words: "At 09:30 on Monday through Friday (Europe/Amsterdam)", "Every 15m"."""
        if self.every is not None:
            return f"Every {_span(self.every)}"
        assert self.cron is not None
        try:
            words = CronSim(self.cron, datetime.now(UTC)).explain()
        except Exception:  # noqa: BLE001 - explain() is best effort; the expression itself is valid
            words = self.cron
        return f"{words} ({self.timezone})"


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """A schedule declared on a workflow class: ``schedules = [pgflow.Schedule(...)]``.

    Wrong arguments raise :class:`~pgflow.DefinitionError` naming the field and what it accepts.
    """

    name: str
    cron: str | None = None
    every: timedelta | None = None
    timezone: str = "UTC"
    input: Mapping[str, Any] = field(default_factory=dict)
    overlap: str = "skip"
    catch_up: timedelta | None = None
    # The tenant its runs belong to (run.tenant, pgflow.tenants), whatever PGFLOW["TENANT"]
    # says where the worker starts them; None: as any start.
    tenant: str | None = None

    def __post_init__(self) -> None:
        found = problems(
            name=self.name,
            cron=self.cron,
            every=self.every,
            timezone=self.timezone,
            input=self.input,
            overlap=self.overlap,
            catch_up=self.catch_up,
            max_bytes=_input_limit(),
        )
        if "name" in found:
            raise DefinitionError(f"Schedule {found['name']}")
        if found:
            raise DefinitionError(f"Schedule {self.name!r}: {next(iter(found.values()))}")
        tenant = self.tenant
        if tenant is not None and not (isinstance(tenant, str) and 0 < len(tenant) <= TENANT_LIMIT):
            raise DefinitionError(
                f"Schedule {self.name!r}: tenant must be None or a tenant key (a non-empty string of at most "
                f"{TENANT_LIMIT} characters), got {tenant!r}"
            )

    @property
    def rule(self) -> Rule:
        return Rule(cron=self.cron, every=self.every, timezone=self.timezone)


# The longest ``every`` or ``catch_up``: ten years. A longer interval is no schedule, and one
# near timedelta's limit overflows the datetime arithmetic of the next tick.
MAX_SPAN = timedelta(days=3650)
NAME_LIMIT = 200  # the Schedule row's name column
CRON_LIMIT = 200  # the Schedule row's cron column
TENANT_LIMIT = 100  # the Schedule row's tenant column (and the run's)
ONE_RULE = "a schedule takes cron= or every=, exactly one of them"
FIELDS = ("name", "cron", "every", "timezone", "input", "overlap", "catch_up")


def problems(
    *,
    name: Any,
    cron: Any,
    every: Any,
    timezone: Any,
    input: Any,
    overlap: Any,
    catch_up: Any,
    max_bytes: int | None = None,
) -> dict[str | None, str]:
    """What is wrong with a schedule's fields, ``{field: message}`` (``None`` for cron and
    every given together or neither), in FIELDS order; empty when all are accepted. The one
    check of a declared ``pgflow.Schedule`` and of a schedule made in the admin. ``max_bytes``
    bounds the input as JSON (``PGFLOW["MAX_INPUT_BYTES"]``, which start() enforces)."""
    found: dict[str | None, str] = {}
    checks: list[tuple[str, Any]] = [
        ("name", lambda: check_name(name)),
        ("cron", lambda: cron is None or check_cron(cron)),
        ("every", lambda: every is None or check_every(every)),
        ("timezone", lambda: zone(timezone)),
        ("input", lambda: check_input(input, max_bytes=max_bytes)),
        ("overlap", lambda: check_overlap(overlap)),
        ("catch_up", lambda: check_catch_up(catch_up)),
    ]
    for where, check in checks:
        try:
            check()
        except DefinitionError as exc:
            found[where] = str(exc)
    if (cron is None) == (every is None) and "cron" not in found and "every" not in found:
        found[None] = ONE_RULE
    return found


def check_name(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > NAME_LIMIT:
        raise DefinitionError(f"name must be a non-empty string of at most {NAME_LIMIT} characters, got {value!r}")
    why = jsonvalue.text_problem(value)
    if why:
        raise DefinitionError(f"name {value!r} cannot be stored: {why}")
    return value


def check_every(value: Any) -> timedelta:
    if not isinstance(value, timedelta) or not timedelta(seconds=1) <= value <= MAX_SPAN:
        raise DefinitionError(
            f"every must be a timedelta of at least 1 second and at most {MAX_SPAN.days} days, got {value!r}"
        )
    return value


def check_input(value: Any, *, max_bytes: int | None = None) -> dict[str, Any]:
    """``value`` as a dict if it can be a run's input: a JSON object PostgreSQL can store,
    at most ``max_bytes`` as JSON."""
    if not isinstance(value, Mapping):
        raise DefinitionError(f"input must be a dict (JSON object), got {type(value).__name__}")
    try:
        text = jsonvalue.encode(dict(value), "input")
    except (TypeError, ValueError) as exc:
        raise DefinitionError(str(exc)) from None
    size = len(text.encode())
    if max_bytes is not None and size > max_bytes:
        raise DefinitionError(
            f"input is {size} bytes as JSON; at most {max_bytes} are accepted (PGFLOW['MAX_INPUT_BYTES'])"
        )
    return dict(value)


def _input_limit() -> int | None:
    """``PGFLOW["MAX_INPUT_BYTES"]`` where Django is configured: a declared schedule whose
    input start() would refuse is refused when it is declared."""
    from django.conf import settings  # lazy: this module is pure; only the declaration asks

    if not settings.configured:
        return None
    from ..conf import pgflow_settings  # facade: the declaration checks MAX_INPUT_BYTES, read at call time

    limit = pgflow_settings.MAX_INPUT_BYTES
    return int(limit) if limit else None


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; a DefinitionError naming the field otherwise."""
    try:
        if not isinstance(name, str) or not name:
            raise ValueError
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise DefinitionError(
            f"timezone must be an IANA time zone name such as 'UTC' or 'Europe/Amsterdam', got {name!r}"
        ) from None


def check_cron(expression: str) -> str:
    """``expression`` if cron can read it (five fields: minute hour day month weekday)."""
    if not isinstance(expression, str):
        raise DefinitionError(f"cron must be a string such as '0 3 * * *', got {type(expression).__name__}")
    if len(expression) > CRON_LIMIT:
        raise DefinitionError(f"cron must be at most {CRON_LIMIT} characters, got {len(expression)}")
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise DefinitionError(
            f"cron {expression!r} is not a valid cron expression ({exc}); expected five "
            f"fields, minute hour day-of-month month day-of-week, such as '0 3 * * *'"
        ) from None
    return expression


def check_overlap(value: str) -> str:
    if value not in OVERLAP:
        raise DefinitionError(f"overlap must be one of {', '.join(map(repr, OVERLAP))}, got {value!r}")
    return value


def check_catch_up(value: timedelta | None) -> timedelta | None:
    if value is not None and (not isinstance(value, timedelta) or not timedelta(0) <= value <= MAX_SPAN):
        raise DefinitionError(
            f"catch_up must be a non-negative timedelta of at most {MAX_SPAN.days} days, or None, got {value!r}"
        )
    return value


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What to do with a schedule's due ticks: ``start`` these, oldest first; ``missed``
    ticks (from ``first_missed`` to ``last_missed``) are skipped; ``next_tick`` is stored."""

    start: tuple[datetime, ...]
    missed: int
    first_missed: datetime | None
    last_missed: datetime | None
    next_tick: datetime


def plan(rule: Rule, *, next_tick: datetime, now: datetime, catch_up: timedelta | None, limit: int = 100) -> Plan:
    """Sort the ticks due by ``now``, from ``next_tick`` on, into started and missed.

    A tick starts when it is at most ``window(catch_up)`` late: ON_TIME (a minute), or
    ``catch_up`` when that is longer. Every such tick is on time, not only the latest: a
    busy worker that comes round 2 s late to a 1 s schedule starts both due ticks. Any older
    tick is missed. At most ``limit`` ticks start; the rest stay due (``next_tick`` is the
    first of them).
    """
    count = 0
    first_missed: datetime | None = None
    last_missed: datetime | None = None
    horizon = now - window(catch_up)  # nothing older than this starts
    tick = next_tick
    while tick < horizon:
        count += 1
        first_missed, last_missed = first_missed or tick, tick
        tick = rule.next_after(tick)
        if count >= MAX_COUNTED and tick < horizon:
            tick = rule.next_after(horizon - timedelta(microseconds=1))  # a long outage: stop counting
            break
    start: list[datetime] = []
    while tick <= now and len(start) < limit:
        start.append(tick)
        tick = rule.next_after(tick)
    return Plan(start=tuple(start), missed=count, first_missed=first_missed, last_missed=last_missed, next_tick=tick)


def window(catch_up: timedelta | None) -> timedelta:
    """How late a tick may be and still start: ON_TIME, or ``catch_up`` when longer."""
    return max(catch_up or timedelta(0), ON_TIME)


# What a tick does when the schedule's previous run may still be open.
START, SKIP, BUFFER, CANCEL_AND_START = "start", "skip", "buffer", "cancel_and_start"


def overlap_action(overlap: str, *, previous_open: bool, buffered: bool) -> str:
    """``start``, ``skip``, ``buffer`` (start when the open run ends) or ``cancel_and_start``.

    ``buffer_one`` holds one tick: a further tick while one is held is skipped.
    """
    if not previous_open or overlap == "allow":
        return START
    if overlap == "cancel_previous":
        return CANCEL_AND_START
    if overlap == "buffer_one" and not buffered:
        return BUFFER
    return SKIP


def walk(rule: Rule, after: datetime) -> Iterator[datetime]:
    """Every tick after ``after``, in order (for previews and tests)."""
    moment = after
    while True:
        moment = rule.next_after(moment)
        yield moment


def _span(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts) or "0s"
