"""Helpers shared by the dashboard's integration and browser tests (the fixtures are in
``tests.dashboard_fixtures``, loaded with ``pytest_plugins``).

Runs are made the way users make them (``SomeWorkflow.start()`` and
``pgflow.testing.run_workflow``); only histories too large or too precisely timed for that
are written as rows.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Permission, User
from django.urls import reverse

from pgflow.models import WorkflowRun

PASSWORD = "pgflow-test-password"


def make_user(username: str, *, staff: bool = True, perms: tuple[str, ...] = (), superuser: bool = False) -> User:
    user = User.objects.create_user(username=username, password=PASSWORD, is_staff=staff, is_superuser=superuser)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(content_type__app_label="pgflow", codename=codename))
    return user


# --- URLs ------------------------------------------------------------------------------------


def changelist_url() -> str:
    return reverse("admin:pgflow_workflowrun_changelist")


def run_url(run: WorkflowRun | int) -> str:
    return reverse("admin:pgflow_workflowrun_change", args=[getattr(run, "pk", run)])


def timeline_url(run: WorkflowRun | int) -> str:
    return reverse("admin:pgflow_workflowrun_timeline", args=[getattr(run, "pk", run)])


def control_url(run: WorkflowRun | int) -> str:
    return reverse("admin:pgflow_workflowrun_control", args=[getattr(run, "pk", run)])


def insights_url(window: str | None = None, *, as_json: bool = False) -> str:
    url = reverse("admin:pgflow_insights_json" if as_json else "admin:pgflow_insights")
    return url if window is None else f"{url}?window={window}"


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]] if response.context else []
