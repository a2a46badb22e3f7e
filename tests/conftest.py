"""Shared test set-up: a real PostgreSQL (the example project's private cluster or
DATABASE_URL), checked once before any test touches it."""

from __future__ import annotations

import pytest
from django.conf import settings


def pytest_sessionstart(session: pytest.Session) -> None:
    from example_project.dburl import problem

    db = settings.DATABASES["default"]
    url = f"postgres://{db.get('USER') or ''}@{db.get('HOST') or ''}:{db.get('PORT') or ''}/{db.get('NAME')}"
    import os

    failure = problem(os.environ.get("DATABASE_URL", url))
    if failure:
        pytest.exit(failure, returncode=3)


@pytest.fixture(autouse=True)
def _nothing_kept_of_the_live_hours():
    """Each test's database is new: what this process kept of the live hours' figures
    (pgflow.rollup's kept ends) belongs to the one before."""
    yield
    from pgflow import rollup  # here, not at the top: Django is set up after this module loads

    rollup.forget()
