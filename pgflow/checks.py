"""System checks: pgflow.E001 for settings, pgflow.E002 and pgflow.W001 for workflow definitions."""

from __future__ import annotations

from importlib import import_module
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
    messages: list[checks.CheckMessage] = discover(app_configs)
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


def discover(app_configs: Any = None) -> list[checks.CheckMessage]:
    """Import every installed app's ``workflows`` module, as the admin does with ``admin``,
    so the checks see workflows nothing imported yet; a module whose class declaration is
    wrong is reported as pgflow.E002 rather than crashing the check."""
    from django.apps import apps

    from .exceptions import DefinitionError

    messages: list[checks.CheckMessage] = []
    for config in app_configs or apps.get_app_configs():
        name = f"{config.name}.workflows"
        try:
            import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
        except DefinitionError as exc:
            messages.append(checks.Error(f"{name}: {exc}", hint="Fix the workflow class's declaration.",
                                         id="pgflow.E002"))
    return messages
