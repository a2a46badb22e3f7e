"""System checks: pgflow.E001 for settings, pgflow.E002 and pgflow.W001 for workflow definitions."""

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


@checks.register()
def check_workflows(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """pgflow.E002 per problem in a registered workflow's definition; pgflow.W001 per name
    matcher that will never match.

    Class creation already refused what it could see; this re-validates once every app is
    loaded: methods deleted or replaced afterwards, class options reassigned, and dotted
    exception names, which may only import now.
    """
    from . import registry
    from .workflow import definition_problems, matcher_warnings

    packages = None if app_configs is None else tuple(config.name for config in app_configs)
    messages: list[checks.CheckMessage] = []
    for workflow in registry.registered():
        module = workflow.__module__
        if packages is not None and not any(module == p or module.startswith(p + ".") for p in packages):
            continue
        path = workflow.workflow_path()
        for problem in definition_problems(workflow):
            messages.append(
                checks.Error(
                    f"{path}: {problem}", hint="Fix the workflow class's declaration.", obj=workflow, id="pgflow.E002"
                )
            )
        for warning in matcher_warnings(workflow):
            messages.append(
                checks.Warning(
                    f"{path}: {warning}",
                    hint="A matcher that names no class never matches.",
                    obj=workflow,
                    id="pgflow.W001",
                )
            )
    return messages
