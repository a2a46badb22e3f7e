"""System checks: pgflow.E001 for settings, pgflow.E002 for workflow definitions."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks

from . import conf


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return [
        checks.Error(problem, hint="See the Settings section of the README.", id="pgflow.E001")
        for problem in conf.validate(getattr(settings, "PGFLOW", None))
    ]
