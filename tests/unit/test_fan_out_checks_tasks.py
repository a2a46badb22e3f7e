"""pgflow.E003 asks for django-q2 only when a @fan_out may hand it a task: not for a fan-out whose
members are django.tasks tasks (of pgflow's backend: child runs; of another: enqueued there)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import override_settings

from pgflow import Workflow, fan_out, registry
from pgflow.checks import check_fan_out, hands_no_django_q_task
from tests import django_tasks as t

WITHOUT_DJANGO_Q = [app for app in settings.INSTALLED_APPS if app != "django_q"]


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(registry, "_workflows", {})
    yield


def notify(n: int) -> None:
    """A plain function: django-q2's kind of member."""


def test_fan_outs_of_django_tasks_need_no_django_q() -> None:
    class OverPgflowTasks(Workflow):
        @fan_out
        def spread(self, batch: object) -> None:
            for n in range(3):
                batch.add(t.add, n, b=1)  # type: ignore[attr-defined]
            batch.add(t.plain.using(priority=5), 1)  # type: ignore[attr-defined]

    class OverAnotherBackend(Workflow):
        @fan_out
        def spread(self, batch: object) -> None:
            batch.add(t.db_add, 1, 2)  # type: ignore[attr-defined]

    with override_settings(INSTALLED_APPS=WITHOUT_DJANGO_Q):
        assert check_fan_out() == []

        class HandsDjangoQ(Workflow):
            @fan_out
            def spread(self, batch: object) -> None:
                batch.add(t.add, 1, 2)  # type: ignore[attr-defined]
                batch.add(notify, 1)  # type: ignore[attr-defined]

        [message] = check_fan_out()
        assert message.id == "pgflow.E003" and ".HandsDjangoQ.spread" in message.msg


IS_TASK = {"t.add", "add", "t.db_add"}.__contains__


@pytest.mark.parametrize(
    ("source", "no_django_q"),
    [
        ("def f(self, batch):\n    batch.add(t.add, 1)\n", True),
        ("def f(self, batch):\n    batch.add(add)\n    batch.add_run(C)\n", True),
        ("def f(self, b):\n    b.add(t.db_add.using(priority=1), 1)\n", True),
        ("def f(self, batch):\n    batch.add(notify, 1)\n", False),  # not a task: django-q2's
        ("def f(self, batch):\n    batch.add('shop.tasks.notify', 1)\n", False),
        ("def f(self, batch):\n    batch.add(t.add)\n    batch.add(pick(), 1)\n", False),  # unknown
        ("def f(self, batch):\n    batch.add(t.add)\n    more(batch)\n", False),  # handed on
        ("def f(self, batch):\n    other.add(t.add)\n", False),  # not the batch's add
        ("def f(self, batch):\n    pass\n", False),  # adds nothing we can see
        (None, False),
    ],
)
def test_which_bodies_hand_django_q_nothing(source: str | None, no_django_q: bool) -> None:
    assert hands_no_django_q_task(source, IS_TASK) is no_django_q
