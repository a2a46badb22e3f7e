"""The pgflow.E002 / pgflow.W001 system checks over registered workflows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps
from django.core import checks as django_checks

from pgflow import OnException, Workflow, cancel_if, registry, step
from pgflow.checks import check_settings, check_workflows
from pgflow.workflow import definition_problems, matcher_warnings


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(registry, "_workflows", dict(registry._workflows))
    yield


class Declined(Exception):
    pass


def make(**attributes: Any) -> type[Workflow]:
    class Flow(Workflow):
        on_exception = [OnException(KeyError, handler="on_error")]

        @cancel_if
        def gone(self) -> bool:
            return False

        @step(skip_if="is_premium")
        def a(self) -> None:
            pass

        @step
        def b(self) -> None:
            pass

        def is_premium(self) -> bool:
            return False

        def on_error(self, error: BaseException) -> None:
            self.skip()

    for name, value in attributes.items():
        setattr(Flow, name, value)
    return Flow


def messages_for(workflow: type[Workflow]) -> list[tuple[str, str]]:
    return [(m.id, m.msg) for m in check_workflows() if m.obj is workflow]  # type: ignore[misc]


def test_the_check_is_registered() -> None:
    assert check_workflows in django_checks.registry.registry.get_checks()
    assert check_settings in django_checks.registry.registry.get_checks()


def test_a_sound_workflow_has_no_messages() -> None:
    flow = make()
    assert definition_problems(flow) == []
    assert matcher_warnings(flow) == []
    assert messages_for(flow) == []


def _delete(name: str) -> Any:
    def change(flow: type[Workflow]) -> None:
        delattr(flow, name)

    return change


def _set(name: str, value: Any) -> Any:
    def change(flow: type[Workflow]) -> None:
        setattr(flow, name, value)

    return change


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_delete("b"), "step 'b': the method 'b' no longer exists (list the step in removed_steps)"),
        (_set("b", None), "step 'b': the body must be a method defined with def, got None"),
        (
            _set("b", lambda self, extra: None),
            "step 'b': a step without wait_for takes (self), got b(self, extra) "
            "(to wait for a signal, give @step(wait_for=...))",
        ),
        (
            _delete("is_premium"),
            "step 'a': skip_if 'is_premium' names no method of Flow (expected def is_premium(self))",
        ),
        (_delete("gone"), "cancel_if 'gone' names no method of Flow (expected def gone(self))"),
        (
            _delete("on_error"),
            "on_exception: OnException handler 'on_error' names no method of Flow (expected def on_error(self, error))",
        ),
        (_set("queue", ""), "queue must be None or 1-100 letters, digits, '_', '.', ':' or '-', got ''"),
        (_set("priority", "high"), "priority must be a whole number between -2147483648 and 2147483647, got 'high'"),
        (_set("removed_steps", ["legacy", "b"]), "removed_steps names 'b', a step that is still defined"),
    ],
)
def test_e002_reports_a_definition_broken_after_creation(change: Any, problem: str) -> None:
    flow = make()
    change(flow)
    path = flow.workflow_path()
    assert definition_problems(flow) == [problem]
    assert messages_for(flow) == [("pgflow.E002", f"{path}: {problem}")]
    error = next(m for m in check_workflows() if m.obj is flow)
    assert isinstance(error, django_checks.Error)
    assert error.hint == "Fix the workflow class's declaration."


def test_e002_reports_every_problem() -> None:
    flow = make()
    del flow.b
    del flow.gone
    flow.queue = ""  # type: ignore[assignment]
    assert [m for m, _ in messages_for(flow)] == ["pgflow.E002"] * 3


@pytest.mark.parametrize(
    ("matcher", "warning"),
    [
        (
            "nowhere_pkg.errors.Missing",
            "OnException matcher 'nowhere_pkg.errors.Missing' does not import as a class: it only matches an error "
            "whose class, or a base, has the qualified name 'nowhere_pkg.errors.Missing'; check the module path",
        ),
        (
            "pgflow.conf.DEFAULTS",
            "OnException matcher 'pgflow.conf.DEFAULTS' does not import as a class: it only matches an error "
            "whose class, or a base, has the qualified name 'pgflow.conf.DEFAULTS'; check the module path",
        ),
    ],
)
def test_w001_warns_about_a_name_matcher_that_never_matches(matcher: str, warning: str) -> None:
    class Flow(Workflow):
        @step(on_exception=OnException(matcher, action="skip"))
        def a(self) -> None:
            pass

    assert matcher_warnings(Flow) == [warning]
    assert messages_for(Flow) == [("pgflow.W001", f"{Flow.workflow_path()}: {warning}")]
    assert isinstance(next(m for m in check_workflows() if m.obj is Flow), django_checks.Warning)


def test_w001_accepts_names_that_resolve_to_themselves() -> None:
    class Flow(Workflow):
        on_exception = [
            OnException("ConnectionError", "builtins.KeyError", action="cancel"),
            OnException(f"{__name__}.Declined", "django.db.utils.IntegrityError", action="skip"),
            # a re-export and a bare name match as they are
            OnException("django.db.IntegrityError", "PaymentDeclined", action="skip"),
        ]

        @step
        def a(self) -> None:
            pass

    assert matcher_warnings(Flow) == []


def test_w001_lists_a_name_once() -> None:
    class Flow(Workflow):
        on_exception = [
            OnException("nowhere_pkg.Missing", action="cancel"),
            OnException("nowhere_pkg.Missing", action="skip"),
        ]

        @step(on_exception=OnException("nowhere_pkg.Missing", action="skip"))
        def a(self) -> None:
            pass

    assert len(matcher_warnings(Flow)) == 1


def test_the_check_only_looks_at_the_apps_asked_for() -> None:
    flow = make(queue="")
    assert messages_for(flow) != []
    contenttypes = [apps.get_app_config("contenttypes")]
    assert [m for m in check_workflows(app_configs=contenttypes) if m.obj is flow] == []


def test_workflows_not_registered_are_not_checked() -> None:
    class Base(Workflow):  # no steps: not registered
        queue = "q"

    Base.queue = ""  # type: ignore[assignment]
    assert [m for m in check_workflows() if m.obj is Base] == []
