"""The dashboard tests' users and logged-in clients, as pytest fixtures.

Test modules load this with ``pytest_plugins = ["tests.dashboard_fixtures"]``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.dashboard_support import make_user


@pytest.fixture
def viewer() -> User:
    return make_user("viewer", perms=("view_workflowrun",))


@pytest.fixture
def operator() -> User:
    return make_user("operator", perms=("view_workflowrun", "change_workflowrun"))


@pytest.fixture
def staff_without_perms() -> User:
    return make_user("bystander")


@pytest.fixture
def not_staff() -> User:
    return make_user("outsider", staff=False, perms=("view_workflowrun", "change_workflowrun"))


@pytest.fixture
def login() -> Callable[..., Client]:
    def logged_in(user: User | None, *, csrf: bool = False) -> Client:
        client = Client(enforce_csrf_checks=csrf)
        if user is not None:
            client.force_login(user)
        return client

    return logged_in
