"""The newest Django's leg leaves only engine-only acceptance files to the 5.2 leg: each one
listed exists (a typo would ignore nothing, silently), and the files that exercise code a
Django release changes stay on it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# django.tasks, async bodies, django-tenants, the MCP and dashboard over HTTP, migrate and
# the checks, Django's connection handling, deferred fields.
VERSION_DEPENDENT = (
    "test_django_tasks.py",
    "test_django_tasks_fanout.py",
    "test_async_workers.py",
    "test_worker_slots.py",
    "test_django_tenants.py",
    "test_mcp.py",
    "test_two_databases.py",
    "test_first_hour.py",
    "test_database_restart.py",
    "test_silent_socket.py",
    "test_pgbouncer.py",
    "test_step_run_fields.py",
)


def dev():
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_lts_only_file_exists_and_the_version_dependent_ones_stay():
    listed = dev().LTS_ONLY_ACCEPTANCE
    assert [path for path in listed if not (ROOT / path).is_file()] == []
    assert {Path(path).name for path in listed}.isdisjoint(VERSION_DEPENDENT)
    assert all((ROOT / "tests/acceptance" / name).is_file() for name in VERSION_DEPENDENT)


def test_only_a_leg_with_the_acceptance_folder_ignores_them():
    module = dev()
    assert module.leg_arguments(["tests/unit", "tests/integration"]) == ["tests/unit", "tests/integration"]
    with_acceptance = module.leg_arguments(["tests/unit", "tests/acceptance"])
    assert with_acceptance[:2] == ["tests/unit", "tests/acceptance"]
    assert with_acceptance[2:] == [f"--ignore={path}" for path in module.LTS_ONLY_ACCEPTANCE]
