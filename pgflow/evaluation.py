"""The engine's calls into a workflow instance: a step's body, its ``skip_if``, the
class's ``cancel_if`` conditions and a step's ``wait`` / ``wait_until``.

These live here, not on :class:`~pgflow.workflow.Workflow`, so a workflow class may name
its own helpers anything outside the documented API: a helper called ``should_skip``,
used as ``skip_if="should_skip"``, is the user's method, never the engine's. Plain
Python; importing this module touches neither the models nor the database.

Any of them may be ``async def``. The worker awaits an async step body on its event loop
(``runtime/loop.py``); everything else here is called from synchronous code (under a run's
lock, or in a thread) and :func:`settle` awaits what it returned on a loop of its own, where
Django's async ORM and ``sync_to_async`` come back to the calling thread and so to its
transaction.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync

from . import tenants
from .approvals import Decision
from .core.definitions import StepDefinition
from .core.flow import FlowControl
from .core.limits import NO_GATES, Gates, gates_of, key_value
from .exceptions import DefinitionError

if TYPE_CHECKING:
    from .workflow import Workflow


def invoke(workflow: Workflow, definition: StepDefinition, argument: Any = None) -> Any:
    """Run the step's body on ``workflow`` and return its output. A signal step gets the
    signal and a fan_out the batch builder, as ``argument``."""
    body = getattr(workflow, definition.method)
    if definition.approval is not None:
        argument = _decision(workflow, definition, argument)
    if definition.takes_argument:
        return body(argument)
    return body()


def _decision(workflow: Workflow, definition: StepDefinition, signal: Any) -> Any:
    """An approval step's ``decision``, from the decision signal; a rejection with an
    ``on_reject`` action ends the step with it instead of running the body."""
    decision = Decision.of(getattr(signal, "payload", signal))
    action = definition.approval.on_reject
    if not decision.approved and action is not None:
        getattr(workflow, action)()  # cancel() / skip() raise the FlowControl
    return decision


def is_async(workflow_class: type[Workflow], definition: StepDefinition) -> bool:
    """True when the step's body is an ``async def``: the worker awaits it on its loop."""
    return _is_async(workflow_class, definition.method)


@functools.lru_cache(maxsize=4096)
def _is_async(workflow_class: type[Workflow], method: str) -> bool:
    # Asked for every claimed attempt by the claim loop; a class's methods do not change
    # kind, and inspect's check walks the function's wrappers each time.
    return inspect.iscoroutinefunction(getattr(workflow_class, method, None))


def reads_outputs(workflow_class: type[Workflow], definition: StepDefinition) -> bool:
    """Whether the step's body may read ``self.outputs``: its source names ``outputs``, or it
    cannot be read. The claim brings the run's outputs only with these steps' attempts, so an
    output a body never reads costs no claim; a body that reads them some other way (a helper
    method) reads them with one query when first used, as before."""
    body = getattr(workflow_class, definition.method, None)
    try:
        source = inspect.getsource(body)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return True
    return "outputs" in source


def settle(value: Any) -> Any:
    """``value``, or what it resolves to when it is awaitable (an ``async def`` returned it).

    Awaited through asgiref's ``async_to_sync``: the calling thread serves the
    ``sync_to_async`` calls (Django's async ORM) of the coroutine, so they run in its
    transaction, under the lock it holds.
    """
    if inspect.isawaitable(value):
        return async_to_sync(_awaited)(value)
    return value


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def should_skip(workflow: Workflow, definition: StepDefinition) -> bool:
    """True when the step's ``skip_if`` holds."""
    if definition.skip_if is None:
        return False
    return bool(evaluate(workflow, definition.skip_if))


def should_cancel(workflow: Workflow) -> bool:
    """True when any cancel_if condition holds (checked in order, stopping at the first)."""
    return any(evaluate(workflow, condition) for condition in type(workflow).cancel_conditions())


def delay_seconds(workflow: Workflow, definition: StepDefinition, now: datetime) -> float | None:
    """Seconds from ``now`` (aware) until the step is due; ``None`` when it has no wait.

    From ``wait`` (seconds, or a method/callable returning a timedelta or seconds) or
    ``wait_until`` (a method/callable returning an aware datetime); a time already past
    gives 0. A wrong return value, or a flow-control verb called from the method, is a
    :class:`DefinitionError` naming what is accepted.
    """
    if now.utcoffset() is None:
        raise ValueError(f"now must be an aware datetime, got {now!r}")
    where = f"{type(workflow).workflow_path()}: step {definition.name!r}"
    if definition.wait is not None:
        wait = definition.wait
        value = wait if isinstance(wait, float | int) else _returned(workflow, wait, f"{where}: wait")
        if isinstance(value, timedelta):
            delay = value.total_seconds()
        elif isinstance(value, int | float) and not isinstance(value, bool):
            delay = float(value)
        else:
            delay = math.nan
        if not math.isfinite(delay):
            raise DefinitionError(
                f"{where}: wait {describe(wait)} must return a timedelta or a number of seconds, got {value!r}"
            )
        return max(0.0, delay)  # a time computed at run time may already be past: due now
    if definition.wait_until is not None:
        value = _returned(workflow, definition.wait_until, f"{where}: wait_until")
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise DefinitionError(
                f"{where}: wait_until {describe(definition.wait_until)} must return an aware datetime "
                f"(such as django.utils.timezone.now() + timedelta(days=1)), got {value!r}"
            )
        return max(0.0, (value - now).total_seconds())
    return None


def evaluate(workflow: Workflow, reference: str | Callable[..., Any]) -> Any:
    """Call a method named ``reference`` of ``workflow``, or the callable ``reference(workflow)``;
    an ``async def`` is awaited (:func:`settle`). In the run's tenant context (``PGFLOW["TENANT_CONTEXT"]``),
    as its bodies are: a condition or a wait reads the tenant's data."""
    with tenants.context_of(workflow):
        if isinstance(reference, str):
            return settle(getattr(workflow, reference)())
        return settle(reference(workflow))


def describe(reference: Any) -> str:
    return repr(reference) if isinstance(reference, str) else getattr(reference, "__name__", repr(reference))


def _returned(workflow: Workflow, reference: str | Callable[..., Any], what: str) -> Any:
    # A wait is computed while the previous step's outcome is applied: there is no running
    # step for a verb to end, so calling one is a mistake to name, not an outcome to apply.
    try:
        return evaluate(workflow, reference)
    except FlowControl as control:
        raise DefinitionError(
            f"{what} {describe(reference)} called a flow-control verb ({control.outcome.kind}); "
            "it must return the wait, not end the step"
        ) from None


def gates_for(instance: Workflow, definition: StepDefinition) -> Gates:
    """The gates an attempt of ``definition`` must pass at the claim (keys computed now)."""
    cls = type(instance)
    singleton = cls.singleton
    queued = None
    if singleton is not None and singleton.on_conflict == "queue":
        queued = instance.run.singleton_key
    if not definition.limited and queued is None:
        return NO_GATES
    return gates_of(
        instance,
        workflow_path=cls.workflow_path(),
        step_name=definition.name,
        concurrency=definition.concurrency,
        rate=definition.rate,
        singleton=queued,
    )


def singleton_key(instance: Workflow) -> str | None:
    """The run's singleton key (its class's Singleton), None when it has none or the key is None."""
    singleton = type(instance).singleton
    if singleton is None:
        return None
    return key_value(instance, singleton.key, "*", "singleton key")
