"""The example project's settings for a project without django-q2 and without @fan_out
workflows (the shop has some): what a user who leaves django_q out runs."""

from example_project.settings import *  # noqa: F403
from example_project.settings import INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app not in ("django_q", "example_project.shop")]
del Q_CLUSTER  # noqa: F821
