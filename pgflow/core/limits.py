"""Flow control as declared: concurrency limits, rate limits and singletons by key. Pure.

Each attempt of a limited step carries the names of the gates it must pass (computed when
the attempt is scheduled, see :func:`gates_of`); the claim enforces them in SQL. A gate's
name says its kind (:data:`GATE_KINDS`, read with :func:`gate_kind`): a concurrency limit
(holders are attempts), a rate (the starts of its window), a queued singleton (holders are
runs). The claim's and retention's SQL and the run page derive their prefixes from these.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..exceptions import DefinitionError
from .durations import seconds
from .jsonvalue import text_problem

Key = str | Callable[..., Any] | None
ON_CONFLICT = ("queue", "skip")
MAX_KEY = 200  # characters of a computed key kept in a gate's name
# key="tenant" on a class with no method of that name: the run's tenant (run.tenant), so
# fairness by tenant needs no code. Its gates are named "tenant:<key>", apart from the keys
# methods return.
TENANT_KEY = "tenant"

# The gate kinds, each a gate name's prefix before ``:`` (stored in pgflow_gate and on each
# attempt: renaming one needs a data migration).
CONCURRENCY_GATE = "c"  # c:<key>: holders are attempts scheduled or in progress
RATE_GATE = "r"  # r:<key>: starts inside the window
SINGLETON_GATE = "s"  # s:<workflow path>:<key>: holders are open runs
GATE_KINDS = (CONCURRENCY_GATE, RATE_GATE, SINGLETON_GATE)


def gate_name(kind: str, key: str) -> str:
    """The name of the gate of ``kind`` for ``key``."""
    return f"{kind}:{key}"


def gate_prefix(kind: str) -> str:
    """What every gate name of ``kind`` starts with (for a SQL ``LIKE`` or ``startswith``)."""
    return f"{kind}:"


def gate_kind(name: str) -> str:
    """The kind of the gate named ``name``, one of :data:`GATE_KINDS`."""
    kind, colon, _ = name.partition(":")
    if not colon or kind not in GATE_KINDS:
        raise ValueError(
            f"not a gate name: {name!r}; a gate name starts with one of {[gate_prefix(k) for k in GATE_KINDS]}"
        )
    return kind


def _check_key(key: Any, what: str) -> None:
    if key is not None and not isinstance(key, str) and not callable(key):
        raise DefinitionError(
            f"{what}: key must be the name of a method, a callable taking the workflow and returning a "
            f"string (or None for no limit), or left out; got {key!r}"
        )
    if isinstance(key, str) and not key.isidentifier():
        raise DefinitionError(f"{what}: key {key!r} is not a method name")


def _check_count(value: Any, what: str, option: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise DefinitionError(f"{what}: {option} must be a whole number of 1 or more, got {value!r}")


@dataclass(frozen=True)
class Limit:
    """At most ``max`` attempts sharing the key in progress at once, across every worker.

    ``key``: a method name or a callable taking the workflow, returning a string (``None``:
    this attempt is not limited); left out, the limit is per step.
    """

    max: int
    key: Key = None

    def __post_init__(self) -> None:
        _check_count(self.max, repr(self), "max")
        _check_key(self.key, repr(self))


@dataclass(frozen=True)
class Rate:
    """At most ``limit`` attempts sharing the key start in any window of ``per``."""

    limit: int
    per: timedelta | float
    key: Key = None

    def __post_init__(self) -> None:
        _check_count(self.limit, repr(self), "limit")
        try:
            seconds(self.per, "per", positive=True)
        except ValueError as exc:
            raise DefinitionError(f"{self!r}: {exc}") from None
        _check_key(self.key, repr(self))

    @property
    def seconds(self) -> float:
        return seconds(self.per, "per", positive=True)


@dataclass(frozen=True)
class Singleton:
    """One open run per key. A second ``start()`` with the key of an open run waits its
    turn (``on_conflict="queue"``: its steps are held until the open run ends) or is refused
    (``"skip"``: ``SingletonConflict`` naming the open run)."""

    key: Key = None
    on_conflict: str = "queue"

    def __post_init__(self) -> None:
        if self.on_conflict not in ON_CONFLICT:
            raise DefinitionError(
                f"{self!r}: on_conflict must be one of {', '.join(map(repr, ON_CONFLICT))}, got {self.on_conflict!r}"
            )
        _check_key(self.key, repr(self))


def checked(value: Any, kind: type, option: str) -> Any:
    """``value`` if it is None or a ``kind``, else a DefinitionError naming what is accepted."""
    if value is not None and not isinstance(value, kind):
        raise DefinitionError(f"{option} must be a pgflow.{kind.__name__}(...) or None, got {value!r}")
    return value


def key_value(instance: Any, key: Key, default: str, what: str = "a limit's key") -> str | None:
    """The key a declaration gives for ``instance``: ``default`` without one, None when the
    method or callable returns None (not limited). ``what`` names the declaration in an error
    (``step 'send': concurrency key``)."""
    if key is None:
        return default
    if key == TENANT_KEY and tenant_key_of_run(type(instance)):
        tenant = instance.run.tenant
        return None if tenant is None else f"{TENANT_KEY}:{tenant}"[:MAX_KEY]
    value = getattr(instance, key)() if isinstance(key, str) else key(instance)
    if value is None:
        return None
    named = f"{what} {key!r}" if isinstance(key, str) else f"{what} {getattr(key, '__name__', repr(key))}"
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise TypeError(f"{named} must return a string or None, got {value!r}")
    text = str(value)[:MAX_KEY]
    # Refused here, naming the key: stored as it is, it failed the INSERT of the gate row
    # (or the run's singleton_key) with a raw DataError, in the transaction of the step
    # before, whose completed body was then recorded as failed.
    problem = text_problem(text)
    if problem:
        raise ValueError(f"{named} returned {value!r}: {problem}; return a string without it, or None")
    return text


def tenant_key_of_run(cls: type) -> bool:
    """Whether ``key="tenant"`` on ``cls`` means the run's tenant: the class defines no
    ``tenant`` of its own (one that does keeps its method, as before tenants were stored)."""
    return not callable(getattr(cls, TENANT_KEY, None))


@dataclass(frozen=True)
class Gates:
    """What an attempt must pass at the claim: its gate names ('' for none) and their sizes."""

    gate: str = ""  # c:<key> or s:<class>:<key>
    gate_max: int = 0
    rate_gate: str = ""  # r:<key>
    rate_limit: int = 0
    rate_per: float = 0.0

    @property
    def any(self) -> bool:
        return bool(self.gate or self.rate_gate)

    def columns(self) -> dict[str, Any]:
        """The attempt row's flow-control columns (``Step``'s field names)."""
        return {
            "gated": self.any,
            "gate": self.gate,
            "gate_max": self.gate_max,
            "rate_gate": self.rate_gate,
            "rate_limit": self.rate_limit,
            "rate_per": self.rate_per,
        }


NO_GATES = Gates()


def gates_of(
    instance: Any,
    *,
    workflow_path: str,
    step_name: str,
    concurrency: Limit | None,
    rate: Rate | None,
    singleton: str | None,
) -> Gates:
    """The gates of one attempt: ``singleton`` is the run's queued-singleton key, if any."""
    gate, gate_max = "", 0
    if singleton is not None:
        gate, gate_max = gate_name(SINGLETON_GATE, f"{workflow_path}:{singleton}"), 1
    elif concurrency is not None:
        key = key_value(
            instance, concurrency.key, f"{workflow_path}.{step_name}", f"step {step_name!r}: concurrency key"
        )
        if key is not None:
            gate, gate_max = gate_name(CONCURRENCY_GATE, key), concurrency.max
    rate_gate, rate_limit, rate_per = "", 0, 0.0
    if rate is not None:
        key = key_value(instance, rate.key, f"{workflow_path}.{step_name}", f"step {step_name!r}: rate key")
        if key is not None:
            rate_gate, rate_limit, rate_per = gate_name(RATE_GATE, key), rate.limit, rate.seconds
    return Gates(gate=gate, gate_max=gate_max, rate_gate=rate_gate, rate_limit=rate_limit, rate_per=rate_per)


def describe_gate(name: str, size: int, per: float = 0.0) -> str:
    """A gate in words, for the run page: which limit and which key."""
    kind, key = gate_kind(name), name.partition(":")[2]
    if kind == CONCURRENCY_GATE:
        return f"concurrency limit {size} for key {key!r}"
    if kind == RATE_GATE:
        return f"rate limit {size} per {per:g}s for key {key!r}"
    path, _, singleton = key.rpartition(":")
    return f"singleton {path.rsplit('.', 1)[-1]} for key {singleton!r}"
