"""A workflow instance: what a step body's ``self`` offers, the verbs, and the engine helpers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from pgflow import FlowControl, OnException, Workflow, cancel_if, evaluation, fan_out, registry, step
from pgflow.core.definitions import StepDefinition
from pgflow.core.flow import Outcome
from pgflow.core.policy import resolve
from pgflow.exceptions import DefinitionError

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(registry, "_workflows", dict(registry._workflows))
    yield


class Run:
    """Stands in for a WorkflowRun row; counts reads of ``subject`` (a database read)."""

    def __init__(self, *, input: Any = None, subject: Any = None) -> None:
        self.pk = 7
        self.input = input
        self._subject = subject
        self.subject_reads = 0

    @property
    def subject(self) -> Any:
        self.subject_reads += 1
        return self._subject


def in_a_day(workflow: Any) -> timedelta:
    return timedelta(days=1)


class Shop(Workflow):
    on_exception = [OnException(LookupError, handler="on_lookup")]

    @cancel_if
    def user_gone(self) -> bool:
        return self.subject is None

    @cancel_if
    def shop_closed(self) -> bool:
        return bool(self.input.get("closed"))

    @step(skip_if="is_premium", wait="reminder_delay")
    def remind(self) -> dict[str, Any]:
        return {"reminded": self.subject, "after": self.outputs.get("welcome")}

    @step(wait_for="paid")
    def charge(self, signal: Any) -> Any:
        return signal.payload

    @fan_out
    def notify(self, batch: list[str]) -> None:
        batch.append("vendor-1")

    def is_premium(self) -> bool:
        return self.input.get("plan") == "premium"

    def reminder_delay(self) -> Any:
        return self.input.get("delay", timedelta(hours=2))

    def deadline(self) -> Any:
        return self.input["deadline"]

    def on_lookup(self, error: BaseException) -> None:
        if isinstance(error, KeyError):
            self.skip()
        self.reattempt(wait=timedelta(minutes=1))


def shop(**run: Any) -> Shop:
    return Shop(run=Run(**run), step_name="remind", attempt=2, outputs={"welcome": "sent"})


def definition(name: str) -> StepDefinition:
    found = Shop.steps().get(name)
    assert found is not None
    return found


# -- what self offers -----------------------------------------------------------------------


def test_properties() -> None:
    run = Run(input={"plan": "pro"}, subject="alice")
    outputs = {"welcome": "sent"}
    flow = Shop(run=run, step_name="remind", attempt=2, outputs=outputs)
    assert flow.run is run
    assert flow.input == {"plan": "pro"}
    assert flow.subject == "alice"
    assert flow.outputs == {"welcome": "sent"}
    assert flow.outputs is not outputs  # the engine's dict is not shared
    assert (flow.step_name, flow.attempt) == ("remind", 2)
    assert repr(flow) == "<Shop run=7 step=remind attempt=2>"


def test_defaults() -> None:
    flow = Shop(run=Run())
    assert (flow.input, flow.outputs, flow.step_name, flow.attempt, flow.subject) == ({}, {}, None, None, None)
    assert Shop(run=None).input == {}


def test_subject_is_read_once() -> None:
    run = Run(subject=None)
    flow = Shop(run=run)
    assert flow.subject is None
    assert flow.subject is None
    assert run.subject_reads == 1  # None is remembered too


def test_the_instance_takes_keywords_only() -> None:
    with pytest.raises(TypeError):
        Shop(Run())  # type: ignore[misc]


# -- verbs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "arguments", "expected"),
    [
        ("pause", {}, Outcome(kind="pause")),
        ("cancel", {}, Outcome(kind="cancel")),
        ("skip", {}, Outcome(kind="skip")),
        ("finish", {}, Outcome(kind="finish")),
        ("reattempt", {}, Outcome(kind="reattempt")),
        ("reattempt", {"wait": 30}, Outcome(kind="reattempt", wait=30.0)),
        ("reattempt", {"wait": timedelta(minutes=2)}, Outcome(kind="reattempt", wait=120.0)),
    ],
)
def test_verbs_raise_flow_control(verb: str, arguments: dict[str, Any], expected: Outcome) -> None:
    with pytest.raises(FlowControl) as raised:
        getattr(shop(), verb)(**arguments)
    assert raised.value.outcome == expected


@pytest.mark.parametrize(
    ("wait", "message"),
    [(-1, "wait must be 0 or more seconds, got -1"), ("soon", "wait must be a timedelta or a number of seconds")],
)
def test_reattempt_rejects_a_wrong_wait(wait: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        shop().reattempt(wait=wait)


# -- invoke ---------------------------------------------------------------------------------


def test_invoke_a_plain_step() -> None:
    assert evaluation.invoke(shop(subject="alice"), definition("remind")) == {"reminded": "alice", "after": "sent"}


def test_invoke_passes_the_signal_and_the_batch() -> None:
    assert evaluation.invoke(shop(), definition("charge"), SimpleNamespace(payload={"amount": 5})) == {"amount": 5}
    batch: list[str] = []
    assert evaluation.invoke(shop(), definition("notify"), batch) is None
    assert batch == ["vendor-1"]


def test_invoke_runs_the_most_derived_body() -> None:
    class Override(Shop):
        def remind(self) -> str:
            return "overridden"

    assert evaluation.invoke(Override(run=Run()), definition("remind")) == "overridden"


def test_invoke_lets_verbs_through() -> None:
    class Finishing(Workflow):
        @step
        def only(self) -> None:
            self.finish()

    with pytest.raises(FlowControl) as raised:
        evaluation.invoke(Finishing(run=Run()), Finishing.steps().get("only"))  # type: ignore[arg-type]
    assert raised.value.outcome == Outcome(kind="finish")


# -- skip_if and cancel_if ------------------------------------------------------------------


@pytest.mark.parametrize(("plan", "expected"), [("premium", True), ("pro", False)])
def test_should_skip_by_method_name(plan: str, expected: bool) -> None:
    assert evaluation.should_skip(shop(input={"plan": plan}), definition("remind")) is expected


def test_should_skip_by_callable_and_by_default() -> None:
    seen = []

    def truthy(workflow: Any) -> str:
        seen.append(workflow)
        return "yes"

    flow = shop()
    assert evaluation.should_skip(flow, StepDefinition(name="remind", skip_if=truthy)) is True
    assert seen == [flow]
    assert evaluation.should_skip(flow, StepDefinition(name="remind", skip_if=lambda w: 0)) is False
    assert evaluation.should_skip(flow, definition("charge")) is False  # no skip_if


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        ({"subject": "alice"}, False),
        ({"subject": None}, True),
        ({"subject": "alice", "input": {"closed": True}}, True),
    ],
)
def test_should_cancel_when_any_condition_holds(run: dict[str, Any], expected: bool) -> None:
    assert evaluation.should_cancel(shop(**run)) is expected


def test_should_cancel_stops_at_the_first_truthy_condition() -> None:
    calls = []

    class Counting(Workflow):
        @cancel_if
        def first(self) -> bool:
            calls.append("first")
            return True

        @cancel_if
        def second(self) -> bool:
            calls.append("second")
            return True

        @step
        def a(self) -> None:
            pass

    assert evaluation.should_cancel(Counting(run=None)) is True
    assert calls == ["first"]


def test_should_cancel_without_conditions() -> None:
    class Plain(Workflow):
        @step
        def a(self) -> None:
            pass

    assert evaluation.should_cancel(Plain(run=None)) is False


def test_inherited_conditions_are_checked() -> None:
    class Child(Shop):
        @cancel_if
        def banned(self) -> bool:
            return bool(self.input.get("banned"))

    assert evaluation.should_cancel(Child(run=Run(subject="alice", input={"banned": True}))) is True
    assert evaluation.should_cancel(Child(run=Run(subject=None))) is True
    assert evaluation.should_cancel(Shop(run=Run(subject="alice", input={"banned": True}))) is False


# -- delay_seconds --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step_definition", "run_input", "expected"),
    [
        (StepDefinition(name="remind"), {}, None),
        (StepDefinition(name="remind", wait=90.0), {}, 90.0),
        (StepDefinition(name="remind", wait=0.0), {}, 0.0),
        (StepDefinition(name="remind", wait="reminder_delay"), {}, 7200.0),
        (StepDefinition(name="remind", wait="reminder_delay"), {"delay": 45}, 45.0),
        (StepDefinition(name="remind", wait="reminder_delay"), {"delay": 2.5}, 2.5),
        (StepDefinition(name="remind", wait="reminder_delay"), {"delay": -30}, 0.0),
        (StepDefinition(name="remind", wait="reminder_delay"), {"delay": timedelta(hours=-1)}, 0.0),
        (StepDefinition(name="remind", wait=in_a_day), {}, 86400.0),
        (
            StepDefinition(name="remind", wait_until="deadline"),
            {"deadline": NOW + timedelta(minutes=10)},
            600.0,
        ),
        (
            StepDefinition(name="remind", wait_until="deadline"),
            {"deadline": NOW - timedelta(minutes=10)},
            0.0,
        ),
        (
            # 19:00 at UTC+5 is 14:00 UTC: two hours after NOW.
            StepDefinition(name="remind", wait_until="deadline"),
            {"deadline": datetime(2025, 3, 1, 19, 0, tzinfo=timezone(timedelta(hours=5)))},
            7200.0,
        ),
        (
            StepDefinition(name="remind", wait_until=lambda w: NOW + timedelta(seconds=5)),
            {},
            5.0,
        ),
    ],
)
def test_delay_seconds(step_definition: StepDefinition, run_input: dict[str, Any], expected: float | None) -> None:
    assert evaluation.delay_seconds(shop(input=run_input), step_definition, NOW) == expected


def test_delay_seconds_of_a_declared_step() -> None:
    assert evaluation.delay_seconds(shop(), definition("remind"), NOW) == 7200.0
    assert evaluation.delay_seconds(shop(), definition("charge"), NOW) is None


WAIT = "tests.unit.test_workflow_instance.Shop: step 'remind': wait 'reminder_delay' must return"
UNTIL = "tests.unit.test_workflow_instance.Shop: step 'remind': wait_until 'deadline' must return"


@pytest.mark.parametrize(
    ("step_definition", "run_input", "message"),
    [
        (
            StepDefinition(name="remind", wait="reminder_delay"),
            {"delay": None},
            f"{WAIT} a timedelta or a number of seconds, got None",
        ),
        (
            StepDefinition(name="remind", wait="reminder_delay"),
            {"delay": "2h"},
            f"{WAIT} a timedelta or a number of seconds, got '2h'",
        ),
        (
            StepDefinition(name="remind", wait="reminder_delay"),
            {"delay": True},
            f"{WAIT} a timedelta or a number of seconds, got True",
        ),
        (
            StepDefinition(name="remind", wait="reminder_delay"),
            {"delay": float("nan")},
            f"{WAIT} a timedelta or a number of seconds, got nan",
        ),
        (
            StepDefinition(name="remind", wait=lambda w: [1]),
            {},
            "step 'remind': wait <lambda> must return a timedelta or a number of seconds, got [1]",
        ),
        (
            StepDefinition(name="remind", wait_until="deadline"),
            {"deadline": datetime(2025, 3, 2, 9, 0)},
            f"{UNTIL} an aware datetime (such as django.utils.timezone.now() + timedelta(days=1)), "
            "got datetime.datetime(2025, 3, 2, 9, 0)",
        ),
        (
            StepDefinition(name="remind", wait_until="deadline"),
            {"deadline": 3600},
            f"{UNTIL} an aware datetime (such as django.utils.timezone.now() + timedelta(days=1)), got 3600",
        ),
        (
            StepDefinition(name="remind", wait_until="deadline"),
            {"deadline": NOW.date()},
            f"{UNTIL} an aware datetime",
        ),
    ],
)
def test_delay_seconds_rejects_a_wrong_return(
    step_definition: StepDefinition, run_input: dict[str, Any], message: str
) -> None:
    with pytest.raises(DefinitionError, match=re.escape(message)):
        evaluation.delay_seconds(shop(input=run_input), step_definition, NOW)


def test_delay_seconds_needs_an_aware_now() -> None:
    with pytest.raises(ValueError, match=re.escape("now must be an aware datetime, got datetime.datetime(2025")):
        evaluation.delay_seconds(shop(), definition("remind"), NOW.replace(tzinfo=None))


# -- a policy's handler runs on the real instance -------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected", "terminal"),
    [(KeyError("sku"), Outcome(kind="skip"), True), (IndexError(), Outcome(kind="reattempt", wait=60.0), False)],
)
def test_class_handler_decides_on_the_instance(error: Exception, expected: Outcome, terminal: bool) -> None:
    policy = resolve(error, step_policies=definition("remind").on_exception, class_policies=Shop.policies())
    decision = policy.decide(error, workflow=shop(), consecutive_reattempts=lambda: 0)
    assert (decision.outcome, decision.terminal, decision.report) == (expected, terminal, True)


def test_errors_the_class_policies_do_not_match_pause() -> None:
    policy = resolve(ValueError(), step_policies=(), class_policies=Shop.policies())
    assert policy.decide(ValueError(), workflow=shop()).outcome == Outcome(kind="pause")
