"""Exception policies: what happens to a run when a step body raises.

A policy (:class:`OnException`) matches errors (by class, by class name, or every
``Exception`` when it names none) and either names an action or a handler that picks one::

    OnException(ConnectionError, action="reattempt", wait=timedelta(seconds=15), max_reattempts=5)
    OnException("shop.payments.PaymentDeclined", action="cancel", report="never")
    OnException(action="pause")                                # blanket
    OnException(TimeoutError, handler="on_timeout")            # a method that calls a verb

:func:`resolve` picks the policy for an error (the step's own, then the class's specific
ones, then its blanket ones, then :data:`DEFAULT`) and :meth:`OnException.decide` turns it
into a :class:`Decision` the engine carries out. The error is recorded on the attempt
whatever the decision; ``report`` only says whether the ERROR_REPORTER also hears of it.

Pure: no Django, no database. The one thing read from outside, how many times in a row the
step was reattempted, is a callable the engine passes in, called only when needed. A name
matcher that no class name equals is imported once (it may be a re-export), as the user
wrote it.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..exceptions import DefinitionError
from .durations import seconds
from .flow import ACTIONS, PAUSE, REATTEMPT, TERMINAL_ACTIONS, FlowControl, Outcome, normalize_action

ALWAYS = "always"
NEVER = "never"
TERMINAL_ONLY = "terminal_only"  # only when the decision ends the retrying
REPORTS = (ALWAYS, NEVER, TERMINAL_ONLY)

ARGUMENTS = ("matching", "action", "wait", "max_reattempts", "terminal_action", "report", "handler")

_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

Matcher = type | str


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What to do about one error.

    ``outcome`` is applied to the attempt; ``report`` says whether the ERROR_REPORTER hears
    of the error; ``terminal`` is False only for a reattempt (the step will run again);
    ``handler_error`` is what a handler raised, to be reported alongside the step's error.
    """

    outcome: Outcome
    report: bool
    terminal: bool
    handler_error: BaseException | None = None


@dataclass(frozen=True, init=False)
class OnException:
    """One exception policy. Every wrong argument is a :class:`DefinitionError`.

    ``matching``: classes or class names, nested lists flattened; ``None`` (none given)
    matches every ``Exception``. A class matches by ``isinstance``, so a mixin or tag class
    raised through multiple inheritance matches too. A name matches when the error's class
    or any class in its MRO has it as its bare name (``"PaymentDeclined"``), its qualified
    name (``"Gateway.Declined"``), its ``module.QualName``, or when the name is an import
    path that resolves to that class, a re-export included (``"django.db.IntegrityError"``
    for ``django.db.utils.IntegrityError``), as the reference compares ``ancestors``.
    """

    matching: tuple[Matcher, ...] | None
    action: str | None
    wait: float | None
    max_reattempts: int | None
    terminal_action: str
    report: str
    handler: str | Callable[..., Any] | None

    def __init__(
        self,
        *matching: Matcher | Sequence[Matcher],
        action: str | None = None,
        wait: Any = None,
        max_reattempts: int | None = None,
        terminal_action: str | None = None,
        report: str = ALWAYS,
        handler: str | Callable[..., Any] | None = None,
    ) -> None:
        if action is not None and handler is not None:
            raise DefinitionError("OnException takes action= or handler=, not both")
        if action is None and handler is None:
            raise DefinitionError(
                f"OnException needs action= (one of {_listed(ACTIONS)}) or handler= "
                "(a method name or a callable(workflow, error) that calls a flow-control verb)"
            )
        normalized = None if action is None else _action(action, ACTIONS, "action")
        if normalized != REATTEMPT:
            # wait and terminal_action shape a reattempt; anywhere else they would be ignored
            # without a word (a handler passes its own wait to reattempt()).
            given = [
                name for name, value in (("wait", wait), ("terminal_action", terminal_action)) if value is not None
            ]
            if given:
                raise DefinitionError(
                    f"OnException {' and '.join(f'{name}=' for name in given)} only "
                    f"{'applies' if len(given) == 1 else 'apply'} to action='reattempt'"
                )
        if max_reattempts is not None:
            if normalized != REATTEMPT:
                raise DefinitionError("OnException max_reattempts= only applies to action='reattempt'")
            if type(max_reattempts) is not int or max_reattempts < 1:
                raise DefinitionError(
                    f"OnException max_reattempts must be a positive whole number, got {max_reattempts!r}"
                )
        if report not in REPORTS:
            raise DefinitionError(f"OnException report must be one of {_listed(REPORTS)}, got {report!r}")
        if handler is not None and not (isinstance(handler, str) and handler.isidentifier()) and not callable(handler):
            raise DefinitionError(
                f"OnException handler must be a method name or a callable(workflow, error), got {handler!r}"
            )
        try:
            wait_seconds = None if wait is None else seconds(wait, "wait", positive=False)
        except ValueError as exc:
            raise DefinitionError(f"OnException {exc}") from None

        set_ = object.__setattr__
        set_(self, "matching", _matching(matching))
        set_(self, "action", normalized)
        set_(self, "wait", wait_seconds)
        set_(self, "max_reattempts", max_reattempts)
        set_(
            self,
            "terminal_action",
            _action(PAUSE if terminal_action is None else terminal_action, TERMINAL_ACTIONS, "terminal_action"),
        )
        set_(self, "report", report)
        set_(self, "handler", handler)

    @property
    def specific(self) -> bool:
        """True when the policy names what it matches (a blanket one does not)."""
        return self.matching is not None

    def matches(self, error: BaseException) -> bool:
        if self.matching is None:
            return isinstance(error, Exception)
        for matcher in self.matching:
            if isinstance(matcher, str):
                if names_a_class_of(matcher, type(error)):
                    return True
            elif isinstance(error, matcher):
                return True
        return False

    def decide(
        self,
        error: BaseException,
        *,
        workflow: Any,
        consecutive_reattempts: Callable[[], int] = lambda: 0,
    ) -> Decision:
        """The decision for ``error`` raised by a step of ``workflow`` (a Workflow instance).

        ``consecutive_reattempts`` returns how many attempts of this step in a row ended in
        a reattempt; it reads the step rows, so it is only called when ``max_reattempts``
        is set.
        """
        if self.handler is not None:
            return self._decide_with_handler(error, workflow)
        if self.action == REATTEMPT:
            if self.max_reattempts is not None and consecutive_reattempts() >= self.max_reattempts:
                # Spent: terminal_action applies, and it ends the retrying.
                return Decision(
                    outcome=Outcome.for_action(self.terminal_action), report=self.report != NEVER, terminal=True
                )
            return Decision(
                outcome=Outcome(kind=REATTEMPT, wait=self.wait), report=self.report == ALWAYS, terminal=False
            )
        assert self.action is not None
        return Decision(outcome=Outcome.for_action(self.action), report=self.report != NEVER, terminal=True)

    def _decide_with_handler(self, error: BaseException, workflow: Any) -> Decision:
        # The handler must end the step with a verb (which raises FlowControl); returning
        # without one pauses. A handler that raises pauses too, and its own error goes to
        # the reporter whatever ``report`` says, since nobody asked for that one.
        handler = self.handler
        try:
            if isinstance(handler, str):
                getattr(workflow, handler)(error)
            else:
                assert handler is not None
                handler(workflow, error)
        except FlowControl as control:
            outcome = control.outcome
        except Exception as handler_error:
            return Decision(outcome=Outcome(kind=PAUSE), report=True, terminal=True, handler_error=handler_error)
        else:
            outcome = Outcome(kind=PAUSE)
        terminal = outcome.kind != REATTEMPT
        report = self.report == ALWAYS or (self.report == TERMINAL_ONLY and terminal)
        return Decision(outcome=outcome, report=report, terminal=terminal)

    def handler_name(self) -> str | None:
        """The method name of a handler given by name, else None."""
        return self.handler if isinstance(self.handler, str) else None

    def name_matchers(self) -> tuple[str, ...]:
        """The matchers given as names."""
        return tuple(m for m in self.matching or () if isinstance(m, str))


def coerce(value: object) -> OnException:
    """One policy from what a step's ``on_exception=`` accepts.

    An :class:`OnException`, an action string (``"skip"``), or a dict of OnException
    arguments (``{"matching": [KeyError], "action": "cancel"}``).
    """
    if isinstance(value, OnException):
        return value
    if isinstance(value, str):
        return OnException(action=value)
    if isinstance(value, Mapping):
        unknown = [key for key in value if key not in ARGUMENTS]
        if unknown:
            raise DefinitionError(
                f"on_exception dict has unknown key {unknown[0]!r} (accepted: {', '.join(ARGUMENTS)})"
            )
        arguments = dict(value)
        matching = arguments.pop("matching", ())
        if not isinstance(matching, list | tuple):
            matching = (matching,)
        return OnException(*matching, **arguments)
    raise DefinitionError(
        f"on_exception takes an OnException, an action (one of {_listed(ACTIONS)}), a dict of OnException "
        f"arguments, or a list of those, got {value!r}"
    )


def coerce_all(value: object) -> tuple[OnException, ...]:
    """Policies from one policy, an action, a dict, a list/tuple of those, or ``None`` (none)."""
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return tuple(coerce(entry) for entry in value)
    return (coerce(value),)


def resolve(
    error: BaseException,
    *,
    step_policies: Sequence[OnException] = (),
    class_policies: Sequence[OnException] = (),
) -> OnException:
    """The policy that applies to ``error``.

    The first matching among: the step's own policies (in order), the class's specific
    ones, the class's blanket ones, then :data:`DEFAULT`. A blanket class policy is thus a
    fallback even when listed before a specific one.
    """
    for policy in step_policies:
        if policy.matches(error):
            return policy
    for policy in class_policies:
        if policy.specific and policy.matches(error):
            return policy
    for policy in class_policies:
        if not policy.specific and policy.matches(error):
            return policy
    return DEFAULT


def _matching(values: tuple[Any, ...]) -> tuple[Matcher, ...] | None:
    flat = _flatten(values)  # OnException([A, [B]], ...) reads like OnException(A, B, ...)
    if not flat:
        return None
    for matcher in flat:
        if isinstance(matcher, type):
            continue
        if isinstance(matcher, str) and _DOTTED_NAME.fullmatch(matcher):
            continue
        raise DefinitionError(
            "OnException matches classes or class names (such as ConnectionError, 'PaymentDeclined' or "
            f"'shop.errors.PaymentDeclined'), got {matcher!r}"
        )
    return tuple(flat)


def _flatten(values: Sequence[Any]) -> list[Any]:
    flat: list[Any] = []
    for value in values:
        if isinstance(value, list | tuple):
            flat.extend(_flatten(value))
        else:
            flat.append(value)
    return flat


def names_a_class_of(name: str, cls: type) -> bool:
    """True when ``name`` names ``cls`` or a class in its MRO: bare name, qualified name,
    ``module.QualName``, or an import path resolving to one of them."""
    mro = cls.__mro__
    for klass in mro:
        if name in (klass.__name__, klass.__qualname__, f"{klass.__module__}.{klass.__qualname__}"):
            return True
    return "." in name and imported_class(name) in mro


@functools.cache
def imported_class(path: str) -> type | None:
    """The class an import path names (``"django.db.IntegrityError"``), or None when it
    names no class or does not import. Cached: a name is imported once per process."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue  # a shorter prefix may be the module: "shop.errors.Declined.Hard"
        except Exception:  # noqa: BLE001 - a module that fails to import names nothing
            return None
        for attribute in parts[cut:]:
            target = getattr(target, attribute, None)
        return target if isinstance(target, type) else None
    return None


def _action(value: object, allowed: tuple[str, ...], option: str) -> str:
    try:
        return normalize_action(value, allowed, option)
    except ValueError as exc:
        raise DefinitionError(f"OnException {exc}") from None


def _listed(values: Sequence[str]) -> str:
    return ", ".join(repr(v) for v in values)


# What applies when no policy matches: the run pauses, and the error is reported.
DEFAULT = OnException(action=PAUSE)
