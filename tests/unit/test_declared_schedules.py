"""The schedules the test suite's own modules declare tick at most once a year.

pgflow syncs every registered class's schedules after migrate, and pytest-django's flush after
each transactional test runs post_migrate again, so a declared schedule is a committed row in
every later test. A worker started by any test ticks it: one due within a test's minute starts
a run that test never made (a nightly 03:00 did, in a CI leg that ran across 03:00 UTC)."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pgflow import registry, schedules

TESTS = Path(__file__).resolve().parent.parent
# Modules whose import declares workflows (classes, and Django tasks through @options).
DECLARING = sorted(
    path.stem for path in TESTS.glob("*.py") if path.stem.endswith(("_workflows", "_tasks")) or path.stem == "workflows"
)


@pytest.mark.parametrize("module", DECLARING)
def test_a_test_modules_schedules_tick_at_most_once_a_year(module):
    importlib.import_module(f"tests.{module}")
    start = datetime(2026, 3, 1, tzinfo=UTC)
    often = {
        f"{path} {name!r}": gap
        for (path, name), declaration in schedules.declared(registry.registered()).items()
        if path.startswith(f"tests.{module}.")
        for first, second in [declaration.rule.upcoming(start, 2)]
        if (gap := second - first) < timedelta(days=365)
    }
    assert not often, f"declared schedules that tick more than once a year: {often}"


def test_the_suites_declaring_modules_are_found():
    assert {"django_tasks", "schedule_workflows", "tenant_workflows", "workflows"} <= set(DECLARING)
