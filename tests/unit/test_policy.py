"""Exception policies: validation, matching, coercion, resolution and every decision path."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, IntegrityError

from pgflow.core.flow import FlowControl, Outcome
from pgflow.core.policy import DEFAULT, Decision, OnException, coerce, coerce_all, resolve
from pgflow.exceptions import DefinitionError


class PaymentError(Exception):
    pass


class PaymentDeclined(PaymentError):
    class Hard(Exception):
        pass


class Verbs:
    """Stands in for a Workflow instance: the verbs raise FlowControl like the real ones."""

    def __init__(self) -> None:
        self.seen: list[BaseException] = []

    def pause(self) -> None:
        raise FlowControl(Outcome(kind="pause"))

    def cancel(self) -> None:
        raise FlowControl(Outcome(kind="cancel"))

    def skip(self) -> None:
        raise FlowControl(Outcome(kind="skip"))

    def finish(self) -> None:
        raise FlowControl(Outcome(kind="finish"))

    def reattempt(self, wait: float | None = None) -> None:
        raise FlowControl(Outcome(kind="reattempt", wait=wait))

    def on_error(self, error: BaseException) -> None:
        self.seen.append(error)
        self.reattempt(wait=7)


class Retryable:
    """A tag class, not an exception: raised only through multiple inheritance."""


class Flaky(Retryable, ValueError):
    pass


HERE = __name__


# -- construction ---------------------------------------------------------------------------


def test_defaults() -> None:
    policy = OnException(action="pause")
    assert policy.matching is None
    assert (policy.action, policy.wait, policy.max_reattempts) == ("pause", None, None)
    assert (policy.terminal_action, policy.report, policy.handler) == ("pause", "always", None)
    assert not policy.specific


@pytest.mark.parametrize(
    ("given", "expected"),
    [("pause", "pause"), ("pause!", "pause"), ("reattempt!", "reattempt"), ("cancel!", "cancel"), ("skip", "skip")],
)
def test_actions_accept_a_trailing_bang(given: str, expected: str) -> None:
    assert OnException(action=given).action == expected


def test_reattempt_options() -> None:
    policy = OnException(
        ConnectionError, action="reattempt!", wait=timedelta(seconds=15), max_reattempts=5, terminal_action="cancel!"
    )
    assert policy.matching == (ConnectionError,)
    assert (policy.wait, policy.max_reattempts, policy.terminal_action) == (15.0, 5, "cancel")
    assert policy.specific


def test_matching_forms() -> None:
    assert OnException(KeyError, "shop.errors.Declined", action="skip").matching == (KeyError, "shop.errors.Declined")
    # A list reads like the same classes given one by one, however nested (the reference's flatten).
    assert OnException([KeyError, ValueError], action="skip").matching == (KeyError, ValueError)
    assert OnException([KeyError, [ValueError, ("Declined",)]], TypeError, action="skip").matching == (
        KeyError,
        ValueError,
        "Declined",
        TypeError,
    )
    assert OnException((), action="skip").matching is None


def test_is_frozen_and_comparable() -> None:
    policy = OnException(KeyError, action="skip")
    assert policy == OnException(KeyError, action="skip")
    assert hash(policy) == hash(OnException(KeyError, action="skip"))
    with pytest.raises(AttributeError):
        policy.action = "pause"  # type: ignore[misc]


ACTIONS = "'pause', 'reattempt', 'cancel', 'skip'"

INVALID = [
    (
        {"action": "pause", "handler": "on_error"},
        "OnException takes action= or handler=, not both",
    ),
    (
        {},
        f"OnException needs action= (one of {ACTIONS}) or handler= (a method name or a callable(workflow, error)",
    ),
    (
        {"action": "explode"},
        f"OnException action must be one of {ACTIONS} (a trailing '!' is accepted), got 'explode'",
    ),
    ({"action": 3}, f"OnException action must be one of {ACTIONS} (a trailing '!' is accepted), got 3"),
    ({"action": "pause", "wait": 5}, "OnException wait= only applies to action='reattempt'"),
    (
        {"action": "cancel", "terminal_action": "skip"},
        "OnException terminal_action= only applies to action='reattempt'",
    ),
    (
        {"action": "skip", "wait": 5, "terminal_action": "skip"},
        "OnException wait= and terminal_action= only apply to action='reattempt'",
    ),
    ({"handler": "on_error", "wait": 5}, "OnException wait= only applies to action='reattempt'"),
    ({"action": "pause", "max_reattempts": 3}, "OnException max_reattempts= only applies to action='reattempt'"),
    ({"handler": "on_error", "max_reattempts": 3}, "OnException max_reattempts= only applies to action='reattempt'"),
    (
        {"action": "reattempt", "max_reattempts": 0},
        "OnException max_reattempts must be a positive whole number, got 0",
    ),
    (
        {"action": "reattempt", "max_reattempts": -2},
        "OnException max_reattempts must be a positive whole number, got -2",
    ),
    (
        {"action": "reattempt", "max_reattempts": 2.0},
        "OnException max_reattempts must be a positive whole number, got 2.0",
    ),
    (
        {"action": "reattempt", "max_reattempts": True},
        "OnException max_reattempts must be a positive whole number, got True",
    ),
    (
        {"action": "reattempt", "terminal_action": "reattempt"},
        "OnException terminal_action must be one of 'pause', 'cancel', 'skip' (a trailing '!' is accepted), "
        "got 'reattempt'",
    ),
    (
        {"action": "pause", "report": "sometimes"},
        "OnException report must be one of 'always', 'never', 'terminal_only', got 'sometimes'",
    ),
    ({"action": "reattempt", "wait": -1}, "OnException wait must be 0 or more seconds, got -1"),
    (
        {"action": "reattempt", "wait": "soon"},
        "OnException wait must be a timedelta or a number of seconds, got 'soon'",
    ),
    ({"handler": 42}, "OnException handler must be a method name or a callable(workflow, error), got 42"),
    ({"handler": "not a name"}, "OnException handler must be a method name or a callable(workflow, error)"),
]


@pytest.mark.parametrize(("arguments", "message"), INVALID)
def test_invalid_arguments(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(DefinitionError, match=re.escape(message)):
        OnException(**arguments)


@pytest.mark.parametrize(
    "matcher",
    [42, KeyError(), "", "not a name", "shop..Error", ".Error", None],
)
def test_invalid_matchers(matcher: Any) -> None:
    message = (
        "OnException matches classes or class names (such as ConnectionError, 'PaymentDeclined' or "
        f"'shop.errors.PaymentDeclined'), got {matcher!r}"
    )
    with pytest.raises(DefinitionError, match=re.escape(message)):
        OnException(matcher, action="pause")


# -- matching -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("matching", "error", "expected"),
    [
        ((), ValueError("x"), True),
        ((), PaymentDeclined(), True),
        ((), KeyboardInterrupt(), False),  # a blanket policy is for Exceptions only
        ((PaymentError,), PaymentDeclined(), True),  # a subclass
        ((PaymentDeclined,), PaymentError(), False),  # not a superclass
        ((KeyError, PaymentError), PaymentDeclined(), True),  # any of them
        ((f"{HERE}.PaymentDeclined",), PaymentDeclined(), True),
        ((f"{HERE}.PaymentError",), PaymentDeclined(), True),  # an ancestor's name
        ((f"{HERE}.PaymentDeclined",), PaymentError(), False),
        (("PaymentDeclined",), PaymentDeclined(), True),  # a bare name, of the class
        (("PaymentError",), PaymentDeclined(), True),  # a bare name, of a class in the MRO
        (("PaymentDeclined",), PaymentError(), False),
        (("PaymentDeclined.Hard",), PaymentDeclined.Hard(), True),  # a qualified name
        (("Hard",), PaymentDeclined.Hard(), True),
        (("IntegrityError",), IntegrityError(), True),
        (("django.db.IntegrityError",), IntegrityError(), True),  # a re-export
        (("django.db.utils.IntegrityError",), IntegrityError(), True),
        (("django.db.utils.DatabaseError",), IntegrityError(), True),  # an ancestor's path
        (("django.db.IntegrityError",), DatabaseError(), False),
        (("django.db.DataError",), IntegrityError(), False),
        ((Retryable,), Flaky(), True),  # a mixin / tag class raised through multiple inheritance
        (("Retryable",), Flaky(), True),
        ((f"{HERE}.Retryable",), Flaky(), True),
        ((Retryable,), ValueError(), False),
        ((object,), ValueError(), True),
        (([[KeyError], [[Retryable]]],), Flaky(), True),  # nested lists flatten
        ((f"{HERE}.PaymentDeclined.Hard",), PaymentDeclined.Hard(), True),  # a nested class's qualname
        (("ConnectionError",), ConnectionResetError(), True),  # a builtin by bare name, via the MRO
        (("builtins.ConnectionError",), ConnectionResetError(), True),
        (("OSError",), ConnectionResetError(), True),
        (("ConnectionError",), ValueError(), False),
        (("nowhere_pkg.errors.Missing",), ValueError(), False),  # a path that does not import
        ((ValueError, f"{HERE}.PaymentError"), PaymentDeclined(), True),
    ],
)
def test_matches(matching: tuple[Any, ...], error: BaseException, expected: bool) -> None:
    assert OnException(*matching, action="pause").matches(error) is expected


# -- coerce ---------------------------------------------------------------------------------


def test_coerce() -> None:
    policy = OnException(KeyError, action="skip")
    assert coerce(policy) is policy
    assert coerce("cancel!") == OnException(action="cancel")
    assert coerce({"action": "reattempt", "wait": 5, "max_reattempts": 2}) == OnException(
        action="reattempt", wait=5, max_reattempts=2
    )
    assert coerce({"matching": KeyError, "action": "skip"}) == OnException(KeyError, action="skip")
    assert coerce({"matching": [KeyError, "a.B"], "action": "skip"}) == OnException(KeyError, "a.B", action="skip")
    assert coerce({"handler": "on_error", "report": "never"}) == OnException(handler="on_error", report="never")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            42,
            f"on_exception takes an OnException, an action (one of {ACTIONS}), a dict of OnException arguments, "
            "or a list of those, got 42",
        ),
        ("boom", f"OnException action must be one of {ACTIONS} (a trailing '!' is accepted), got 'boom'"),
        (
            {"action": "pause", "retries": 3},
            "on_exception dict has unknown key 'retries' (accepted: matching, action, wait, max_reattempts, "
            "terminal_action, report, handler)",
        ),
        ({"action": "pause", "wait": 3}, "OnException wait= only applies to action='reattempt'"),
        ({"matching": 42, "action": "pause"}, "OnException matches classes or class names"),
    ],
)
def test_coerce_rejects(value: object, message: str) -> None:
    with pytest.raises(DefinitionError, match=re.escape(message)):
        coerce(value)


def test_coerce_all() -> None:
    policy = OnException(KeyError, action="skip")
    assert coerce_all(None) == ()
    assert coerce_all(policy) == (policy,)
    assert coerce_all("pause") == (OnException(action="pause"),)
    assert coerce_all({"action": "cancel"}) == (OnException(action="cancel"),)
    assert coerce_all([policy, "skip", {"action": "cancel"}]) == (
        policy,
        OnException(action="skip"),
        OnException(action="cancel"),
    )
    assert coerce_all((policy,)) == (policy,)
    with pytest.raises(DefinitionError, match="on_exception takes an OnException"):
        coerce_all([policy, 3])


# -- resolve --------------------------------------------------------------------------------


STEP_SPECIFIC = OnException(PaymentError, action="skip")
STEP_BLANKET = OnException(action="cancel")
CLASS_BLANKET = OnException(action="reattempt")
CLASS_SPECIFIC = OnException(PaymentDeclined, action="cancel", report="never")
CLASS_OTHER = OnException(KeyError, action="skip")


@pytest.mark.parametrize(
    ("error", "step_policies", "class_policies", "expected"),
    [
        # The step's own policies come first, even a blanket one over a specific class policy.
        (PaymentDeclined(), [STEP_SPECIFIC], [CLASS_SPECIFIC], STEP_SPECIFIC),
        (PaymentDeclined(), [STEP_BLANKET], [CLASS_SPECIFIC], STEP_BLANKET),
        # The step's policies in order: the first that matches.
        (PaymentDeclined(), [CLASS_OTHER, STEP_SPECIFIC, STEP_BLANKET], [], STEP_SPECIFIC),
        # A step policy that does not match passes to the class's.
        (ValueError(), [STEP_SPECIFIC], [CLASS_SPECIFIC, CLASS_BLANKET], CLASS_BLANKET),
        # A specific class policy wins over a blanket one listed before it.
        (PaymentDeclined(), [], [CLASS_BLANKET, CLASS_SPECIFIC], CLASS_SPECIFIC),
        (PaymentDeclined(), [], [CLASS_OTHER, CLASS_BLANKET], CLASS_BLANKET),
        # Nothing matches: the default pause.
        (ValueError(), [STEP_SPECIFIC], [CLASS_SPECIFIC, CLASS_OTHER], DEFAULT),
        (ValueError(), [], [], DEFAULT),
    ],
)
def test_resolve_order(
    error: Exception, step_policies: list[OnException], class_policies: list[OnException], expected: OnException
) -> None:
    assert resolve(error, step_policies=step_policies, class_policies=class_policies) is expected


def test_default_pauses_and_reports() -> None:
    assert DEFAULT == OnException(action="pause")
    assert DEFAULT.decide(ValueError(), workflow=None) == Decision(
        outcome=Outcome(kind="pause"), report=True, terminal=True, handler_error=None
    )


# -- decide: actions ------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["pause", "cancel", "skip"])
@pytest.mark.parametrize(("report", "reported"), [("always", True), ("terminal_only", True), ("never", False)])
def test_decide_terminal_actions(action: str, report: str, reported: bool) -> None:
    decision = OnException(action=action, report=report).decide(ValueError(), workflow=None)
    assert decision == Decision(outcome=Outcome(kind=action), report=reported, terminal=True, handler_error=None)


@pytest.mark.parametrize(("report", "reported"), [("always", True), ("terminal_only", False), ("never", False)])
def test_decide_reattempt_not_spent(report: str, reported: bool) -> None:
    policy = OnException(action="reattempt", wait=timedelta(seconds=15), report=report)
    decision = policy.decide(ValueError(), workflow=None)
    assert decision == Decision(outcome=Outcome(kind="reattempt", wait=15.0), report=reported, terminal=False)


def test_decide_reattempt_without_max_never_counts() -> None:
    def count() -> int:
        raise AssertionError("counted although max_reattempts is not set")

    decision = OnException(action="reattempt").decide(ValueError(), workflow=None, consecutive_reattempts=count)
    assert decision.outcome == Outcome(kind="reattempt", wait=None)


@pytest.mark.parametrize(
    ("consecutive", "kind", "terminal"),
    [
        (0, "reattempt", False),
        (1, "reattempt", False),
        (2, "reattempt", False),
        (3, "cancel", True),
        (9, "cancel", True),
    ],
)
def test_decide_max_reattempts_counts_consecutive_reattempts(consecutive: int, kind: str, terminal: bool) -> None:
    policy = OnException(action="reattempt", wait=5, max_reattempts=3, terminal_action="cancel")
    calls = []

    def count() -> int:
        calls.append(1)
        return consecutive

    decision = policy.decide(ValueError(), workflow=None, consecutive_reattempts=count)
    assert decision.outcome.kind == kind
    assert decision.outcome.wait == (5.0 if kind == "reattempt" else None)
    assert decision.terminal is terminal
    assert calls == [1]  # read once, lazily


@pytest.mark.parametrize(("report", "reported"), [("always", True), ("terminal_only", True), ("never", False)])
def test_decide_spent_reattempt_applies_terminal_action(report: str, reported: bool) -> None:
    policy = OnException(action="reattempt", max_reattempts=1, report=report)
    decision = policy.decide(ValueError(), workflow=None, consecutive_reattempts=lambda: 1)
    assert decision == Decision(outcome=Outcome(kind="pause"), report=reported, terminal=True)


# -- decide: handlers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "kind", "terminal"),
    [("pause", "pause", True), ("cancel", "cancel", True), ("skip", "skip", True), ("finish", "finish", True)],
)
def test_handler_verb_decides(verb: str, kind: str, terminal: bool) -> None:
    policy = OnException(handler=lambda workflow, error: getattr(workflow, verb)())
    decision = policy.decide(ValueError(), workflow=Verbs())
    assert decision == Decision(outcome=Outcome(kind=kind), report=True, terminal=terminal)


def test_handler_by_method_name_gets_the_error() -> None:
    workflow = Verbs()
    error = ValueError("read timeout")
    decision = OnException(ValueError, handler="on_error").decide(error, workflow=workflow)
    assert workflow.seen == [error]
    assert decision == Decision(outcome=Outcome(kind="reattempt", wait=7), report=True, terminal=False)


def test_handler_callable_gets_workflow_and_error() -> None:
    seen = []

    def handler(workflow: Verbs, error: BaseException) -> None:
        seen.append((workflow, error))
        if "read" in str(error):
            workflow.reattempt(wait=5)
        workflow.skip()

    workflow, error = Verbs(), ValueError("write failed")
    decision = OnException(handler=handler).decide(error, workflow=workflow)
    assert seen == [(workflow, error)]
    assert decision.outcome == Outcome(kind="skip")


@pytest.mark.parametrize(
    ("report", "verb", "reported"),
    [
        ("always", "reattempt", True),
        ("always", "skip", True),
        ("terminal_only", "reattempt", False),
        ("terminal_only", "skip", True),
        ("never", "reattempt", False),
        ("never", "skip", False),
    ],
)
def test_handler_report_modes(report: str, verb: str, reported: bool) -> None:
    policy = OnException(handler=lambda workflow, error: getattr(workflow, verb)(), report=report)
    decision = policy.decide(ValueError(), workflow=Verbs())
    assert decision.report is reported
    assert decision.terminal is (verb != "reattempt")


@pytest.mark.parametrize("report", ["always", "terminal_only", "never"])
def test_handler_that_calls_no_verb_pauses(report: str) -> None:
    decision = OnException(handler=lambda workflow, error: None, report=report).decide(ValueError(), workflow=Verbs())
    assert decision == Decision(outcome=Outcome(kind="pause"), report=report != "never", terminal=True)


@pytest.mark.parametrize("report", ["always", "terminal_only", "never"])
def test_handler_that_raises_pauses_and_reports_its_own_error(report: str) -> None:
    broken = RuntimeError("handler broke")

    def handler(workflow: Verbs, error: BaseException) -> None:
        raise broken

    decision = OnException(handler=handler, report=report).decide(ValueError(), workflow=Verbs())
    assert decision == Decision(outcome=Outcome(kind="pause"), report=True, terminal=True, handler_error=broken)


def test_handler_name_missing_on_the_workflow_is_a_handler_error() -> None:
    decision = OnException(handler="nowhere").decide(ValueError(), workflow=Verbs())
    assert decision.outcome == Outcome(kind="pause")
    assert isinstance(decision.handler_error, AttributeError)
    assert decision.report is True


def test_handler_keyboard_interrupt_is_not_swallowed() -> None:
    def handler(workflow: Verbs, error: BaseException) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        OnException(handler=handler).decide(ValueError(), workflow=Verbs())


def test_name_matchers_and_handler_name() -> None:
    policy = OnException(KeyError, "ConnectionError", "shop.errors.Declined", handler="on_error")
    assert policy.name_matchers() == ("ConnectionError", "shop.errors.Declined")
    assert policy.handler_name() == "on_error"
    assert OnException(handler=lambda w, e: None).handler_name() is None
