"""Building a workflow class's definition from its body and its bases'.

What the decorators leave on a method (a mark), the class-body namespace that sees a
declaration bound twice, the metaclass that hands it over, and the fold over the MRO that
``Workflow.__init_subclass__`` calls: steps, policies, cancel conditions, class-wide waits,
limits and schedules. Every refusal is a :class:`~pgflow.exceptions.DefinitionError` naming
the step and what to write instead; the class name is added by ``__init_subclass__``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import approvals
from ..core.definitions import StepList, declare
from ..core.limits import Limit, Rate, Singleton, checked
from ..core.policy import OnException, coerce_all
from ..core.ticks import Schedule
from ..exceptions import DefinitionError

if TYPE_CHECKING:
    from .base import Workflow

# Attributes the decorators set on the functions they mark.
STEP_MARK = "__pgflow_step__"
CANCEL_MARK = "__pgflow_cancel_if__"
# Where the metaclass hands __init_subclass__ the names bound twice in the class body.
_REBOUND = "__pgflow_rebound__"


@dataclass(frozen=True, kw_only=True)
class StepMark:
    fan_out: bool
    options: Mapping[str, Any]


def declared(value: Any) -> bool:
    """Whether ``value`` is a function marked by ``@step``, ``@fan_out`` or ``@cancel_if``."""
    return inspect.isfunction(value) and bool(getattr(value, STEP_MARK, None) or getattr(value, CANCEL_MARK, None))


# -- the class body -----------------------------------------------------------------------


class _Namespace(dict[str, Any]):
    """A class body's namespace that notes a declaration bound again under the same name.

    Python keeps only the last binding of a name, so a second ``@step def send`` would
    silently replace the first; this is the one place where that is still visible.
    """

    def __init__(self) -> None:
        super().__init__()
        self.rebound: list[str] = []

    def __setitem__(self, key: str, value: Any) -> None:
        # ``send = step(send)`` rebinds the same function object: not a second definition.
        if key in self and self[key] is not value and declared(self[key]):
            self.rebound.append(key)
        super().__setitem__(key, value)


class WorkflowType(type):
    """Workflow's metaclass: only supplies :class:`_Namespace`; the class is built in
    ``Workflow.__init_subclass__``."""

    @classmethod
    def __prepare__(mcs, name: str, bases: tuple[type, ...], /, **kwargs: Any) -> MutableMapping[str, object]:
        return _Namespace()

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any], /, **kwargs: Any) -> type:
        body = dict(namespace)
        body[_REBOUND] = tuple(getattr(namespace, "rebound", ()))
        cls = super().__new__(mcs, name, bases, body, **kwargs)
        type.__delattr__(cls, _REBOUND)
        return cls


# The documented API of a workflow (docs/reference.md) and the class methods the engine calls: a
# class attribute of that name would hide it from step bodies or from the engine, so it
# is refused when the class is created. The class-wide options (queue, priority, wait,
# wait_until, on_exception, removed_steps) are meant to be set and are not listed.
RESERVED_NAMES = frozenset(
    {
        "run",
        "subject",
        "input",
        "outputs",
        "children",
        "step_name",
        "attempt",
        "set_attributes",
        "attributes_set",
        "pause",
        "cancel",
        "skip",
        "finish",
        "reattempt",
        "start",
        "runs",
        "definition_digest",
        "steps",
        "workflow_path",
        "policies",
        "cancel_conditions",
        "queue_for",
        "priority_for",
    }
)


@functools.cache
def _reserved(root: type) -> frozenset[str]:
    # Step and cancel_if names must not shadow anything of the base class (a step called
    # "queue" would replace the class option).
    return frozenset(dir(root)) | RESERVED_NAMES


# -- building a class's definition --------------------------------------------------------


def build(
    cls: type[Workflow], root: type[Workflow]
) -> tuple[StepList, tuple[OnException, ...], tuple[str | Callable[..., Any], ...]]:
    """Fold the declarations of ``cls`` and its bases below ``root`` (``Workflow``), oldest first.

    Per class body: its ``removed_steps`` take inherited steps out, then its own
    declarations in definition order: a new step goes at the end (or before/after the
    named step), a redeclared inherited one keeps its place with its new options, a plain
    redefinition of an inherited step only changes the body (the engine looks the method
    up by name).
    """
    reserved = _reserved(root)
    steps = StepList()
    conditions: list[str] = []
    policies: list[OnException] = []
    for klass in reversed(cls.__mro__):
        if klass is object or klass is root:
            continue
        own = klass.__dict__
        rebound = own.get(_REBOUND) or ()
        if rebound:
            raise DefinitionError(
                f"{rebound[0]!r} is defined twice in the class body, and the second definition would "
                "silently replace the first declaration; give one of them another name"
            )
        if "removed_steps" in own:
            steps = steps.with_removed(_removed_names(own["removed_steps"]))
        for name, value in own.items():
            if name in RESERVED_NAMES and not declared(value):
                raise DefinitionError(_shadows(name, klass, cls))
            if isinstance(value, staticmethod | classmethod) and declared(value.__func__):
                raise DefinitionError(
                    f"{name!r}: a step or cancel_if condition is a plain method, not a {type(value).__name__}"
                )
            if not inspect.isfunction(value):
                continue
            mark = getattr(value, STEP_MARK, None)
            if mark is not None:
                if name in reserved or name in conditions:
                    raise DefinitionError(_taken(name, "a step", conditions))
                steps = _declare(steps, name, mark)
            elif getattr(value, CANCEL_MARK, False):
                if name in reserved or name in steps:
                    raise DefinitionError(_taken(name, "a cancel_if condition", steps.names()))
                if name not in conditions:
                    conditions.append(name)
        if "on_exception" in own:
            policies.extend(_class_policies(own["on_exception"]))
    return steps, tuple(policies), tuple(conditions)


def _declare(steps: StepList, name: str, mark: StepMark) -> StepList:
    options = dict(mark.options)
    approval = options.pop("approval", None)
    if approval is not None:  # an approval is a signal wait on its reserved name
        options = approvals.step_options(name, approval, options, fan_out=mark.fan_out)
    definition = declare(name, fan_out=mark.fan_out, **options)
    if approval is not None:
        definition = dataclasses.replace(definition, approval=approval)
    before, after = options.get("before_step"), options.get("after_step")
    if definition.name in steps:
        if before is not None or after is not None:
            raise DefinitionError(
                f"step {name!r} is inherited and a redeclaration keeps its place: before_step and "
                "after_step only place new steps"
            )
        return steps.replace(definition)
    return steps.add(definition, before=before, after=after)


def _taken(name: str, what: str, others: Sequence[str]) -> str:
    if name in others:
        return f"{name!r} cannot be both a step and a cancel_if condition; give {what} its own name"
    return f"{what} cannot be named {name!r}: the name is part of Workflow's own API"


def with_class_limits(cls: type[Workflow], steps: StepList) -> StepList:
    """``steps`` with the class-wide ``concurrency`` / ``rate`` given to every step that sets
    none itself (a step's own wins)."""
    try:
        concurrency = checked(cls.concurrency, Limit, "concurrency")
        rate = checked(cls.rate, Rate, "rate")
        singleton = checked(cls.singleton, Singleton, "singleton")
    except DefinitionError as exc:
        raise class_wide(str(exc)) from None
    changed = steps
    for definition in steps:
        if concurrency is not None and definition.concurrency is None:
            definition = dataclasses.replace(definition, concurrency=concurrency)
        if rate is not None and definition.rate is None:
            definition = dataclasses.replace(definition, rate=rate)
        if singleton is not None and singleton.on_conflict == "queue" and definition.concurrency is not None:
            raise DefinitionError(
                f"step {definition.name!r}: a Singleton(on_conflict='queue') holds each run's steps at the claim "
                "and cannot be combined with a concurrency Limit on the same class; use a Rate, or on_conflict='skip'"
            )
        changed = changed.replace(definition)
    return changed


def class_wide(message: str) -> DefinitionError:
    return DefinitionError(f"class-wide options: {message}")


def _shadows(name: str, klass: type, cls: type) -> str:
    where = "" if klass is cls else f" (from {klass.__qualname__})"
    return (
        f"{name!r}{where} would shadow Workflow's own {name!r}, which step bodies and the engine rely on; "
        f"give it another name (reserved names: {', '.join(sorted(RESERVED_NAMES))})"
    )


def _removed_names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset):
        raise DefinitionError(f"removed_steps must be a list of step names, got {value!r}")
    for name in value:
        if not (isinstance(name, str) and name.isidentifier()):
            raise DefinitionError(f"removed_steps must be a list of step names, got {name!r} in it")
    return tuple(value)


def class_schedules(value: Any) -> tuple[Schedule, ...]:
    """The class's own ``schedules`` (a subclass does not inherit its parent's ticks)."""
    items = list(value) if isinstance(value, list | tuple) else None
    if items is None or not all(isinstance(item, Schedule) for item in items):
        raise DefinitionError(f"schedules must be a list of pgflow.Schedule, got {value!r}")
    names = [item.name for item in items]
    doubled = sorted({name for name in names if names.count(name) > 1})
    if doubled:
        raise DefinitionError(
            f"schedules: each needs a name of its own; {', '.join(map(repr, doubled))} is used more than once"
        )
    return tuple(items)


def _class_policies(value: Any) -> tuple[OnException, ...]:
    if isinstance(value, OnException | str | Mapping):
        value = [value]
    if not isinstance(value, list | tuple):
        raise DefinitionError(
            f"on_exception must be a list of OnException (or action strings or dicts of OnException "
            f"arguments), got {value!r}"
        )
    try:
        return coerce_all(list(value))
    except DefinitionError as exc:
        raise DefinitionError(f"on_exception: {exc}") from None
