"""pgflow's own options for a task, checked where they are given.

They reach a task three ways, the later winning: the backend's ``OPTIONS`` (defaults for every
task), :func:`options` (a decorator, above or below ``@task``, for Django versions whose
``@task`` passes no extra keywords to the backend: Django 6.0 does not, the 5.2 backport does),
and ``@task(...)`` keywords (the backport). A wrong one raises Django's ``InvalidTask`` (an
``InvalidTaskError`` on the backport) naming what is accepted, when the task is decorated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from django.utils.module_loading import import_string

from ..core.limits import Limit, Rate, Singleton
from ..core.policy import OnException
from ..core.ticks import Schedule
from .compat import InvalidTask, Task

T = TypeVar("T")

OPTION_NAMES = (
    "max_attempts",
    "backoff",
    "timeout",
    "key",
    "concurrency",
    "rate",
    "singleton",
    "on_exception",
    "schedules",
)
# Where a function marked by options() below @task keeps them until the task is made.
MARK = "_pgflow_task_options"


def accepted() -> str:
    return ", ".join(OPTION_NAMES)


def checked(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``values`` validated (dotted paths of callables imported); raises InvalidTask naming the option."""
    unknown = sorted(set(values) - set(OPTION_NAMES))
    if unknown:
        raise InvalidTask(
            f"{where}: unknown pgflow task option(s) {', '.join(map(repr, unknown))}; accepted: {accepted()}"
        )
    out: dict[str, Any] = {}
    for name, value in values.items():
        if value is None:
            out[name] = None
            continue
        out[name] = _CHECKS[name](value, f"{where}: {name}")
    return out


def _max_attempts(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidTask(f"{where} must be a positive whole number of attempts (1 = no retry), got {value!r}")
    return value


def _callable(value: Any, where: str, shape: str) -> Callable[..., Any]:
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError as exc:
            raise InvalidTask(
                f"{where}: {value!r} does not import ({exc}); give a {shape} or its dotted path"
            ) from None
    if not callable(value):
        raise InvalidTask(f"{where} must be a {shape} or its dotted path, got {value!r}")
    return value


def _backoff(value: Any, where: str) -> Callable[..., Any]:
    return _callable(value, where, "callable(exception, task_result) returning seconds (or None to give up)")


def _timeout(value: Any, where: str) -> timedelta:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidTask(f"{where} must be a timedelta or a number of seconds, got {value!r}")
    if seconds <= 0:
        raise InvalidTask(f"{where} must be positive, got {value!r}")
    return timedelta(seconds=seconds)


def _key(value: Any, where: str) -> Any:
    if isinstance(value, str):
        if not value or len(value) > 255:
            raise InvalidTask(f"{where} must be a non-empty string of at most 255 characters, got {value!r}")
        return value
    if callable(value):
        return value
    raise InvalidTask(f"{where} must be a string or a callable(*args, **kwargs) returning one (or None), got {value!r}")


def _instance(kind: type, name: str) -> Callable[[Any, str], Any]:
    def check(value: Any, where: str) -> Any:
        if not isinstance(value, kind):
            raise InvalidTask(f"{where} must be a pgflow.{name}(...), got {value!r}")
        return value

    return check


def _on_exception(value: Any, where: str) -> tuple[OnException, ...]:
    policies = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    for policy in policies:
        if not isinstance(policy, OnException):
            raise InvalidTask(f"{where} must be a pgflow.OnException(...) or a list of them, got {policy!r}")
    return policies


def _schedules(value: Any, where: str) -> tuple[Schedule, ...]:
    items = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    for item in items:
        if not isinstance(item, Schedule):
            raise InvalidTask(f"{where} must be a list of pgflow.Schedule(...), got {item!r}")
        extra = sorted(set(item.input) - {"args", "kwargs"})
        if (
            extra
            or not isinstance(item.input.get("args", []), list)
            or not isinstance(item.input.get("kwargs", {}), dict)
        ):
            raise InvalidTask(
                f"{where}: Schedule {item.name!r}'s input is the task's call: {{'args': [...], 'kwargs': {{...}}}}, "
                f"got {dict(item.input)!r}"
            )
    return items


_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "max_attempts": _max_attempts,
    "backoff": _backoff,
    "timeout": _timeout,
    "key": _key,
    "concurrency": _instance(Limit, "Limit"),
    "rate": _instance(Rate, "Rate"),
    "singleton": _instance(Singleton, "Singleton"),
    "on_exception": _on_exception,
    "schedules": _schedules,
}


def options(**values: Any) -> Callable[[T], T]:
    """pgflow's options for one task, as a decorator: below ``@task`` (on the function) or above
    it (on the task)::

        @pgflow.tasks.options(max_attempts=5, backoff=lambda exc, result: 2**result.attempts)
        @task
        def send_receipt(order_id): ...

    Accepted: ``max_attempts``, ``backoff``, ``timeout``, ``key``, ``concurrency``, ``rate``,
    ``singleton``, ``on_exception``, ``schedules``; see docs/reference.md "Django tasks".
    """
    given = checked(values, "pgflow.tasks.options()")

    def apply(target: T) -> T:
        if isinstance(target, Task):
            fields = {f.name for f in dataclasses.fields(target)}
            if not set(OPTION_NAMES) <= fields:
                raise InvalidTask(
                    f"pgflow.tasks.options() on {target.module_path}: its backend {target.backend!r} is not "
                    "pgflow.tasks.PgflowBackend, which these options are for"
                )
            return dataclasses.replace(target, **given)
        if callable(target):
            setattr(target, MARK, {**getattr(target, MARK, {}), **given})
            return target
        raise InvalidTask(f"pgflow.tasks.options() decorates a task or a function, got {target!r}")

    return apply
