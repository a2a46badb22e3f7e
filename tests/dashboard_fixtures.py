"""The dashboard tests' users, logged-in clients and seeded history, as pytest fixtures.

Test modules load this with ``pytest_plugins = ["tests.dashboard_fixtures"]``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from pgflow.models import Step, WorkflowRun
from tests import workflows as wf
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


@pytest.fixture
def seed_attempt() -> Callable[..., None]:
    """Writes history for the insights charts: ``seed_attempt(ended, waited=, queued=, ran=)``
    makes one finished run of one completed attempt that ended at ``ended``, its phases (the
    wait before it was due, the queue, the body) in seconds."""

    def seed(ended: datetime, *, waited: float, queued: float, ran: float) -> None:
        started = ended - timedelta(seconds=ran)
        scheduled = started - timedelta(seconds=queued)
        created = scheduled - timedelta(seconds=waited)
        run = WorkflowRun.objects.create(
            workflow_class=wf.ThreeSteps.workflow_path(),
            status="finished",
            definition_digest=wf.ThreeSteps.definition_digest(),
            created_at=created,
            updated_at=ended,
            finished_at=ended,
        )
        Step.objects.create(
            run=run,
            step_name="one",
            attempt=1,
            status="completed",
            outcome="completed",
            queue="workflows",
            created_at=created,
            scheduled_at=scheduled,
            started_at=started,
            finished_at=ended,
        )

    return seed
