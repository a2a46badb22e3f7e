"""Step definitions: what one step of a workflow is, and the ordered list of them.

A :class:`StepDefinition` is the parsed, validated form of one ``@step`` / ``@fan_out``
declaration; a :class:`StepList` is a workflow's steps in run order plus the names of the
steps it no longer has. Both are frozen: a subclass builds its own list from its parent's
with :meth:`StepList.add` / :meth:`StepList.replace` / :meth:`StepList.with_removed`, so the
parent's is never changed.

Pure: no Django, no database. Everything that needs the workflow class itself (does a
``skip_if`` name a method, do the parameters fit) is checked in :mod:`pgflow.workflow.problems`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..exceptions import DefinitionError, StepNotFound
from .durations import seconds
from .flow import TERMINAL_ACTIONS, normalize_action
from .limits import Limit, Rate, checked
from .policy import coerce_all

if TYPE_CHECKING:
    from .policy import OnException

STEP = "step"
SIGNAL = "signal"  # a @step with wait_for=: parks until a signal of that name arrives
FAN_OUT = "fan_out"
STEP_KINDS = (STEP, SIGNAL, FAN_OUT)

# The options each decorator takes, in the order the messages list them. before_step and
# after_step place the step (StepList.add); the others end up on the StepDefinition.
STEP_OPTIONS = (
    "wait",
    "wait_until",
    "skip_if",
    "timeout",
    "on_exception",
    "queue",
    "priority",
    "before_step",
    "after_step",
    "wait_for",
    "wait_timeout",
    "on_timeout",
    "concurrency",
    "rate",
    "needs_subject",
    "approval",  # turned into wait_for / wait_timeout / on_timeout by pgflow.workflow.building
)
SIGNAL_ONLY_OPTIONS = ("wait_for", "wait_timeout", "on_timeout", "approval")
FAN_OUT_OPTIONS = (*(o for o in STEP_OPTIONS if o not in SIGNAL_ONLY_OPTIONS), "on_batch_failure")

# Step priorities end up in an integer column and the claim query's ORDER BY.
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


@dataclass(frozen=True, kw_only=True)
class StepDefinition:
    """One step of a workflow class, as declared.

    ``method`` is the attribute holding the body; the engine calls it on a workflow
    instance, so a subclass that redefines the method changes the body without touching
    the definition. ``wait``/``wait_until``/``skip_if`` are either values or the name of a
    method / a callable taking the workflow, evaluated when the step is scheduled.
    """

    name: str
    kind: str = STEP
    method: str = ""  # defaults to ``name``
    wait: float | str | Callable[..., Any] | None = None  # seconds, a method name or a callable
    wait_until: str | Callable[..., Any] | None = None  # a method name or a callable -> aware datetime
    skip_if: str | Callable[..., Any] | None = None
    timeout: float | None = None  # seconds
    on_exception: tuple[OnException, ...] = ()
    queue: str | None = None
    priority: int | None = None
    wait_for: str | None = None  # the signal name a "signal" step waits for
    wait_timeout: float | None = None  # seconds
    on_timeout: str = "pause"
    on_batch_failure: str | None = None  # "pause" by default for a fan_out
    concurrency: Limit | None = None  # pgflow.Limit: attempts in progress at once, by key
    rate: Rate | None = None  # pgflow.Rate: attempts started per window, by key
    # The body reads ``self.subject``: the worker's claim loop reads the subjects of a claim's
    # attempts that need them (one query per subject model), so the body's read costs none.
    needs_subject: bool = False
    # A pgflow.Approval (``@step(approval=...)``): a signal wait on ``approval:<name>`` whose
    # body gets a pgflow.approvals.Decision; set by pgflow.workflow.building, not by declare().
    approval: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise DefinitionError(f"a step name must be a Python identifier, got {self.name!r}")
        if not self.method:
            object.__setattr__(self, "method", self.name)
        if self.kind not in STEP_KINDS:
            raise DefinitionError(f"step {self.name!r}: kind must be one of {_listed(STEP_KINDS)}, got {self.kind!r}")
        if (self.kind == SIGNAL) != (self.wait_for is not None):
            raise DefinitionError(f"step {self.name!r}: a step has kind 'signal' exactly when it has wait_for")
        if self.kind == FAN_OUT and self.on_batch_failure is None:
            object.__setattr__(self, "on_batch_failure", "pause")
        if self.kind != FAN_OUT and self.on_batch_failure is not None:
            raise DefinitionError(f"step {self.name!r}: only a fan_out takes on_batch_failure")
        for option in ("on_timeout", "on_batch_failure"):
            value = getattr(self, option)
            if value is not None and value not in TERMINAL_ACTIONS:
                raise DefinitionError(
                    f"step {self.name!r}: {option} must be one of {_listed(TERMINAL_ACTIONS)}, got {value!r}"
                )
        if not isinstance(self.on_exception, tuple):
            object.__setattr__(self, "on_exception", tuple(self.on_exception))

    @property
    def waits(self) -> bool:
        """Whether the step has a ``wait`` or ``wait_until`` to work out before it is due."""
        return any(getattr(self, option) is not None for option in DELAYING_OPTIONS)

    @property
    def limited(self) -> bool:
        """Whether the step has a concurrency limit or a rate: its attempts carry gates the
        claim enforces, worked out when each is scheduled (``store.schedule_attempt``)."""
        return any(getattr(self, option) is not None for option in GATING_OPTIONS)

    @property
    def fans_out(self) -> bool:
        """Whether the step is a ``@fan_out``: its body gets a batch builder, and its attempt
        waits on the batch it opens."""
        return self.kind == FAN_OUT

    @property
    def takes_argument(self) -> bool:
        """Whether the body takes an argument: the signal (``wait_for``) or the batch builder."""
        return self.kind in (SIGNAL, FAN_OUT)

    @property
    def locks_before_body(self) -> bool:
        """Whether ``prepare`` must take the run lock before the body: a ``skip_if`` to decide,
        a signal to take, or a batch to open. A step without one runs on the claim's read of its
        run alone (``store.quick_prepare``), unless its class has ``cancel_if`` conditions."""
        return self.kind != STEP or self.skip_if is not None

    @property
    def job_options(self) -> dict[str, Any]:
        """The step's own queue/priority, only those it sets."""
        return {k: v for k, v in (("queue", self.queue), ("priority", self.priority)) if v is not None}


# The StepDefinition fields that change how an attempt is scheduled: a wait to work out before
# it is due, or gates its claim must pass (its queue and priority are read through
# ``Workflow.queue_for``/``priority_for`` on every path). A new scheduling option joins one of
# these, and ``scheduled_plainly`` then knows it; tests/unit/test_scheduled_plainly.py fails
# for a field of StepDefinition it has not been told about.
DELAYING_OPTIONS = ("wait", "wait_until")
GATING_OPTIONS = ("concurrency", "rate")


def scheduled_plainly(step: StepDefinition, *, singleton: object | None, delay_worked_out: bool = False) -> bool:
    """Whether an attempt of ``step``, in a class whose ``singleton`` option is given, is
    scheduled plainly: no wait (unless the caller works its delay out itself:
    ``delay_worked_out``), not limited, the class not a singleton. The fast paths that write
    attempts in set-based SQL (the plain start, the group commit) take only these; any other
    goes through ``store.schedule_attempt``, which works its gates out."""
    if singleton is not None or step.limited:
        return False
    return delay_worked_out or not step.waits


def declare(name: str, *, fan_out: bool = False, method: str | None = None, **options: Any) -> StepDefinition:
    """Parse and validate the options of one ``@step`` / ``@fan_out`` declaration.

    Every option listed in :data:`STEP_OPTIONS` (:data:`FAN_OUT_OPTIONS` for a fan_out) is
    accepted. ``before_step``/``after_step`` are checked here but applied by
    :meth:`StepList.add`. Raises :class:`DefinitionError` naming the step, the bad value
    and what is accepted.
    """
    where = f"{'fan_out' if fan_out else 'step'} {name!r}"

    def fail(message: str) -> DefinitionError:
        return DefinitionError(f"{where}: {message}")

    if fan_out:
        for option in SIGNAL_ONLY_OPTIONS:
            if option in options:
                raise fail(f"cannot take {option}: a fan_out waits for its batch, not for a signal")
    accepted = FAN_OUT_OPTIONS if fan_out else STEP_OPTIONS
    for option in options:
        if option not in accepted:
            raise fail(f"unknown option {option!r} (accepted: {', '.join(accepted)})")

    def duration(option: str, *, positive: bool) -> float | None:
        value = options.get(option)
        if value is None:
            return None
        try:
            return seconds(value, option, positive=positive)
        except ValueError as exc:
            raise fail(str(exc)) from None

    wait, wait_until = parse_waits(options.get("wait"), options.get("wait_until"), fail)

    skip_if = options.get("skip_if")
    if skip_if is not None:
        _check_reference(skip_if, "skip_if", fail, returns="a bool")

    queue = options.get("queue")
    if queue is not None and not valid_queue(queue):
        raise fail(f"queue must be None or {QUEUE_RULE}, got {queue!r}")
    priority = options.get("priority")
    if priority is not None:
        check_priority(priority, fail)

    for option in ("before_step", "after_step"):
        value = options.get(option)
        if value is not None and not isinstance(value, str):
            raise fail(f"{option} must be the name of a step, got {value!r}")
    if options.get("before_step") is not None and options.get("after_step") is not None:
        raise fail("takes before_step or after_step, not both")

    wait_for = options.get("wait_for")
    if wait_for is not None and not (isinstance(wait_for, str) and wait_for.strip()):
        raise fail(f"wait_for must be a signal name (a non-empty string), got {wait_for!r}")
    wait_timeout = duration("wait_timeout", positive=True)
    if wait_timeout is not None and wait_for is None:
        raise fail("wait_timeout only applies to a step with wait_for")
    on_timeout = options.get("on_timeout")
    if on_timeout is not None:
        if wait_timeout is None:
            raise fail("on_timeout only applies to a step with wait_for and wait_timeout")
        on_timeout = _action(on_timeout, "on_timeout", fail)

    on_batch_failure = None
    if fan_out:
        on_batch_failure = _action(options.get("on_batch_failure", "pause"), "on_batch_failure", fail)

    try:
        on_exception = coerce_all(options.get("on_exception"))
    except DefinitionError as exc:
        raise fail(str(exc)) from None

    try:
        concurrency = checked(options.get("concurrency"), Limit, "concurrency")
        rate = checked(options.get("rate"), Rate, "rate")
    except DefinitionError as exc:
        raise fail(str(exc)) from None

    needs_subject = options.get("needs_subject", False)
    if not isinstance(needs_subject, bool):
        raise fail(f"needs_subject must be True or False, got {needs_subject!r}")

    kind = FAN_OUT if fan_out else (SIGNAL if wait_for is not None else STEP)
    return StepDefinition(
        name=name,
        kind=kind,
        method=method or name,
        wait=wait,
        wait_until=wait_until,
        skip_if=skip_if,
        timeout=duration("timeout", positive=True),
        on_exception=on_exception,
        queue=queue,
        priority=priority,
        wait_for=wait_for,
        wait_timeout=wait_timeout,
        on_timeout=on_timeout or "pause",
        on_batch_failure=on_batch_failure,
        concurrency=concurrency,
        rate=rate,
        needs_subject=needs_subject,
    )


def parse_waits(
    wait: Any, wait_until: Any, fail: Callable[[str], Exception]
) -> tuple[float | str | Callable[..., Any] | None, str | Callable[..., Any] | None]:
    """``wait`` (a timedelta or seconds become seconds) and ``wait_until``, validated; at
    most one of them. Shared by a step's options and the class-wide defaults."""
    if isinstance(wait, str) or callable(wait):
        _check_reference(wait, "wait", fail, returns="a timedelta or a number of seconds")
    elif wait is not None:
        if not isinstance(wait, timedelta | int | float) or isinstance(wait, bool):
            raise fail(
                "wait must be a timedelta, a number of seconds, a method name or a callable returning "
                f"either, got {wait!r}"
            )
        try:
            wait = seconds(wait, "wait", positive=False)
        except ValueError as exc:
            raise fail(str(exc)) from None
    if wait_until is not None:
        _check_reference(wait_until, "wait_until", fail, returns="an aware datetime")
    if wait is not None and wait_until is not None:
        raise fail("takes wait or wait_until, not both")
    return wait, wait_until


def with_class_waits(steps: StepList, wait: Any, wait_until: Any) -> StepList:
    """``steps`` with the class-wide ``wait`` / ``wait_until`` given to every step that sets
    neither itself (a step's own option wins), as the reference's ``set_step_job_options``."""
    if wait is None and wait_until is None:
        return steps
    changed = steps
    for definition in steps:
        if not definition.waits:
            changed = changed.replace(replace(definition, wait=wait, wait_until=wait_until))
    return changed


def check_priority(value: object, fail: Callable[[str], Exception]) -> None:
    low, high = PRIORITY_RANGE
    if type(value) is not int or not low <= value <= high:
        raise fail(f"priority must be a whole number between {low} and {high}, got {value!r}")


def _check_reference(value: object, option: str, fail: Callable[[str], Exception], *, returns: str) -> None:
    if isinstance(value, str):
        if not value.isidentifier():
            raise fail(f"{option} must name a method of the workflow, got {value!r}")
        return
    if callable(value):
        return
    raise fail(f"{option} must be a method name or a callable(workflow) returning {returns}, got {value!r}")


def _action(value: object, option: str, fail: Callable[[str], Exception]) -> str:
    try:
        return normalize_action(value, TERMINAL_ACTIONS, option)
    except ValueError as exc:
        raise fail(str(exc)) from None


def _listed(values: Sequence[str]) -> str:
    return ", ".join(repr(v) for v in values)


@dataclass(frozen=True, kw_only=True)
class StepList:
    """A workflow's steps in run order, and the names of the steps it no longer has.

    Every change returns a new list. Step names are unique and never also removed.
    """

    steps: tuple[StepDefinition, ...] = ()
    removed: frozenset[str] = frozenset()
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        steps = tuple(self.steps)
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "removed", frozenset(self.removed))
        index: dict[str, int] = {}
        for position, definition in enumerate(steps):
            if not isinstance(definition, StepDefinition):
                raise DefinitionError(f"a StepList holds StepDefinitions, got {definition!r}")
            if definition.name in index:
                raise DefinitionError(f"duplicate step {definition.name!r}: step names must be unique")
            index[definition.name] = position
        both = sorted(self.removed & index.keys())
        if both:
            raise DefinitionError(f"step {both[0]!r} is both defined and listed in removed_steps")
        object.__setattr__(self, "_index", index)

    def __iter__(self) -> Iterator[StepDefinition]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.steps)

    def get(self, name: str) -> StepDefinition | None:
        position = self._index.get(name)
        return None if position is None else self.steps[position]

    def index(self, name: str) -> int | None:
        return self._index.get(name)

    def first(self) -> StepDefinition | None:
        return self.steps[0] if self.steps else None

    def next_after(self, name: str, *, history: Sequence[str] | None = None) -> StepDefinition | None:
        """The step that runs after ``name``; ``None`` when ``name`` is the last.

        For a removed step, the step after the place it used to hold. The class no longer
        knows that place, so it is found from ``history``: the run's step names in attempt
        order (oldest first). The latest of them still defined is the step that ran before
        the removed one; with none, the run had not got past the start, so the first step.
        A removed name without ``history``, or a name neither defined nor removed, is a
        :class:`~pgflow.exceptions.StepNotFound`.
        """
        position = self._index.get(name)
        if position is not None:
            return self.steps[position + 1] if position + 1 < len(self.steps) else None
        if name not in self.removed:
            raise StepNotFound(f"no step {name!r} (steps: {', '.join(self.names()) or 'none'})")
        if history is None:
            raise StepNotFound(
                f"step {name!r} was removed; pass history= (the run's step names, oldest first) "
                "to find the step after the place it held"
            )
        for earlier in reversed(history):
            if earlier in self._index:
                return self.next_after(earlier)
        return self.first()

    def add(self, definition: StepDefinition, before: str | None = None, after: str | None = None) -> StepList:
        """A new list with ``definition`` at the end, or just before / after the named step."""
        if before is not None and after is not None:
            raise DefinitionError(f"step {definition.name!r}: takes before_step or after_step, not both")
        if definition.name in self._index:
            raise DefinitionError(f"duplicate step {definition.name!r}: step names must be unique")
        if definition.name in self.removed:
            raise DefinitionError(
                f"step {definition.name!r} is listed in removed_steps: a removed step's name cannot be "
                "used again (runs scheduled on it skip it)"
            )
        position = len(self.steps)
        for option, anchor, offset in (("before_step", before, 0), ("after_step", after, 1)):
            if anchor is None:
                continue
            if anchor not in self._index:
                state = "a removed step" if anchor in self.removed else "no step"
                raise DefinitionError(
                    f"step {definition.name!r}: {option} {anchor!r} names {state} "
                    f"(defined so far: {', '.join(self.names()) or 'none'})"
                )
            position = self._index[anchor] + offset
        steps = (*self.steps[:position], definition, *self.steps[position:])
        return replace(self, steps=steps)

    def replace(self, definition: StepDefinition) -> StepList:
        """A new list with the step of the same name swapped for ``definition``, in place."""
        position = self._index.get(definition.name)
        if position is None:
            raise DefinitionError(
                f"no step {definition.name!r} to replace (steps: {', '.join(self.names()) or 'none'})"
            )
        steps = (*self.steps[:position], definition, *self.steps[position + 1 :])
        return replace(self, steps=steps)

    def with_removed(self, names: Sequence[str] | frozenset[str]) -> StepList:
        """A new list without ``names`` (those still defined are taken out) and remembering them."""
        gone = frozenset(names)
        steps = tuple(d for d in self.steps if d.name not in gone)
        return replace(self, steps=steps, removed=self.removed | gone)

    def digest(self) -> str:
        """SHA-256 (hex) of the ordered ``[[name, kind], ...]`` list.

        Stored on every run, so a run begun on an older definition can be told apart. Only
        names, kinds and order count: a body or an option edit keeps the digest. Compact
        ASCII JSON keeps it the same on every Python version and process.
        """
        digest: str | None = self.__dict__.get("_digest")
        if digest is None:  # the list never changes: worked out once (the group commit asks per attempt)
            payload = json.dumps([[d.name, d.kind] for d in self.steps], separators=(",", ":"))
            digest = hashlib.sha256(payload.encode("ascii")).hexdigest()
            object.__setattr__(self, "_digest", digest)
        return digest


# One rule for queue names everywhere: declarations, settings and ``pgflow_worker --queues``
# (Step.queue holds 100 characters).
QUEUE_NAME = re.compile(r"[\w.:-]{1,100}")
QUEUE_RULE = "1-100 letters, digits, '_', '.', ':' or '-'"


def valid_queue(value: object) -> bool:
    return isinstance(value, str) and QUEUE_NAME.fullmatch(value) is not None
