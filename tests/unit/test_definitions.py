"""Step definitions: option parsing and validation, the ordered StepList, the digest."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import timedelta

import pytest

from pgflow.core.definitions import (
    FAN_OUT_OPTIONS,
    STEP_OPTIONS,
    StepDefinition,
    StepList,
    declare,
)
from pgflow.core.durations import seconds
from pgflow.core.policy import OnException
from pgflow.exceptions import DefinitionError, StepNotFound

# The digest of [["send_welcome","step"],["charge","signal"],["notify_vendors","fan_out"]],
# computed once by hand (sha256 of the compact JSON); it must never change.
KNOWN_DIGEST = "e22201c2c206bb3658a57dc82d7d81e48fdfd7c97a68ff4693157c16f67f447f"
EMPTY_DIGEST = "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"


def make(*names: str, removed: tuple[str, ...] = ()) -> StepList:
    return StepList(steps=tuple(StepDefinition(name=n) for n in names), removed=frozenset(removed))


def known() -> StepList:
    return StepList(
        steps=(
            declare("send_welcome"),
            declare("charge", wait_for="paid"),
            declare("notify_vendors", fan_out=True),
        )
    )


# -- seconds() ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "positive", "expected"),
    [
        (timedelta(minutes=2), True, 120.0),
        (timedelta(milliseconds=500), True, 0.5),
        (3, True, 3.0),
        (2.5, False, 2.5),
        (0, False, 0.0),
        (timedelta(0), False, 0.0),
    ],
)
def test_seconds_converts(value: object, positive: bool, expected: float) -> None:
    result = seconds(value, "timeout", positive=positive)
    assert result == expected
    assert type(result) is float


@pytest.mark.parametrize(
    ("value", "positive", "message"),
    [
        ("5", True, "timeout must be a timedelta or a number of seconds, got '5'"),
        (True, True, "timeout must be a timedelta or a number of seconds, got True"),
        (None, False, "timeout must be a timedelta or a number of seconds, got None"),
        (float("inf"), True, "timeout must be a finite number of seconds, got inf"),
        (float("nan"), False, "timeout must be a finite number of seconds, got nan"),
        (0, True, "timeout must be more than 0 seconds, got 0"),
        (timedelta(seconds=-1), True, "timeout must be more than 0 seconds"),
        (-1, False, "timeout must be 0 or more seconds, got -1"),
    ],
)
def test_seconds_rejects(value: object, positive: bool, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        seconds(value, "timeout", positive=positive)


# -- declare(): parsing ---------------------------------------------------------------------


def test_declare_plain_step_defaults() -> None:
    definition = declare("send_welcome")
    assert definition == StepDefinition(name="send_welcome", kind="step", method="send_welcome")
    assert (definition.wait, definition.timeout, definition.on_exception) == (None, None, ())
    assert definition.on_timeout == "pause"
    assert definition.on_batch_failure is None
    assert definition.job_options == {}


def test_declare_converts_every_option() -> None:
    policy = OnException(KeyError, action="skip")
    definition = declare(
        "charge",
        wait=timedelta(hours=1),
        skip_if="is_premium",
        timeout=timedelta(minutes=5),
        on_exception=[policy, "cancel!"],
        queue="slow",
        priority=-3,
        wait_for="payment_received",
        wait_timeout=timedelta(days=7),
        on_timeout="skip!",
        needs_subject=True,
    )
    assert definition.kind == "signal"
    assert definition.needs_subject is True
    assert definition.wait == 3600.0
    assert definition.skip_if == "is_premium"
    assert definition.timeout == 300.0
    assert definition.on_exception == (policy, OnException(action="cancel"))
    assert (definition.queue, definition.priority) == ("slow", -3)
    assert definition.job_options == {"queue": "slow", "priority": -3}
    assert definition.wait_for == "payment_received"
    assert (definition.wait_timeout, definition.on_timeout) == (604800.0, "skip")


def test_declare_keeps_method_names_and_callables_as_given() -> None:
    def later(workflow: object) -> timedelta:
        return timedelta(0)

    assert declare("a", wait="reminder_delay").wait == "reminder_delay"
    assert declare("a", wait=later).wait is later
    assert declare("a", wait_until="deadline").wait_until == "deadline"
    assert declare("a", skip_if=later).skip_if is later


def test_declare_fan_out() -> None:
    definition = declare("notify", fan_out=True, queue="bulk")
    assert (definition.kind, definition.on_batch_failure, definition.queue) == ("fan_out", "pause", "bulk")
    assert declare("notify", fan_out=True, on_batch_failure="cancel!").on_batch_failure == "cancel"


def test_declare_signal_without_timeout_keeps_pause() -> None:
    definition = declare("charge", wait_for="paid")
    assert (definition.kind, definition.wait_timeout, definition.on_timeout) == ("signal", None, "pause")


def test_placement_options_are_validated_but_not_stored() -> None:
    definition = declare("b", after_step="a")
    assert not hasattr(definition, "after_step")


# -- declare(): every wrong option ----------------------------------------------------------

STEP_ERRORS = [
    (
        {"bogus": 1},
        "step 'a': unknown option 'bogus' (accepted: wait, wait_until, skip_if, timeout, on_exception, queue, "
        "priority, before_step, after_step, wait_for, wait_timeout, on_timeout, concurrency, rate, needs_subject, "
        "approval)",
    ),
    ({"needs_subject": "yes"}, "step 'a': needs_subject must be True or False, got 'yes'"),
    ({"on_batch_failure": "pause"}, "step 'a': unknown option 'on_batch_failure' (accepted: wait,"),
    ({"timeout": 0}, "step 'a': timeout must be more than 0 seconds, got 0"),
    ({"timeout": timedelta(seconds=-5)}, "step 'a': timeout must be more than 0 seconds"),
    ({"timeout": "5m"}, "step 'a': timeout must be a timedelta or a number of seconds, got '5m'"),
    ({"wait": -1}, "step 'a': wait must be 0 or more seconds, got -1"),
    ({"wait": timedelta(days=-1)}, "step 'a': wait must be 0 or more seconds"),
    (
        {"wait": [1]},
        "step 'a': wait must be a timedelta, a number of seconds, a method name or a callable returning "
        "either, got [1]",
    ),
    ({"wait": True}, "step 'a': wait must be a timedelta, a number of seconds, a method name or a callable"),
    ({"wait": "not a name"}, "step 'a': wait must name a method of the workflow, got 'not a name'"),
    ({"wait": 5, "wait_until": "deadline"}, "step 'a': takes wait or wait_until, not both"),
    (
        {"wait_until": 5},
        "step 'a': wait_until must be a method name or a callable(workflow) returning an aware datetime, got 5",
    ),
    ({"skip_if": True}, "step 'a': skip_if must be a method name or a callable(workflow) returning a bool, got True"),
    ({"queue": ""}, "step 'a': queue must be None or 1-100 letters, digits, '_', '.', ':' or '-', got ''"),
    ({"queue": 3}, "step 'a': queue must be None or 1-100 letters, digits, '_', '.', ':' or '-', got 3"),
    ({"priority": "high"}, "step 'a': priority must be a whole number between -2147483648 and 2147483647, got 'high'"),
    ({"priority": 2**40}, "step 'a': priority must be a whole number between -2147483648 and 2147483647"),
    ({"priority": True}, "step 'a': priority must be a whole number between"),
    ({"before_step": "x", "after_step": "y"}, "step 'a': takes before_step or after_step, not both"),
    ({"before_step": 3}, "step 'a': before_step must be the name of a step, got 3"),
    ({"wait_for": ""}, "step 'a': wait_for must be a signal name (a non-empty string), got ''"),
    ({"wait_timeout": 60}, "step 'a': wait_timeout only applies to a step with wait_for"),
    ({"wait_for": "paid", "wait_timeout": 0}, "step 'a': wait_timeout must be more than 0 seconds, got 0"),
    ({"on_timeout": "cancel"}, "step 'a': on_timeout only applies to a step with wait_for and wait_timeout"),
    (
        {"wait_for": "paid", "on_timeout": "cancel"},
        "step 'a': on_timeout only applies to a step with wait_for and wait_timeout",
    ),
    (
        {"wait_for": "paid", "wait_timeout": 60, "on_timeout": "reattempt"},
        "step 'a': on_timeout must be one of 'pause', 'cancel', 'skip' (a trailing '!' is accepted), got 'reattempt'",
    ),
    (
        {"on_exception": "explode"},
        "step 'a': OnException action must be one of 'pause', 'reattempt', 'cancel', 'skip' "
        "(a trailing '!' is accepted), got 'explode'",
    ),
    ({"on_exception": 42}, "step 'a': on_exception takes an OnException, an action (one of 'pause',"),
]


@pytest.mark.parametrize(("options", "message"), STEP_ERRORS)
def test_declare_rejects(options: dict[str, object], message: str) -> None:
    with pytest.raises(DefinitionError, match=re.escape(message)):
        declare("a", **options)


FAN_OUT_ERRORS = [
    ({"wait_for": "paid"}, "fan_out 'n': cannot take wait_for: a fan_out waits for its batch, not for a signal"),
    ({"wait_timeout": 5}, "fan_out 'n': cannot take wait_timeout: a fan_out waits for its batch"),
    ({"on_timeout": "skip"}, "fan_out 'n': cannot take on_timeout: a fan_out waits for its batch"),
    (
        {"on_batch_failure": "retry"},
        "fan_out 'n': on_batch_failure must be one of 'pause', 'cancel', 'skip' (a trailing '!' is accepted), "
        "got 'retry'",
    ),
    (
        {"bogus": 1},
        "fan_out 'n': unknown option 'bogus' (accepted: wait, wait_until, skip_if, timeout, on_exception, queue, "
        "priority, before_step, after_step, concurrency, rate, needs_subject, on_batch_failure)",
    ),
    ({"timeout": -1}, "fan_out 'n': timeout must be more than 0 seconds, got -1"),
]


@pytest.mark.parametrize(("options", "message"), FAN_OUT_ERRORS)
def test_declare_fan_out_rejects(options: dict[str, object], message: str) -> None:
    with pytest.raises(DefinitionError, match=re.escape(message)):
        declare("n", fan_out=True, **options)


def test_option_lists() -> None:
    assert set(FAN_OUT_OPTIONS) == (set(STEP_OPTIONS) - {"wait_for", "wait_timeout", "on_timeout", "approval"}) | {
        "on_batch_failure"
    }


def test_definition_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        declare("a", timeout=0)


# -- StepDefinition invariants --------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "not valid"}, "a step name must be a Python identifier, got 'not valid'"),
        ({"name": ""}, "a step name must be a Python identifier, got ''"),
        ({"name": "a", "kind": "task"}, "step 'a': kind must be one of 'step', 'signal', 'fan_out', got 'task'"),
        ({"name": "a", "kind": "signal"}, "step 'a': a step has kind 'signal' exactly when it has wait_for"),
        ({"name": "a", "wait_for": "x"}, "step 'a': a step has kind 'signal' exactly when it has wait_for"),
        ({"name": "a", "on_batch_failure": "pause"}, "step 'a': only a fan_out takes on_batch_failure"),
        (
            {"name": "a", "kind": "fan_out", "on_batch_failure": "retry"},
            "step 'a': on_batch_failure must be one of 'pause', 'cancel', 'skip', got 'retry'",
        ),
        ({"name": "a", "on_timeout": "later"}, "step 'a': on_timeout must be one of 'pause', 'cancel', 'skip'"),
    ],
)
def test_step_definition_invariants(fields: dict[str, object], message: str) -> None:
    with pytest.raises(DefinitionError, match=re.escape(message)):
        StepDefinition(**fields)  # type: ignore[arg-type]


def test_step_definition_is_frozen_and_keyword_only() -> None:
    definition = StepDefinition(name="a")
    assert definition.method == "a"
    with pytest.raises(AttributeError):
        definition.name = "b"  # type: ignore[misc]
    with pytest.raises(TypeError):
        StepDefinition("a")  # type: ignore[misc]


# -- StepList -------------------------------------------------------------------------------


def test_step_list_queries() -> None:
    steps = make("a", "b", "c", removed=("old",))
    assert steps.names() == ("a", "b", "c")
    assert len(steps) == 3
    assert [d.name for d in steps] == ["a", "b", "c"]
    assert steps.get("b") == StepDefinition(name="b")
    assert steps.get("old") is None
    assert (steps.index("a"), steps.index("c"), steps.index("old")) == (0, 2, None)
    assert steps.first() == StepDefinition(name="a")
    assert steps.next_after("a") == StepDefinition(name="b")
    assert steps.next_after("c") is None
    assert "a" in steps and "old" not in steps
    assert steps.removed == frozenset({"old"})


def test_empty_step_list() -> None:
    steps = StepList()
    assert (len(steps), steps.first(), steps.names()) == (0, None, ())


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (None, None, ("a", "b", "c", "new")),
        ("a", None, ("new", "a", "b", "c")),
        ("c", None, ("a", "b", "new", "c")),
        (None, "a", ("a", "new", "b", "c")),
        (None, "c", ("a", "b", "c", "new")),
    ],
)
def test_add_places_the_step(before: str | None, after: str | None, expected: tuple[str, ...]) -> None:
    original = make("a", "b", "c")
    added = original.add(StepDefinition(name="new"), before=before, after=after)
    assert added.names() == expected
    assert original.names() == ("a", "b", "c")  # a new list; the old one is unchanged


@pytest.mark.parametrize(
    ("name", "before", "after", "message"),
    [
        ("b", None, None, "duplicate step 'b': step names must be unique"),
        ("new", "a", "b", "step 'new': takes before_step or after_step, not both"),
        ("new", "zzz", None, "step 'new': before_step 'zzz' names no step (defined so far: a, b)"),
        ("new", None, "zzz", "step 'new': after_step 'zzz' names no step (defined so far: a, b)"),
        ("new", "old", None, "step 'new': before_step 'old' names a removed step (defined so far: a, b)"),
        ("old", None, None, "step 'old' is listed in removed_steps: a removed step's name cannot be used again"),
    ],
)
def test_add_rejects(name: str, before: str | None, after: str | None, message: str) -> None:
    with pytest.raises(DefinitionError, match=re.escape(message)):
        make("a", "b", removed=("old",)).add(StepDefinition(name=name), before=before, after=after)


def test_add_to_an_empty_list_names_none() -> None:
    with pytest.raises(DefinitionError, match=re.escape("after_step 'a' names no step (defined so far: none)")):
        StepList().add(StepDefinition(name="b"), after="a")


def test_replace_keeps_the_position() -> None:
    original = make("a", "b", "c")
    replaced = original.replace(StepDefinition(name="b", timeout=5.0))
    assert replaced.names() == ("a", "b", "c")
    assert replaced.get("b") == StepDefinition(name="b", timeout=5.0)
    assert original.get("b") == StepDefinition(name="b")
    with pytest.raises(DefinitionError, match=re.escape("no step 'z' to replace (steps: a, b, c)")):
        original.replace(StepDefinition(name="z"))


def test_with_removed() -> None:
    original = make("a", "b", "c", removed=("old",))
    removed = original.with_removed(["b", "gone"])
    assert removed.names() == ("a", "c")
    assert removed.removed == frozenset({"old", "b", "gone"})
    assert original.names() == ("a", "b", "c")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"steps": (StepDefinition(name="a"), StepDefinition(name="a"))},
            "duplicate step 'a': step names must be unique",
        ),
        (
            {"steps": (StepDefinition(name="a"),), "removed": frozenset({"a"})},
            "step 'a' is both defined and listed in removed_steps",
        ),
        ({"steps": ("a",)}, "a StepList holds StepDefinitions, got 'a'"),
    ],
)
def test_step_list_invariants(fields: dict[str, object], message: str) -> None:
    with pytest.raises(DefinitionError, match=re.escape(message)):
        StepList(**fields)  # type: ignore[arg-type]


def test_next_after_a_removed_step_uses_the_history() -> None:
    # The run went a -> b -> old; "old" is gone now, so it continues after b.
    steps = make("a", "b", "c", removed=("old",))
    assert steps.next_after("old", history=["a", "b", "old", "old"]) == StepDefinition(name="c")
    # Steps in the history that are themselves gone are passed over.
    assert steps.next_after("old", history=["a", "older"]) == StepDefinition(name="b")
    # Nothing defined ran before it: the run starts from the first step.
    assert steps.next_after("old", history=[]) == StepDefinition(name="a")
    # After the last step: nothing left.
    assert steps.next_after("old", history=["c"]) is None


def test_next_after_unknown_or_removed_without_history() -> None:
    steps = make("a", "b", removed=("old",))
    with pytest.raises(StepNotFound, match=re.escape("no step 'zzz' (steps: a, b)")):
        steps.next_after("zzz")
    with pytest.raises(StepNotFound, match=re.escape("step 'old' was removed; pass history=")):
        steps.next_after("old")


# -- digest ---------------------------------------------------------------------------------


def test_digest_of_a_known_list() -> None:
    assert known().digest() == KNOWN_DIGEST
    assert StepList().digest() == EMPTY_DIGEST


def test_digest_is_the_same_in_another_process() -> None:
    code = (
        "from pgflow.core.definitions import StepList, declare\n"
        "print(StepList(steps=(declare('send_welcome'), declare('charge', wait_for='paid'), "
        "declare('notify_vendors', fan_out=True))).digest())"
    )
    env = {"PYTHONHASHSEED": "12345", "PATH": ""}
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert output.stdout.strip() == KNOWN_DIGEST


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(lambda s: s.add(StepDefinition(name="extra")), id="add"),
        pytest.param(lambda s: s.with_removed(["charge"]), id="remove"),
        pytest.param(
            lambda s: StepList(steps=(StepDefinition(name="welcome"), *s.steps[1:])),
            id="rename",
        ),
        pytest.param(lambda s: StepList(steps=(s.steps[1], s.steps[0], s.steps[2])), id="reorder"),
        pytest.param(
            lambda s: s.replace(StepDefinition(name="send_welcome", kind="fan_out")),
            id="rekind",
        ),
    ],
)
def test_digest_changes_with_the_step_list(changed) -> None:  # type: ignore[no-untyped-def]
    assert changed(known()).digest() != KNOWN_DIGEST


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(lambda s: s.replace(declare("send_welcome", timeout=30, queue="q")), id="options"),
        pytest.param(lambda s: s.replace(declare("send_welcome", method="other_body")), id="body"),
        pytest.param(
            lambda s: s.replace(declare("charge", wait_for="other", wait_timeout=5, on_timeout="cancel")),
            id="signal-options",
        ),
        pytest.param(lambda s: s.with_removed(["legacy"]), id="remember-a-removed-name"),
    ],
)
def test_digest_ignores_bodies_and_options(changed) -> None:  # type: ignore[no-untyped-def]
    assert changed(known()).digest() == KNOWN_DIGEST


@pytest.mark.parametrize(
    ("options", "waits"),
    [
        ({}, False),
        ({"wait": 5}, True),
        ({"wait": "reminder_delay"}, True),
        ({"wait_until": "deadline"}, True),
    ],
)
def test_waits_says_whether_a_due_time_must_be_worked_out(options: dict, waits: bool) -> None:
    assert declare("s", **options).waits is waits


# -- facts the engine branches on --------------------------------------------------------------


def test_only_a_plain_step_runs_without_the_run_lock_before_its_body():
    plain = declare("a")
    assert (plain.locks_before_body, plain.fans_out, plain.takes_argument) == (False, False, False)
    assert declare("b", skip_if="done").locks_before_body
    signal = declare("c", wait_for="paid")
    assert (signal.locks_before_body, signal.takes_argument, signal.fans_out) == (True, True, False)
    batch = declare("d", fan_out=True)
    assert (batch.locks_before_body, batch.takes_argument, batch.fans_out) == (True, True, True)
