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
from its bases' declarations down the MRO (:mod:`pgflow.workflow.building`) and checked by
:mod:`pgflow.workflow.problems`; a base's are never changed.

The instance is what a step body's ``self`` is: the run, its input, subject and outputs,
and the flow-control verbs. Nothing else: the engine's own calls into an instance (the
body, ``skip_if``, ``cancel_if``, waits) live in :mod:`pgflow.evaluation`, so every other
name is the user's to define. A class attribute that would shadow one of the names in
:data:`~pgflow.workflow.building.RESERVED_NAMES` is a :class:`DefinitionError`.

The class is the definition the store reads, so this package sits below the store; only
``start()`` calls up into it, through a function-level import. Importing this module touches
neither the models nor the database.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar, overload

from .. import registry
from ..core import attributes as attribute_rules
from ..core import flow
from ..core.definitions import StepList, parse_waits, with_class_waits
from ..core.durations import seconds
from ..core.flow import FlowControl, Outcome
from ..core.policy import OnException
from ..core.ticks import Schedule
from ..exceptions import DefinitionError
from .building import (
    CANCEL_MARK,
    STEP_MARK,
    StepMark,
    WorkflowType,
    build,
    class_schedules,
    class_wide,
    with_class_limits,
)
from .problems import definition_problems

if TYPE_CHECKING:
    from django.db.models import QuerySet

F = TypeVar("F", bound=Callable[..., Any])

_UNSET: Any = object()


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
    setattr(func, CANCEL_MARK, True)
    return func


def _mark_step(func: Any, *, fan_out: bool, options: dict[str, Any]) -> Any:
    decorator = "fan_out" if fan_out else "step"
    _check_markable(func, decorator)
    setattr(func, STEP_MARK, StepMark(fan_out=fan_out, options=MappingProxyType(dict(options))))
    return func


def _check_markable(func: Any, decorator: str) -> None:
    if isinstance(func, str):
        raise DefinitionError(
            f"@{decorator} takes its options as keywords (@{decorator} or @{decorator}(wait=...)), "
            f"got {func!r}; a step is named after its method"
        )
    if not inspect.isfunction(func):
        raise DefinitionError(f"@{decorator} decorates a method defined with def, got {func!r}")
    for mark, name in ((STEP_MARK, "a step"), (CANCEL_MARK, "a cancel_if condition")):
        if getattr(func, mark, None):
            raise DefinitionError(
                f"@{decorator} on {func.__qualname__}: it is already declared as {name}; use one decorator"
            )


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
            steps, policies, conditions = build(cls, Workflow)
            steps = with_class_waits(steps, *parse_waits(cls.wait, cls.wait_until, class_wide))
            steps = with_class_limits(cls, steps)
            cls._pgflow_steps = steps
            cls._pgflow_policies = policies
            cls._pgflow_cancel_conditions = conditions
            cls._pgflow_schedules = class_schedules(cls.__dict__.get("schedules", ()))
            if cls._pgflow_schedules and not steps:
                # A class without steps is not registered: its ticks would never be synced.
                raise DefinitionError("schedules need a workflow with steps to start: add a @step to this class")
            problems = definition_problems(cls)
            if problems:
                raise DefinitionError(problems[0])
        except DefinitionError as exc:
            # Say which class, once; the messages below this point name the step. Workflow's
            # own workflow_path: the refused class may have shadowed it.
            raise DefinitionError(f"{_path_of(cls)}: {exc}") from None
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
        return _path_of(cls)

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
        # lazy: settings are read per call; importing pgflow.workflow loads no Django
        from ..conf import pgflow_settings

        return str(pgflow_settings.QUEUE)

    @classmethod
    def priority_for(cls, step_name: str) -> int:
        """A step's priority: its own, else the class's."""
        definition = cls._pgflow_steps.get(step_name)
        if definition is not None and definition.priority is not None:
            return definition.priority
        return cls.priority

    @classmethod
    def start(
        cls,
        subject: Any = None,
        input: dict[str, Any] | None = None,
        key: str | None = None,
        *,
        attributes: Mapping[str, Any] | None = None,
        actor: Any = None,
    ) -> Any:
        """Start a run of this workflow; returns the ``WorkflowRun``. See ``pgflow.store.start_run``.
        ``attributes``: flat tags searched with ``attr.K:V`` (limits: ``pgflow.core.attributes``).
        ``actor``: who starts it (``request.user`` in a view), the ``started`` event's actor and
        the requester an approval with ``self_approval=False`` refuses; None: "system"."""
        # facade: start() is the user's door to store.start_run; the store sits above this class
        from .. import store

        return store.start_run(cls, subject=subject, input=input, key=key, attributes=attributes, actor=actor)

    @classmethod
    def runs(cls) -> QuerySet[Any]:
        """This workflow's runs, as a queryset."""
        # lazy: the models need the app registry; importing pgflow.workflow must not
        from ..models import WorkflowRun

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
        self._attributes_set: dict[str, Any] = {}

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

    def set_attributes(self, attributes: Mapping[str, Any] | None = None, /, **values: Any) -> None:
        """Set the run's attributes (``self.set_attributes(plan="gold")``, or a dict for keys
        such as ``"order.id"``): merged over the run's at this step's commit, with an
        ``attributes_set`` event; an attempt that fails sets none. A value of None is kept
        as null (the key stays). Checked now: a ValueError / TypeError names what is accepted."""
        what = "set_attributes()"
        new = {**attribute_rules.checked(attributes, what), **attribute_rules.checked(values, what)}
        current = getattr(self._run, "attributes", None) if self._run is not None else None
        attribute_rules.merged({**(current or {}), **self._attributes_set}, new)
        self._attributes_set.update(new)

    @property
    def attributes_set(self) -> dict[str, Any]:
        """What this attempt's ``set_attributes()`` calls set so far (committed with the step)."""
        return dict(self._attributes_set)

    @property
    def attempt(self) -> int | None:
        """The running attempt's number, 1-based."""
        return self._attempt

    def children(self, step_name: str) -> list[Any]:
        """The child runs (``batch.add_run``) of the fan_out ``step_name``'s latest completed
        attempt, in the order they were added; each ``WorkflowRun``'s ``outputs`` holds its
        steps' outputs. Empty when that step has not completed."""
        # lazy: the models need the app registry; importing pgflow.workflow must not
        from ..models import BatchMember, Step, WorkflowRun

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


def _path_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
