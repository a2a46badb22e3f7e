"""pgflow.E003 / pgflow.W002: a @fan_out needs django-q2 installed with a broker that works
(unless its body only adds child runs), and E002's message for a workflows module whose
class declaration is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.core import checks as django_checks
from django.test import override_settings

from pgflow import Workflow, fan_out, registry, step
from pgflow.checks import adds_only_child_runs, check_fan_out, discover, fan_out_problems

ORM = {"name": "shop", "orm": "default", "timeout": 60, "retry": 90, "max_attempts": 1, "ack_failures": True}


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(registry, "_workflows", {})
    yield


def register_fan_out() -> type[Workflow]:
    class Checkout(Workflow):
        @step
        def reserve(self) -> None:
            pass

        @fan_out
        def notify_vendors(self, batch: object) -> None:
            pass

    return Checkout


def problems(
    q_cluster: object, *, installed: bool = True, modules: tuple[str, ...] = ()
) -> tuple[list[str], list[str]]:
    return fan_out_problems(
        installed=installed, q_cluster=q_cluster, databases=("default",), importable=lambda name: name in modules
    )


def test_the_documented_orm_cluster_has_no_problem() -> None:
    assert problems(ORM) == ([], [])


@pytest.mark.parametrize(
    ("q_cluster", "installed", "modules", "error"),
    [
        (ORM, False, (), "'django_q' is not in INSTALLED_APPS, so nothing can run its tasks"),
        (None, True, ("redis",), "there is no Q_CLUSTER setting, so django-q2 would use a Redis broker on localhost"),
        (
            {"name": "shop"},
            True,
            (),
            "Q_CLUSTER selects the redis broker, which needs the 'redis' module, not installed here",
        ),
        (
            {"django_redis": "default"},
            True,
            ("redis",),
            "Q_CLUSTER selects the redis broker, which needs the 'django_redis' module, not installed here",
        ),
        (
            {"sqs": {"aws_region": "eu-west-1"}},
            True,
            (),
            "Q_CLUSTER selects the sqs broker, which needs the 'boto3' module, not installed here",
        ),
        (
            {"broker_class": "shop.brokers.Mine"},
            True,
            (),
            "Q_CLUSTER selects the broker_class broker, which needs the 'shop.brokers' module, not installed here",
        ),
        (
            {"orm": "queue"},
            True,
            (),
            "Q_CLUSTER['orm'] names the database 'queue', which is not in DATABASES (default)",
        ),
        ([("orm", "default")], True, (), "Q_CLUSTER must be a dict, got list"),
    ],
)
def test_a_cluster_that_cannot_run_tasks_is_an_error(
    q_cluster: object, installed: bool, modules: tuple[str, ...], error: str
) -> None:
    assert problems(q_cluster, installed=installed, modules=modules) == ([error], [])


def test_redis_with_its_module_is_accepted() -> None:
    assert problems({"name": "shop", "redis": {"host": "redis"}}, modules=("redis",)) == ([], [])


def test_a_cluster_where_a_batch_may_never_finish_is_a_warning() -> None:
    errors, warnings = problems({"orm": "default", "timeout": 120})
    assert errors == []
    assert warnings == [
        "a member task that fails is retried for ever (no 'ack_failures' and no 'max_attempts'), so its batch "
        "never finishes; set 'ack_failures': True or 'max_attempts': N in Q_CLUSTER",
        "Q_CLUSTER['timeout'] (120) is not below 'retry' (60): a member still running is delivered again and "
        "runs twice; make 'retry' longer than 'timeout'",
    ]


def test_e003_names_the_fan_out_step_and_shows_a_working_q_cluster() -> None:
    flow = register_fan_out()
    with override_settings(Q_CLUSTER={"name": "shop"}):
        [message] = check_fan_out()
    assert isinstance(message, django_checks.Error) and message.id == "pgflow.E003"
    assert message.msg.startswith(f"@fan_out {flow.workflow_path()}.notify_vendors: Q_CLUSTER selects the redis")
    assert (message.hint or "").startswith("Set Q_CLUSTER = {'name': 'myproject', 'orm': 'default',")
    assert "qcluster" in (message.hint or "")


def test_e003_when_django_q_is_not_installed() -> None:
    register_fan_out()
    without = [app for app in settings.INSTALLED_APPS if app != "django_q"]
    with override_settings(INSTALLED_APPS=without):
        assert [(m.id, m.msg.split(": ", 1)[1]) for m in check_fan_out()] == [
            ("pgflow.E003", "'django_q' is not in INSTALLED_APPS, so nothing can run its tasks")
        ]
        assert check_fan_out()[0].hint.startswith("pgflow hands @fan_out tasks to django-q2: add 'django_q'")


def test_a_fan_out_of_child_runs_only_needs_no_django_q() -> None:
    class Child(Workflow):
        @step
        def a(self) -> None:
            pass

    class Parent(Workflow):
        @fan_out
        def spawn(self, batch: object) -> None:
            for index in range(3):
                batch.add_run(Child, input={"i": index})  # type: ignore[attr-defined]

    without = [app for app in settings.INSTALLED_APPS if app != "django_q"]
    with override_settings(INSTALLED_APPS=without):
        assert check_fan_out() == []
        register_fan_out()  # a fan_out that may add tasks, beside it
        assert [m.msg.split(": ")[0] for m in check_fan_out()] == ["@fan_out " + registered("notify_vendors")]


def registered(step_name: str) -> str:
    (path,) = [w.workflow_path() for w in registry.registered() if w.steps().get(step_name)]
    return f"{path}.{step_name}"


@pytest.mark.parametrize(
    ("source", "only_runs"),
    [
        ("def f(self, batch):\n    batch.add_run(C)\n", True),
        ("def f(self, b):\n    for i in range(3):\n        b.add_run(C, key=str(i))\n", True),
        ("async def f(self, batch):\n    batch.add_run(C)\n", True),
        ("def f(self, batch):\n    batch.add(task)\n", False),  # a task
        ("def f(self, batch):\n    batch.add_run(C)\n    batch.add(task)\n", False),
        ("def f(self, batch):\n    batch.add_run(C)\n    more(batch)\n", False),  # handed on
        ("def f(self, batch):\n    batch.add_run(C)\n    more(into=batch)\n", False),
        ("def f(self, batch):\n    pass\n", False),  # adds nothing we can see
        ("    def f(self, batch):\n        batch.add_run(C)\n", True),  # indented, as in a class
        (None, False),  # no source (a built-in, a REPL)
        ("def f(self, batch):\n    batch.add_run(\n", False),  # not Python
    ],
)
def test_whether_a_fan_out_body_adds_only_child_runs(source: str | None, only_runs: bool) -> None:
    assert adds_only_child_runs(source) is only_runs


def test_no_fan_out_needs_no_django_q() -> None:
    class Plain(Workflow):
        @step
        def a(self) -> None:
            pass

    without = [app for app in settings.INSTALLED_APPS if app != "django_q"]
    with override_settings(INSTALLED_APPS=without):
        assert check_fan_out() == []


def test_e002_of_a_refused_declaration_names_the_class_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "brokenorders"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "workflows.py").write_text(
        "import pgflow\n\nclass Checkout(pgflow.Workflow):\n    @pgflow.step(bogus=1)\n    def a(self):\n        pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    [message] = discover([SimpleNamespace(name="brokenorders")])
    assert message.id == "pgflow.E002"
    assert message.msg.startswith("brokenorders.workflows.Checkout: step 'a': unknown option 'bogus'")
    assert message.msg.count("brokenorders.workflows") == 1
