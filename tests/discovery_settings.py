"""The example project with tests.discovered_app installed (tests/acceptance/test_processes.py)."""

from example_project.settings import *  # noqa: F403
from example_project.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.discovered_app"]
