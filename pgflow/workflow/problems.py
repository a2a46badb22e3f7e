"""What can be checked on a built workflow class: its definition problems and matcher warnings.

Run when the class is created (``Workflow.__init_subclass__`` raises the first problem) and
again by the system checks in :mod:`pgflow.checks` (``pgflow.E002``, ``pgflow.W001``), which
catch what changed after creation: a method deleted or replaced, a class option reassigned.
Each is a message naming the step; nothing here raises.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.definitions import FAN_OUT, QUEUE_RULE, SIGNAL, StepDefinition, check_priority, valid_queue
from ..core.limits import TENANT_KEY, Singleton, tenant_key_of_run
from ..core.policy import OnException, imported_class
from ..evaluation import describe as _describe
from ..exceptions import DefinitionError

if TYPE_CHECKING:
    from .base import Workflow

_UNSET: Any = object()

_PARAMETERS = {
    "step": ("self",),
    SIGNAL: ("self", "signal"),
    FAN_OUT: ("self", "batch"),
}
_WHAT = {"step": "a step without wait_for", SIGNAL: "a step with wait_for", FAN_OUT: "a fan_out"}


def definition_problems(workflow: type[Workflow]) -> list[str]:
    """Every problem with a built workflow class's definition, as messages naming the step.

    Run when the class is created (the first one is raised) and again by the
    ``pgflow.E002`` system check, which catches what changed afterwards (a method deleted
    or replaced, a class option reassigned).
    """
    problems: list[str] = []
    steps = workflow._pgflow_steps
    for definition in steps:
        problems.extend(_body_problems(workflow, definition))
        for option in ("skip_if", "wait", "wait_until"):
            reference = getattr(definition, option)
            if isinstance(reference, str) or callable(reference):
                problem = _reference_problem(workflow, reference, 1, "(self)", "(workflow)")
                if problem:
                    problems.append(f"step {definition.name!r}: {option} {problem}")
        for option in ("concurrency", "rate"):
            declared = getattr(definition, option)
            if declared is not None and declared.key is not None and not _run_tenant(workflow, declared.key):
                problem = _reference_problem(workflow, declared.key, 1, "(self)", "(workflow)")
                if problem:
                    problems.append(f"step {definition.name!r}: {option} key {problem}")
        for policy in definition.on_exception:
            problem = _handler_problem(workflow, policy)
            if problem:
                problems.append(f"step {definition.name!r}: {problem}")
    for policy in workflow._pgflow_policies:
        problem = _handler_problem(workflow, policy)
        if problem:
            problems.append(f"on_exception: {problem}")
    for condition in workflow._pgflow_cancel_conditions:
        problem = _reference_problem(workflow, condition, 1, "(self)", "(workflow)")
        if problem:
            problems.append(f"cancel_if {problem}")
    singleton = workflow.singleton
    if isinstance(singleton, Singleton) and singleton.key is not None and not _run_tenant(workflow, singleton.key):
        problem = _reference_problem(workflow, singleton.key, 1, "(self)", "(workflow)")
        if problem:
            problems.append(f"singleton key {problem}")
    queue = workflow.queue
    if queue is not None and not valid_queue(queue):
        problems.append(f"queue must be None or {QUEUE_RULE}, got {queue!r}")
    try:
        check_priority(workflow.priority, DefinitionError)
    except DefinitionError as exc:
        problems.append(str(exc))
    if workflow.on_parent_cancel not in ("cancel", "abandon"):
        problems.append(f'on_parent_cancel must be "cancel" or "abandon", got {workflow.on_parent_cancel!r}')
    removed = workflow.removed_steps
    if isinstance(removed, list | tuple | set | frozenset):
        for name in sorted(n for n in removed if isinstance(n, str) and n in steps):
            problems.append(f"removed_steps names {name!r}, a step that is still defined")
    return problems


def matcher_warnings(workflow: type[Workflow]) -> list[str]:
    """Exception policies matching by an import path that does not import as a class.

    Such a name still matches a class whose qualified name it is (``"Gateway.Declined"``),
    but a misspelt module path never matches anything. Bare names are not checked: any
    class of that name matches. Run by the ``pgflow.W001`` check, once apps are ready.
    """
    warnings = []
    policies = [*workflow._pgflow_policies, *(p for d in workflow._pgflow_steps for p in d.on_exception)]
    seen: set[str] = set()
    for policy in policies:
        for name in policy.name_matchers():
            if name in seen or "." not in name:
                continue
            seen.add(name)
            if imported_class(name) is None:
                warnings.append(
                    f"OnException matcher {name!r} does not import as a class: it only matches an error whose "
                    f"class, or a base, has the qualified name {name!r}; check the module path"
                )
    return warnings


def _body_problems(workflow: type[Workflow], definition: StepDefinition) -> list[str]:
    where = f"step {definition.name!r}"
    body = inspect.getattr_static(workflow, definition.method, _UNSET)
    if body is _UNSET:
        return [f"{where}: the method {definition.method!r} no longer exists (list the step in removed_steps)"]
    if not inspect.isfunction(body):
        return [f"{where}: the body must be a method defined with def, got {body!r}"]
    if inspect.isasyncgenfunction(body):
        # An async def body is awaited; an async generator would hand back the generator unrun.
        return [f"{where}: the body must return its output (def or async def), not yield it"]
    expected = _PARAMETERS[definition.kind]
    if not _accepts(body, len(expected)):
        if definition.approval is not None:
            return [
                f"{where}: a step with approval takes (self, decision), "
                f"got {definition.method}{inspect.signature(body)}"
            ]
        hint = ""
        if definition.kind == "step" and _accepts(body, 2):
            hint = " (to wait for a signal, give @step(wait_for=...))"
        return [
            f"{where}: {_WHAT[definition.kind]} takes ({', '.join(expected)}), "
            f"got {definition.method}{inspect.signature(body)}{hint}"
        ]
    return []


def _reference_problem(
    workflow: type[Workflow], reference: str | Callable[..., Any], arity: int, method: str, function: str
) -> str | None:
    """Why a method name or callable cannot be called with ``arity`` arguments, or None."""
    if isinstance(reference, str):
        target = inspect.getattr_static(workflow, reference, None)
        if target is None or not inspect.isfunction(target):
            return f"{reference!r} names no method of {workflow.__name__} (expected def {reference}{method})"
        if not _accepts(target, arity):
            return f"{reference!r} must take {method}, got {reference}{inspect.signature(target)}"
        return None
    if not _accepts(reference, arity):
        return f"{_describe(reference)} must take {function}, got {inspect.signature(reference)}"
    return None


def _run_tenant(workflow: type[Workflow], key: Any) -> bool:
    """``key="tenant"`` naming the run's tenant (no method of the class): nothing to check."""
    return key == TENANT_KEY and tenant_key_of_run(workflow)


def _handler_problem(workflow: type[Workflow], policy: OnException) -> str | None:
    if policy.handler is None:
        return None
    problem = _reference_problem(workflow, policy.handler, 2, "(self, error)", "(workflow, error)")
    return f"OnException handler {problem}" if problem else None


def _accepts(func: Callable[..., Any], count: int) -> bool:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return True  # no signature to read (a builtin): let the call tell
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True
