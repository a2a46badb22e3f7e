"""The Workflow class DSL: declaration, validation at class creation, ordering, inheritance."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import pgflow
from pgflow import OnException, cancel_if, evaluation, fan_out, registry, step
from pgflow.core.definitions import StepDefinition
from pgflow.exceptions import DefinitionError
from pgflow.workflow import Workflow, WorkflowType


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Classes made by a test are forgotten afterwards, so no other test's check sees them.
    monkeypatch.setattr(registry, "_workflows", dict(registry._workflows))
    yield


PREFIX = f"{__name__}.Flow: "


def fresh(params: str = "self", returns: Any = None) -> Callable[..., Any]:
    """A new function object each time (the decorators mark the function itself)."""
    namespace: dict[str, Any] = {"returns": returns}
    exec(f"def body({params}):\n    return returns\n", namespace)  # noqa: S102 - test helper, fixed text
    return namespace["body"]


def build(bases: tuple[type, ...] = (Workflow,), name: str = "Flow", **namespace: Any) -> type[Workflow]:
    """Create a workflow class from a namespace, as a class statement would."""
    body = {"__module__": __name__, "__qualname__": name, **namespace}
    return WorkflowType(name, bases, body)  # type: ignore[return-value]


def raises(message: str, *, local: bool = False) -> pytest.RaisesContext[DefinitionError]:
    """The error names the class first, then the problem (``local``: a class statement in a test)."""
    prefix = re.escape(f"{__name__}.") + r"\w+\.<locals>\.Flow: " if local else re.escape(PREFIX)
    return pytest.raises(DefinitionError, match="^" + prefix + re.escape(message))


# -- declaration ----------------------------------------------------------------------------


class Onboarding(pgflow.Workflow):
    queue = "mail"
    priority = 2
    on_exception = [
        OnException(ConnectionError, action="reattempt", wait=timedelta(seconds=15), max_reattempts=5),
        OnException(action="pause"),
    ]
    removed_steps = ["legacy_step"]

    @pgflow.cancel_if
    def user_gone(self) -> bool:
        return self.subject is None

    @step
    def send_welcome(self) -> str:
        return "welcome"

    @step(
        wait=timedelta(days=2),
        skip_if="is_premium",
        timeout=timedelta(minutes=5),
        on_exception=OnException(action="skip"),
        queue="slow",
        priority=5,
    )
    def send_reminder(self) -> None:
        pass

    def is_premium(self) -> bool:
        return False

    @step(wait_for="payment_received", wait_timeout=timedelta(days=7), on_timeout="cancel")
    def charge(self, signal: Any) -> None:
        pass

    @fan_out(on_batch_failure="skip")
    def notify_vendors(self, batch: Any) -> None:
        pass


def test_steps_in_definition_order_with_their_kinds() -> None:
    steps = Onboarding.steps()
    assert steps.names() == ("send_welcome", "send_reminder", "charge", "notify_vendors")
    assert [d.kind for d in steps] == ["step", "step", "signal", "fan_out"]
    assert steps.removed == frozenset({"legacy_step"})


def test_options_become_the_definition() -> None:
    reminder = Onboarding.steps().get("send_reminder")
    assert reminder == StepDefinition(
        name="send_reminder",
        method="send_reminder",
        wait=172800.0,
        skip_if="is_premium",
        timeout=300.0,
        on_exception=(OnException(action="skip"),),
        queue="slow",
        priority=5,
    )
    charge = Onboarding.steps().get("charge")
    assert charge is not None
    assert (charge.wait_for, charge.wait_timeout, charge.on_timeout) == ("payment_received", 604800.0, "cancel")
    notify = Onboarding.steps().get("notify_vendors")
    assert notify is not None
    assert notify.on_batch_failure == "skip"


def test_class_values() -> None:
    assert Onboarding.workflow_path() == f"{__name__}.Onboarding"
    assert Onboarding.cancel_conditions() == ("user_gone",)
    assert Onboarding.policies() == (
        OnException(ConnectionError, action="reattempt", wait=timedelta(seconds=15), max_reattempts=5),
        OnException(action="pause"),
    )
    assert Onboarding.definition_digest() == Onboarding.steps().digest()
    assert Workflow.steps().names() == ()


def test_decorators_return_the_method_itself() -> None:
    flow = Onboarding(run=None)
    assert flow.send_welcome() == "welcome"
    assert flow.user_gone() is True


def test_bare_and_called_forms() -> None:
    flow = build(a=step(fresh()), b=step()(fresh()), c=fan_out(fresh("self, batch")), d=fan_out()(fresh("self, b")))
    assert [(d.name, d.kind) for d in flow.steps()] == [
        ("a", "step"),
        ("b", "step"),
        ("c", "fan_out"),
        ("d", "fan_out"),
    ]
    assert flow.steps().get("c").on_batch_failure == "pause"  # type: ignore[union-attr]


def test_parameter_names_are_free() -> None:
    flow = build(a=step(wait_for="x")(fresh("me, received")), b=fan_out(fresh("this, builder")))
    assert flow.steps().names() == ("a", "b")


def test_a_class_without_steps_is_allowed() -> None:
    base = build(queue="q")
    assert base.steps().names() == ()


# -- every wrong declaration ----------------------------------------------------------------


def _property(value: bool) -> property:
    return property(lambda self: value)


async def _async_gen_body(self: Any) -> Any:
    yield None


WRONG: list[tuple[str, Callable[[], dict[str, Any]], str]] = [
    (
        "unknown option",
        lambda: {"a": step(retries=3)(fresh())},
        "step 'a': unknown option 'retries' (accepted: wait, wait_until, skip_if, timeout, on_exception, queue, "
        "priority, before_step, after_step, wait_for, wait_timeout, on_timeout, concurrency, rate, needs_subject, "
        "approval)",
    ),
    ("zero timeout", lambda: {"a": step(timeout=0)(fresh())}, "step 'a': timeout must be more than 0 seconds, got 0"),
    (
        "negative timeout",
        lambda: {"a": step(timeout=timedelta(seconds=-1))(fresh())},
        "step 'a': timeout must be more than 0 seconds, got datetime.timedelta(days=-1, seconds=86399)",
    ),
    ("negative wait", lambda: {"a": step(wait=-5)(fresh())}, "step 'a': wait must be 0 or more seconds, got -5"),
    (
        "wait and wait_until",
        lambda: {"a": step(wait=5, wait_until="when")(fresh()), "when": fresh()},
        "step 'a': takes wait or wait_until, not both",
    ),
    (
        "before and after",
        lambda: {"a": step(fresh()), "b": step(before_step="a", after_step="a")(fresh())},
        "step 'b': takes before_step or after_step, not both",
    ),
    (
        "before a missing step",
        lambda: {"a": step(fresh()), "b": step(before_step="zz")(fresh())},
        "step 'b': before_step 'zz' names no step (defined so far: a)",
    ),
    (
        "after a missing step",
        lambda: {"a": step(fresh()), "b": step(after_step="zz")(fresh())},
        "step 'b': after_step 'zz' names no step (defined so far: a)",
    ),
    (
        "after a later step",
        lambda: {"a": step(after_step="b")(fresh()), "b": step(fresh())},
        "step 'a': after_step 'b' names no step (defined so far: none)",
    ),
    (
        "wait_for on a fan_out",
        lambda: {"n": fan_out(wait_for="x")(fresh("self, batch"))},
        "fan_out 'n': cannot take wait_for: a fan_out waits for its batch, not for a signal",
    ),
    (
        "wait_timeout on a fan_out",
        lambda: {"n": fan_out(wait_timeout=5)(fresh("self, batch"))},
        "fan_out 'n': cannot take wait_timeout: a fan_out waits for its batch, not for a signal",
    ),
    (
        "on_timeout on a fan_out",
        lambda: {"n": fan_out(on_timeout="skip")(fresh("self, batch"))},
        "fan_out 'n': cannot take on_timeout: a fan_out waits for its batch, not for a signal",
    ),
    (
        "wait_timeout without wait_for",
        lambda: {"a": step(wait_timeout=5)(fresh())},
        "step 'a': wait_timeout only applies to a step with wait_for",
    ),
    (
        "unknown on_timeout",
        lambda: {"a": step(wait_for="x", wait_timeout=5, on_timeout="retry")(fresh("self, signal"))},
        "step 'a': on_timeout must be one of 'pause', 'cancel', 'skip' (a trailing '!' is accepted), got 'retry'",
    ),
    (
        "unknown on_batch_failure",
        lambda: {"n": fan_out(on_batch_failure="ignore")(fresh("self, batch"))},
        "fan_out 'n': on_batch_failure must be one of 'pause', 'cancel', 'skip' (a trailing '!' is accepted), "
        "got 'ignore'",
    ),
    (
        "unknown step on_exception action",
        lambda: {"a": step(on_exception="retry")(fresh())},
        "step 'a': OnException action must be one of 'pause', 'reattempt', 'cancel', 'skip' "
        "(a trailing '!' is accepted), got 'retry'",
    ),
    (
        "unknown class on_exception action",
        lambda: {"on_exception": ["retry"], "a": step(fresh())},
        "on_exception: OnException action must be one of 'pause', 'reattempt', 'cancel', 'skip'",
    ),
    (
        "class on_exception of the wrong type",
        lambda: {"on_exception": 5, "a": step(fresh())},
        "on_exception must be a list of OnException (or action strings or dicts of OnException arguments), got 5",
    ),
    (
        "skip_if naming no method",
        lambda: {"a": step(skip_if="is_premium")(fresh())},
        "step 'a': skip_if 'is_premium' names no method of Flow (expected def is_premium(self))",
    ),
    (
        "skip_if naming a property",
        lambda: {"a": step(skip_if="is_premium")(fresh()), "is_premium": _property(True)},
        "step 'a': skip_if 'is_premium' names no method of Flow",
    ),
    (
        "skip_if method with parameters",
        lambda: {"a": step(skip_if="check")(fresh()), "check": fresh("self, other")},
        "step 'a': skip_if 'check' must take (self), got check(self, other)",
    ),
    (
        "skip_if callable with the wrong parameters",
        lambda: {"a": step(skip_if=lambda: True)(fresh())},
        "step 'a': skip_if <lambda> must take (workflow), got ()",
    ),
    (
        "wait naming no method",
        lambda: {"a": step(wait="delay")(fresh())},
        "step 'a': wait 'delay' names no method of Flow (expected def delay(self))",
    ),
    (
        "wait_until naming no method",
        lambda: {"a": step(wait_until="deadline")(fresh())},
        "step 'a': wait_until 'deadline' names no method of Flow (expected def deadline(self))",
    ),
    (
        "a plain step taking a signal",
        lambda: {"a": step(fresh("self, signal"))},
        "step 'a': a step without wait_for takes (self), got a(self, signal) "
        "(to wait for a signal, give @step(wait_for=...))",
    ),
    (
        "a plain step without self",
        lambda: {"a": step(fresh(""))},
        "step 'a': a step without wait_for takes (self), got a()",
    ),
    (
        "a wait_for step without the signal",
        lambda: {"a": step(wait_for="paid")(fresh())},
        "step 'a': a step with wait_for takes (self, signal), got a(self)",
    ),
    (
        "a fan_out without the batch",
        lambda: {"n": fan_out(fresh())},
        "step 'n': a fan_out takes (self, batch), got n(self)",
    ),
    (
        "a fan_out with a required keyword",
        lambda: {"n": fan_out(fresh("self, batch, *, extra"))},
        "step 'n': a fan_out takes (self, batch), got n(self, batch, *, extra)",
    ),
    (
        "an async generator step",
        lambda: {"a": step(_async_gen_body)},
        "step 'a': the body must return its output (def or async def), not yield it",
    ),
    ("a reserved step name", lambda: {"run": step(fresh())}, "a step cannot be named 'run'"),
    ("another reserved step name", lambda: {"start": step(fresh())}, "a step cannot be named 'start'"),
    (
        "a reserved cancel_if name",
        lambda: {"pause": cancel_if(fresh())},
        "a cancel_if condition cannot be named 'pause'",
    ),
    (
        "a cancel_if with parameters",
        lambda: {"gone": cancel_if(fresh("self, x"))},
        "cancel_if 'gone' must take (self), got gone(self, x)",
    ),
    (
        "a missing handler method",
        lambda: {"on_exception": [OnException(handler="on_error")], "a": step(fresh())},
        "on_exception: OnException handler 'on_error' names no method of Flow (expected def on_error(self, error))",
    ),
    (
        "a step's missing handler method",
        lambda: {"a": step(on_exception=OnException(handler="on_error"))(fresh())},
        "step 'a': OnException handler 'on_error' names no method of Flow",
    ),
    (
        "a handler method without the error",
        lambda: {"on_exception": [{"handler": "on_error"}], "a": step(fresh()), "on_error": fresh()},
        "on_exception: OnException handler 'on_error' must take (self, error), got on_error(self)",
    ),
    (
        "a handler callable with the wrong parameters",
        lambda: {"on_exception": [OnException(handler=lambda w: None)], "a": step(fresh())},
        "on_exception: OnException handler <lambda> must take (workflow, error), got (w)",
    ),
    (
        "an empty queue",
        lambda: {"queue": "", "a": step(fresh())},
        "queue must be None or 1-100 letters, digits, '_', '.', ':' or '-', got ''",
    ),
    (
        "a queue that is no string",
        lambda: {"queue": 5},
        "queue must be None or 1-100 letters, digits, '_', '.', ':' or '-', got 5",
    ),
    (
        "a priority that is no int",
        lambda: {"priority": "high"},
        "priority must be a whole number between -2147483648 and 2147483647, got 'high'",
    ),
    ("a priority of None", lambda: {"priority": None}, "priority must be a whole number between"),
    (
        "removed_steps as a string",
        lambda: {"removed_steps": "legacy"},
        "removed_steps must be a list of step names, got 'legacy'",
    ),
    (
        "removed_steps with a non-name",
        lambda: {"removed_steps": ["ok", 3]},
        "removed_steps must be a list of step names, got 3 in it",
    ),
    (
        "a step listed in removed_steps",
        lambda: {"removed_steps": ["a"], "a": step(fresh())},
        "step 'a' is listed in removed_steps: a removed step's name cannot be used again",
    ),
    (
        "a step in a staticmethod",
        lambda: {"a": staticmethod(step(fresh()))},
        "'a': a step or cancel_if condition is a plain method, not a staticmethod",
    ),
]


@pytest.mark.parametrize(("namespace", "message"), [pytest.param(n, m, id=i) for i, n, m in WRONG])
def test_wrong_declarations_fail_at_class_creation(namespace: Callable[[], dict[str, Any]], message: str) -> None:
    with raises(message):
        build(**namespace())


def test_wrong_declarations_are_value_errors_and_register_nothing() -> None:
    with pytest.raises(ValueError):
        build(a=step(timeout=0)(fresh()))
    assert f"{__name__}.Flow" not in [w.workflow_path() for w in registry.registered()]


def test_duplicate_step_names_in_one_class_body() -> None:
    with raises(
        "'send' is defined twice in the class body, and the second definition would silently replace", local=True
    ):

        class Flow(Workflow):
            @step
            def send(self) -> None:
                pass

            @step(timeout=5)
            def send(self) -> None:  # noqa: F811 - the duplicate under test
                pass


def test_a_plain_def_silently_replacing_a_step_is_refused() -> None:
    with raises("'send' is defined twice in the class body", local=True):

        class Flow(Workflow):
            @step
            def send(self) -> None:
                pass

            def send(self) -> None:  # noqa: F811 - the duplicate under test
                pass


def test_decorating_a_plain_def_by_assignment_is_fine() -> None:
    class Flow(Workflow):
        def send(self) -> None:
            pass

        send = step(send)

    assert Flow.steps().names() == ("send",)


@pytest.mark.parametrize(
    ("decorate", "message"),
    [
        (
            lambda: step("send_welcome"),
            "@step takes its options as keywords (@step or @step(wait=...)), got 'send_welcome'; a step is named "
            "after its method",
        ),
        (lambda: step(print), "@step decorates a method defined with def, got <built-in function print>"),
        (lambda: fan_out(42), "@fan_out decorates a method defined with def, got 42"),
        (lambda: cancel_if("gone"), "@cancel_if takes its options as keywords"),
        (lambda: step(step(fresh())), "@step on body: it is already declared as a step; use one decorator"),
        (lambda: fan_out(step(fresh())), "@fan_out on body: it is already declared as a step; use one decorator"),
        (
            lambda: step(cancel_if(fresh())),
            "@step on body: it is already declared as a cancel_if condition; use one decorator",
        ),
    ],
)
def test_decorator_misuse(decorate: Callable[[], Any], message: str) -> None:
    with pytest.raises(DefinitionError, match="^" + re.escape(message)):
        decorate()


# -- inheritance ----------------------------------------------------------------------------


class Parent(Workflow):
    queue = "parent-q"
    on_exception = [OnException(KeyError, action="skip")]

    @cancel_if
    def parent_gone(self) -> bool:
        return False

    @step
    def one(self) -> str:
        return "parent one"

    @step(timeout=10, queue="fast")
    def two(self) -> str:
        return "parent two"

    @step
    def three(self) -> str:
        return "parent three"


PARENT_NAMES = ("one", "two", "three")


def test_a_subclass_appends_and_leaves_the_parent_alone() -> None:
    parent_steps, parent_policies = Parent.steps(), Parent.policies()

    class Child(Parent):
        on_exception = [OnException(action="cancel")]

        @cancel_if
        def child_gone(self) -> bool:
            return False

        @step
        def four(self) -> None:
            pass

    assert Child.steps().names() == (*PARENT_NAMES, "four")
    assert Child.policies() == (OnException(KeyError, action="skip"), OnException(action="cancel"))
    assert Child.cancel_conditions() == ("parent_gone", "child_gone")
    # The parent's values are the very same objects as before.
    assert Parent.steps() is parent_steps and Parent.steps().names() == PARENT_NAMES
    assert Parent.policies() is parent_policies
    assert Parent.cancel_conditions() == ("parent_gone",)
    assert Child.definition_digest() != Parent.definition_digest()


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        ({"before_step": "one"}, ("new", "one", "two", "three")),
        ({"before_step": "three"}, ("one", "two", "new", "three")),
        ({"after_step": "one"}, ("one", "new", "two", "three")),
        ({"after_step": "three"}, ("one", "two", "three", "new")),
    ],
)
def test_before_and_after_place_a_subclass_step(placement: dict[str, str], expected: tuple[str, ...]) -> None:
    child = build(bases=(Parent,), new=step(**placement)(fresh()))
    assert child.steps().names() == expected
    assert Parent.steps().names() == PARENT_NAMES


def test_placement_against_a_step_placed_earlier_in_the_same_class() -> None:
    child = build(bases=(Parent,), a=step(after_step="one")(fresh()), b=step(after_step="a")(fresh()))
    assert child.steps().names() == ("one", "a", "b", "two", "three")


def test_a_plain_redefinition_overrides_the_body_in_place() -> None:
    class Child(Parent):
        @step
        def four(self) -> None:
            pass

        def two(self) -> str:
            return "child two"

    assert Child.steps().names() == (*PARENT_NAMES, "four")
    assert Child.steps().get("two") == Parent.steps().get("two")  # same options
    assert evaluation.invoke(Child(run=None), Child.steps().get("two")) == "child two"  # type: ignore[arg-type]
    assert evaluation.invoke(Parent(run=None), Parent.steps().get("two")) == "parent two"  # type: ignore[arg-type]
    assert Child.definition_digest() == build(bases=(Parent,), four=step(fresh())).definition_digest()


def test_a_redeclaration_changes_the_options_in_place() -> None:
    class Child(Parent):
        @step(wait=60)
        def two(self) -> str:
            return "child two"

    definition = Child.steps().get("two")
    assert Child.steps().names() == PARENT_NAMES
    # The new declaration is the whole declaration: the parent's timeout and queue are not kept.
    assert definition == StepDefinition(name="two", wait=60.0)
    assert Parent.steps().get("two") == StepDefinition(name="two", timeout=10.0, queue="fast")
    assert Child.definition_digest() == Parent.definition_digest()


def test_a_redeclaration_may_change_the_kind_in_place() -> None:
    child = build(bases=(Parent,), two=fan_out(fresh("self, batch")))
    assert [d.kind for d in child.steps()] == ["step", "fan_out", "step"]
    assert child.definition_digest() != Parent.definition_digest()


@pytest.mark.parametrize(
    ("namespace", "message"),
    [
        (
            lambda: {"two": step(after_step="three")(fresh())},
            "step 'two' is inherited and a redeclaration keeps its place: before_step and after_step only place "
            "new steps",
        ),
        (lambda: {"two": "not a method"}, "step 'two': the body must be a method defined with def, got 'not a method'"),
        (lambda: {"two": staticmethod(fresh(""))}, "step 'two': the body must be a method defined with def"),
        (
            lambda: {"two": fresh("self, extra")},
            "step 'two': a step without wait_for takes (self), got two(self, extra)",
        ),
        (
            lambda: {"two": _async_gen_body},
            "step 'two': the body must return its output (def or async def), not yield it",
        ),
        (
            lambda: {"one": cancel_if(fresh())},
            "'one' cannot be both a step and a cancel_if condition; give a cancel_if condition its own name",
        ),
        (
            lambda: {"parent_gone": step(fresh())},
            "'parent_gone' cannot be both a step and a cancel_if condition; give a step its own name",
        ),
        (lambda: {"four": step(before_step="missing")(fresh())}, "step 'four': before_step 'missing' names no step"),
    ],
)
def test_wrong_overrides(namespace: Callable[[], dict[str, Any]], message: str) -> None:
    with raises(message):
        build(bases=(Parent,), **namespace())


def test_a_subclass_without_declarations_shares_the_values() -> None:
    child = build(bases=(Parent,))
    assert child.steps() == Parent.steps()
    assert child.policies() == Parent.policies()
    assert child.cancel_conditions() == Parent.cancel_conditions()
    assert child.definition_digest() == Parent.definition_digest()
    assert child.queue == "parent-q"


def test_overriding_a_cancel_if_body_keeps_one_condition() -> None:
    child = build(bases=(Parent,), parent_gone=fresh(returns=True))
    assert child.cancel_conditions() == ("parent_gone",)
    assert evaluation.should_cancel(child(run=None)) is True
    assert evaluation.should_cancel(Parent(run=None)) is False
    child = build(bases=(Parent,), parent_gone=cancel_if(fresh(returns=True)))
    assert child.cancel_conditions() == ("parent_gone",)


def test_three_levels() -> None:
    middle = build(bases=(Parent,), name="Middle", four=step(fresh()), on_exception=["cancel"])
    leaf = build(bases=(middle,), name="Leaf", zero=step(before_step="one")(fresh()), on_exception=[{"action": "skip"}])
    assert leaf.steps().names() == ("zero", *PARENT_NAMES, "four")
    assert leaf.policies() == (
        OnException(KeyError, action="skip"),
        OnException(action="cancel"),
        OnException(action="skip"),
    )
    assert middle.steps().names() == (*PARENT_NAMES, "four")


def test_mixins_contribute_along_the_mro() -> None:
    class Audited:
        on_exception = [OnException(LookupError, action="cancel")]

        @cancel_if
        def audit_blocked(self) -> bool:
            return False

        @step
        def audit(self) -> None:
            pass

    class Flow(Audited, Parent):
        @step
        def last(self) -> None:
            pass

    # Reversed MRO: Parent's declarations, then the mixin's, then the class's own.
    assert Flow.steps().names() == (*PARENT_NAMES, "audit", "last")
    assert Flow.cancel_conditions() == ("parent_gone", "audit_blocked")
    assert Flow.policies() == (OnException(KeyError, action="skip"), OnException(LookupError, action="cancel"))


# -- removed steps --------------------------------------------------------------------------


def test_removed_steps_are_remembered_and_inherited() -> None:
    base = build(removed_steps=["legacy"], a=step(fresh()))
    child = build(bases=(base,), removed_steps=("older",), b=step(fresh()))
    assert base.steps().removed == frozenset({"legacy"})
    assert child.steps().removed == frozenset({"legacy", "older"})
    assert child.steps().names() == ("a", "b")


def test_a_subclass_may_remove_an_inherited_step() -> None:
    child = build(bases=(Parent,), removed_steps=["two"])
    assert child.steps().names() == ("one", "three")
    assert child.steps().removed == frozenset({"two"})
    assert child.steps().next_after("two", history=["one"]) == Parent.steps().get("three")
    assert Parent.steps().names() == PARENT_NAMES


def test_a_subclass_cannot_reuse_a_removed_name() -> None:
    base = build(name="Base", removed_steps=["legacy"], a=step(fresh()))
    with raises("step 'legacy' is listed in removed_steps"):
        build(bases=(base,), legacy=step(fresh()))


# -- job options ----------------------------------------------------------------------------


def test_queue_and_priority_for(settings: Any) -> None:
    settings.PGFLOW = {"QUEUE": "from-settings"}
    assert Onboarding.queue_for("send_reminder") == "slow"  # the step's own
    assert Onboarding.queue_for("send_welcome") == "mail"  # the class's
    assert Onboarding.priority_for("send_reminder") == 5
    assert Onboarding.priority_for("send_welcome") == 2
    plain = build(a=step(fresh()), b=step(priority=-1)(fresh()))
    assert plain.queue_for("a") == "from-settings"  # the setting
    assert (plain.priority_for("a"), plain.priority_for("b")) == (0, -1)
    # A name the class does not define (a removed step) gets the class-wide values.
    assert Onboarding.queue_for("legacy_step") == "mail"
    assert plain.priority_for("legacy_step") == 0


def test_queue_default_setting(settings: Any) -> None:
    settings.PGFLOW = {}
    assert build(a=step(fresh())).queue_for("a") == "workflows"


# -- start() and runs() ---------------------------------------------------------------------


# start() is tested against the real store and PostgreSQL, not a stand-in for them:
# tests/integration/test_engine.py (input, subject, key) and tests/acceptance/test_promises.py.


def test_runs_filters_by_the_workflow_path() -> None:
    runs = Onboarding.runs()  # a lazy queryset: no query is run here
    assert runs.model.__name__ == "WorkflowRun"
    where = runs.query.where.children[0]
    assert (where.lhs.target.name, where.rhs) == ("workflow_class", f"{__name__}.Onboarding")


def test_importing_the_module_touches_no_models() -> None:
    code = (
        "import sys, pgflow.workflow, pgflow.registry, pgflow.core.policy, pgflow.core.definitions\n"
        "loaded = sorted(m for m in sys.modules if m in ('pgflow.models', 'pgflow.store', 'django.db.models'))\n"
        "print(loaded)"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert output.stdout.strip() == "[]"


# -- the user's namespace ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "run",
        "subject",
        "input",
        "outputs",
        "children",
        "step_name",
        "attempt",
        "skip",
        "pause",
        "cancel",
        "finish",
        "reattempt",
        "start",
        "runs",
        "definition_digest",
        "set_attributes",
        "attributes_set",
    ],
)
def test_an_attribute_shadowing_the_documented_api_is_refused(name: str) -> None:
    with pytest.raises(DefinitionError) as raised:
        type("Shadowing", (Workflow,), {name: fresh(), "only": step(fresh())})
    message = str(raised.value)
    assert f"{name!r} would shadow Workflow's own {name!r}" in message
    assert "reserved names: attempt, attributes_set, cancel, cancel_conditions, children, definition_digest" in message


def test_a_plain_value_or_a_mixin_shadowing_the_api_is_refused() -> None:
    with pytest.raises(DefinitionError, match="'subject' would shadow"):
        type("Plain", (Workflow,), {"subject": None, "only": step(fresh())})

    class Mixin:
        def input(self) -> dict[str, Any]:
            return {}

    with pytest.raises(DefinitionError, match=r"'input' \(from .*Mixin\) would shadow"):
        type("Mixed", (Mixin, Workflow), {"only": step(fresh())})


def test_a_shadowed_workflow_path_is_refused_like_any_other_name() -> None:
    # The refusal names the class by Workflow's own path, not by the method it refuses.
    for value in (lambda self: "x", "x", property(lambda self: "x")):
        with pytest.raises(DefinitionError, match=r"\.Pathless: 'workflow_path' would shadow"):
            type("Pathless", (Workflow,), {"workflow_path": value, "only": step(fresh())})


@pytest.mark.parametrize(
    "name", ["should_skip", "should_cancel", "delay_seconds", "invoke", "evaluate", "decide", "prepare", "helper"]
)
def test_helpers_outside_the_documented_api_are_the_users(name: str) -> None:
    flow = type("Helpers", (Workflow,), {name: fresh(returns=name), "only": step(fresh(returns="ok"))})
    assert getattr(flow(run=None), name)() == name


def test_the_class_options_may_be_set() -> None:
    flow = type("Options", (Workflow,), {"queue": "mail", "priority": 3, "removed_steps": [], "only": step(fresh())})
    assert flow.queue_for("only") == "mail"


# -- class-wide wait / wait_until -------------------------------------------------------------


def test_class_wide_wait_applies_to_every_step_that_sets_none() -> None:
    from datetime import UTC, datetime

    class Reminders(Workflow):
        wait = timedelta(hours=1)

        def tomorrow(self) -> datetime:
            return datetime(2030, 1, 2, tzinfo=UTC)

        @step
        def first(self) -> None: ...

        @step(wait=0)
        def own_wait(self) -> None: ...

        @step(wait_until="tomorrow")
        def own_wait_until(self) -> None: ...

        @fan_out
        def fan(self, batch: Any) -> None: ...

    steps = Reminders.steps()
    assert [(d.name, d.wait, d.wait_until) for d in steps] == [
        ("first", 3600.0, None),
        ("own_wait", 0.0, None),
        ("own_wait_until", None, "tomorrow"),
        ("fan", 3600.0, None),
    ]
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert evaluation.delay_seconds(Reminders(run=None), steps.get("first"), now) == 3600.0  # type: ignore[arg-type]

    class Later(Reminders):
        wait = None
        wait_until = "tomorrow"

    assert [(d.name, d.wait, d.wait_until) for d in Later.steps()] == [
        ("first", None, "tomorrow"),
        ("own_wait", 0.0, None),
        ("own_wait_until", None, "tomorrow"),
        ("fan", None, "tomorrow"),
    ]
    assert Reminders.steps().get("first").wait == 3600.0  # type: ignore[union-attr]  # the parent is unchanged


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"wait": True},
            "class-wide options: wait must be a timedelta, a number of seconds, a method name or a "
            "callable returning either, got True",
        ),
        ({"wait": -1}, "class-wide options: wait must be 0 or more seconds, got -1"),
        ({"wait": 5, "wait_until": "later"}, "class-wide options: takes wait or wait_until, not both"),
        ({"wait": "nope"}, "step 'only': wait 'nope' names no method of Waits (expected def nope(self))"),
    ],
)
def test_a_wrong_class_wide_wait_is_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(DefinitionError, match=re.escape(message)):
        type("Waits", (Workflow,), {**options, "only": step(fresh())})
