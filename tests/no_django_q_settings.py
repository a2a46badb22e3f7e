"""The example project without django-q2 installed: its fan-outs hand out tasks of
django.tasks backends only (tests/acceptance/test_django_tasks_fanout.py)."""

from example_project.settings import *  # noqa: F403
from example_project.settings import INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "django_q"]
