"""The Workflow base class and the ``@step`` / ``@fan_out`` / ``@cancel_if`` decorators.

A workflow is a class whose decorated methods are its steps, run in the order they are
defined::

    class Onboarding(pgflow.Workflow):
        queue = "mail"
        on_exception = [OnException(ConnectionError, action="reattempt", max_reattempts=5)]

        @step
        def send_welcome(self): ...

        @step(wait=timedelta(days=2), skip_if="is_premium")
        def send_reminder(self): ...

The decorators only mark the methods; everything is parsed and validated when the class is
created (``__init_subclass__``), so a wrong declaration fails at import with a
:class:`~pgflow.exceptions.DefinitionError` naming the class, the step and what to write
instead. Each class gets its own frozen step list, policies and cancel conditions, built
from its bases' declarations down the MRO; a base's are never changed.

The instance is what a step body's ``self`` is: the run, its input, subject and outputs,
and the flow-control verbs. Nothing else: the engine's own calls into an instance (the
body, ``skip_if``, ``cancel_if``, waits) live in :mod:`pgflow.evaluation`, so every other
name is the user's to define. A class attribute that would shadow one of the names in
:data:`RESERVED_NAMES` is a :class:`DefinitionError`. Importing this module touches
neither the models nor the database.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar, overload

from . import registry
from .core import flow
from .core.definitions import (
    FAN_OUT,
    QUEUE_RULE,
    SIGNAL,
    StepDefinition,
    StepList,
    check_priority,
    declare,
    parse_waits,
    valid_queue,
    with_class_waits,
)
from .core.durations import seconds
from .core.flow import FlowControl, Outcome
from .core.limits import Limit, Rate, Singleton, checked
from .core.policy import OnException, coerce_all, imported_class
from .core.ticks import Schedule
from .evaluation import describe
from .exceptions import DefinitionError

if TYPE_CHECKING:
    from django.db.models import QuerySet

F = TypeVar("F", bound=Callable[..., Any])

# Attributes the decorators set on the functions they mark.
_STEP_MARK = "__pgflow_step__"
_CANCEL_MARK = "__pgflow_cancel_if__"
# Where the metaclass hands __init_subclass__ the names bound twice in the class body.
_REBOUND = "__pgflow_rebound__"

_UNSET: Any = object()


@dataclass(frozen=True, kw_only=True)
class _StepMark:
    fan_out: bool
    options: Mapping[str, Any]


# -- decorators ---------------------------------------------------------------------------


@overload
def step(func: F, /) -> F: ...
@overload
def step(func: None = None, /, **options: Any) -> Callable[[F], F]: ...
def step(func: Any = None, /, **options: Any) -> Any:
    """Mark a method as a step: ``@step`` or ``@step(wait=..., skip_if=..., ...)``.

    The method takes only ``self``; with ``wait_for=`` it takes ``(self, signal)``. The
    options are those of ``pgflow.core.definitions.STEP_OPTIONS``; they are validated when
    the class is created.
    """
    if func is None:
        return lambda f: _mark_step(f, fan_out=False, options=options)
    return _mark_step(func, fan_out=False, options=options)


@overload
def fan_out(func: F, /) -> F: ...
@overload
def fan_out(func: None = None, /, *, on_batch_failure: str = "pause", **options: Any) -> Callable[[F], F]: ...
def fan_out(func: Any = None, /, *, on_batch_failure: str = "pause", **options: Any) -> Any:
    """Mark a method as a fan_out step: ``@fan_out`` or ``@fan_out(on_batch_failure="cancel", ...)``.

    The method takes ``(self, batch)`` and adds the batch's tasks with ``batch.add``; the
    step waits until every one has finished. ``on_batch_failure`` (``"pause"``,
    ``"cancel"``, ``"skip"``) applies when any of them failed. Takes every step option but
    ``wait_for``, ``wait_timeout`` and ``on_timeout``.
    """
    options = {**options, "on_batch_failure": on_batch_failure}
    if func is None:
        return lambda f: _mark_step(f, fan_out=True, options=options)
    return _mark_step(func, fan_out=True, options=options)


def cancel_if(func: F, /) -> F:
    """Mark a method (taking only ``self``) as a cancel condition.

    Every condition is checked under the run lock before each step; any truthy one
    cancels the run. Conditions are inherited, and a subclass's add to its parent's.
    """
    _check_markable(func, "cancel_if")
    setattr(func, _CANCEL_MARK, True)
    return func


def _mark_step(func: Any, *, fan_out: bool, options: dict[str, Any]) -> Any:
    decorator = "fan_out" if fan_out else "step"
    _check_markable(func, decorator)
    setattr(func, _STEP_MARK, _StepMark(fan_out=fan_out, options=MappingProxyType(dict(options))))
    return func


def _check_markable(func: Any, decorator: str) -> None:
    if isinstance(func, str):
        raise DefinitionError(
            f"@{decorator} takes its options as keywords (@{decorator} or @{decorator}(wait=...)), "
            f"got {func!r}; a step is named after its method"
        )
    if not inspect.isfunction(func):
        raise DefinitionError(f"@{decorator} decorates a method defined with def, got {func!r}")
    for mark, name in ((_STEP_MARK, "a step"), (_CANCEL_MARK, "a cancel_if condition")):
        if getattr(func, mark, None):
            raise DefinitionError(
                f"@{decorator} on {func.__qualname__}: it is already declared as {name}; use one decorator"
            )


def _declared(value: Any) -> bool:
    return inspect.isfunction(value) and bool(getattr(value, _STEP_MARK, None) or getattr(value, _CANCEL_MARK, None))


# -- the class ----------------------------------------------------------------------------


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
        if key in self and self[key] is not value and _declared(self[key]):
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


class Workflow(metaclass=WorkflowType):
    """Base class of every workflow. See the module docstring and docs/reference.md."""

    # Class-wide options. A step's own queue/priority win; without either the
    # PGFLOW["QUEUE"] setting and priority 0 apply.
    queue: ClassVar[str | None] = None
    priority: ClassVar[int] = 0
    # Class-wide wait / wait_until (as a step takes them), for every step that sets neither.
    wait: ClassVar[Any] = None
    wait_until: ClassVar[Any] = None
    # Class-level exception policies; a subclass's list extends its bases'.
    on_exception: ClassVar[Sequence[Any]] = ()
    # Steps that no longer exist: a run scheduled on one skips to the step after its place.
    removed_steps: ClassVar[Sequence[str]] = ()
    # pgflow.Schedule declarations: this class started on a cron or an interval. Not inherited.
    schedules: ClassVar[Sequence[Any]] = ()
    # A run of this class started by a fan_out's batch.add_run: "cancel" (cancelled with its
    # parent) or "abandon" (runs on). On a parent's class, "abandon" leaves all its children be.
    on_parent_cancel: ClassVar[str] = "cancel"
    # Flow control: a class-wide pgflow.Limit / pgflow.Rate for every step that sets none
    # itself, and a pgflow.Singleton (one open run per key).
    concurrency: ClassVar[Any] = None
    rate: ClassVar[Any] = None
    singleton: ClassVar[Any] = None

    # Built for each class by __init_subclass__; frozen, never mutated.
    _pgflow_steps: ClassVar[StepList] = StepList()
    _pgflow_policies: ClassVar[tuple[OnException, ...]] = ()
    _pgflow_cancel_conditions: ClassVar[tuple[str | Callable[..., Any], ...]] = ()
    _pgflow_schedules: ClassVar[tuple[Schedule, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        try:
            steps, policies, conditions = _build(cls)
            steps = with_class_waits(steps, *parse_waits(cls.wait, cls.wait_until, _class_wide))
            steps = _with_class_limits(cls, steps)
            cls._pgflow_steps = steps
            cls._pgflow_policies = policies
            cls._pgflow_cancel_conditions = conditions
            cls._pgflow_schedules = _class_schedules(cls.__dict__.get("schedules", ()))
            problems = definition_problems(cls)
            if problems:
                raise DefinitionError(problems[0])
        except DefinitionError as exc:
            # Say which class, once; the messages below this point name the step.
            raise DefinitionError(f"{cls.workflow_path()}: {exc}") from None
        if steps:
            registry.register(cls)

    # -- class API ------------------------------------------------------------------------

    @classmethod
    def steps(cls) -> StepList:
        return cls._pgflow_steps

    @classmethod
    def definition_digest(cls) -> str:
        """SHA-256 of the ordered ``[name, kind]`` step list; stored on every run."""
        return cls._pgflow_steps.digest()

    @classmethod
    def workflow_path(cls) -> str:
        """``module.QualName``: what ``WorkflowRun.workflow_class`` stores."""
        return f"{cls.__module__}.{cls.__qualname__}"

    @classmethod
    def policies(cls) -> tuple[OnException, ...]:
        """The class-level exception policies, bases' first."""
        return cls._pgflow_policies

    @classmethod
    def cancel_conditions(cls) -> tuple[str | Callable[..., Any], ...]:
        """The cancel_if conditions (method names), bases' first."""
        return cls._pgflow_cancel_conditions

    @classmethod
    def queue_for(cls, step_name: str) -> str:
        """The queue a step's attempts go to: the step's, else the class's, else PGFLOW["QUEUE"]."""
        definition = cls._pgflow_steps.get(step_name)
        if definition is not None and definition.queue:
            return definition.queue
        if cls.queue:
            return cls.queue
        from .conf import pgflow_settings

        return str(pgflow_settings.QUEUE)

    @classmethod
    def priority_for(cls, step_name: str) -> int:
        """A step's priority: its own, else the class's."""
        definition = cls._pgflow_steps.get(step_name)
        if definition is not None and definition.priority is not None:
            return definition.priority
        return cls.priority

    @classmethod
    def start(cls, subject: Any = None, input: dict[str, Any] | None = None, key: str | None = None) -> Any:
        """Start a run of this workflow; returns the ``WorkflowRun``. See ``pgflow.store.start_run``."""
        from pgflow import store

        return store.start_run(cls, subject=subject, input=input, key=key)

    @classmethod
    def runs(cls) -> QuerySet[Any]:
        """This workflow's runs, as a queryset."""
        from pgflow.models import WorkflowRun

        return WorkflowRun.objects.filter(workflow_class=cls.workflow_path())

    # -- the instance a step body runs on -------------------------------------------------

    def __init__(
        self,
        *,
        run: Any,
        step_name: str | None = None,
        attempt: int | None = None,
        outputs: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self._run = run
        self._step_name = step_name
        self._attempt = attempt
        # A callable is a loader: the engine passes one so a body that never reads
        # ``self.outputs`` costs no query.
        self._outputs_source = outputs
        self._outputs: dict[str, Any] | None = None
        self._subject = _UNSET

    def __repr__(self) -> str:
        run_id = getattr(self._run, "pk", None)
        return f"<{type(self).__qualname__} run={run_id} step={self._step_name} attempt={self._attempt}>"

    @property
    def run(self) -> Any:
        """The ``WorkflowRun`` row."""
        return self._run

    @property
    def input(self) -> dict[str, Any]:
        """The dict given to ``start()`` (empty when none was)."""
        return (getattr(self._run, "input", None) if self._run is not None else None) or {}

    @property
    def subject(self) -> Any:
        """The run's subject model instance, or None. Read from the database once."""
        if self._subject is _UNSET:
            self._subject = getattr(self._run, "subject", None) if self._run is not None else None
        return self._subject

    @property
    def outputs(self) -> dict[str, Any]:
        """``{step_name: output}`` of the steps completed so far."""
        if self._outputs is None:
            source = self._outputs_source
            self._outputs = dict((source() if callable(source) else source) or {})
        return self._outputs

    @property
    def step_name(self) -> str | None:
        return self._step_name

    @property
    def attempt(self) -> int | None:
        """The running attempt's number, 1-based."""
        return self._attempt

    def children(self, step_name: str) -> list[Any]:
        """The child runs (``batch.add_run``) of the fan_out ``step_name``'s latest completed
        attempt, in the order they were added; each ``WorkflowRun``'s ``outputs`` holds its
        steps' outputs. Empty when that step has not completed."""
        from .models import BatchMember, Step, WorkflowRun

        latest = (
            Step.objects.filter(run=self._run, step_name=step_name, status="completed", batch__isnull=False)
            .order_by("-created_at", "-id")
            .values_list("batch_id", flat=True)
            .first()
        )
        if latest is None:
            return []
        ids = list(
            BatchMember.objects.filter(batch_id=latest, child__isnull=False)
            .order_by("position")
            .values_list("child_id", flat=True)
        )
        runs = WorkflowRun.objects.in_bulk(ids)
        return [runs[i] for i in ids if i in runs]

    # -- flow-control verbs: each ends the step at once -----------------------------------

    def pause(self) -> NoReturn:
        """Pause the run; ``run.resume()`` schedules a fresh attempt of this step."""
        raise FlowControl(Outcome(kind=flow.PAUSE))

    def cancel(self) -> NoReturn:
        """Cancel the run."""
        raise FlowControl(Outcome(kind=flow.CANCEL))

    def skip(self) -> NoReturn:
        """Skip this step; the run moves on to the next."""
        raise FlowControl(Outcome(kind=flow.SKIP))

    def finish(self) -> NoReturn:
        """Finish the run successfully now, skipping the steps left."""
        raise FlowControl(Outcome(kind=flow.FINISH))

    def reattempt(self, wait: timedelta | float | None = None) -> NoReturn:
        """Run this step again, after ``wait`` (a timedelta or seconds; none = now)."""
        raise FlowControl(
            Outcome(kind=flow.REATTEMPT, wait=None if wait is None else seconds(wait, "wait", positive=False))
        )


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
# Step and cancel_if names must not shadow anything of the base class (a step called
# "queue" would replace the class option).
_RESERVED = frozenset(dir(Workflow)) | RESERVED_NAMES

_describe = describe


# -- building a class's definition --------------------------------------------------------


def _build(
    cls: type[Workflow],
) -> tuple[StepList, tuple[OnException, ...], tuple[str | Callable[..., Any], ...]]:
    """Fold the declarations of ``cls`` and its bases, oldest base first.

    Per class body: its ``removed_steps`` take inherited steps out, then its own
    declarations in definition order: a new step goes at the end (or before/after the
    named step), a redeclared inherited one keeps its place with its new options, a plain
    redefinition of an inherited step only changes the body (the engine looks the method
    up by name).
    """
    steps = StepList()
    conditions: list[str] = []
    policies: list[OnException] = []
    for klass in reversed(cls.__mro__):
        if klass is object or klass is Workflow:
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
            if name in RESERVED_NAMES and not _declared(value):
                raise DefinitionError(_shadows(name, klass, cls))
            if isinstance(value, staticmethod | classmethod) and _declared(value.__func__):
                raise DefinitionError(
                    f"{name!r}: a step or cancel_if condition is a plain method, not a {type(value).__name__}"
                )
            if not inspect.isfunction(value):
                continue
            mark = getattr(value, _STEP_MARK, None)
            if mark is not None:
                if name in _RESERVED or name in conditions:
                    raise DefinitionError(_taken(name, "a step", conditions))
                steps = _declare(steps, name, mark)
            elif getattr(value, _CANCEL_MARK, False):
                if name in _RESERVED or name in steps:
                    raise DefinitionError(_taken(name, "a cancel_if condition", steps.names()))
                if name not in conditions:
                    conditions.append(name)
        if "on_exception" in own:
            policies.extend(_class_policies(own["on_exception"]))
    return steps, tuple(policies), tuple(conditions)


def _declare(steps: StepList, name: str, mark: _StepMark) -> StepList:
    options = dict(mark.options)
    definition = declare(name, fan_out=mark.fan_out, **options)
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


def _with_class_limits(cls: type[Workflow], steps: StepList) -> StepList:
    """``steps`` with the class-wide ``concurrency`` / ``rate`` given to every step that sets
    none itself (a step's own wins)."""
    try:
        concurrency = checked(cls.concurrency, Limit, "concurrency")
        rate = checked(cls.rate, Rate, "rate")
        singleton = checked(cls.singleton, Singleton, "singleton")
    except DefinitionError as exc:
        raise _class_wide(str(exc)) from None
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


def _class_wide(message: str) -> DefinitionError:
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


def _class_schedules(value: Any) -> tuple[Schedule, ...]:
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


# -- what can be checked on a built class (at creation and by the pgflow.E002 check) ------

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
            if declared is not None and declared.key is not None:
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
    if isinstance(singleton, Singleton) and singleton.key is not None:
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
