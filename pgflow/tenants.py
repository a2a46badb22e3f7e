"""Tenants: which tenant a run belongs to, the context its code runs in, and who sees it.

``PGFLOW["TENANT"]`` is asked for the current tenant's key when ``start()`` creates a run
(a child run and a re-run take their parent's or original's instead); the key is stored on
the run (``run.tenant``) and never changes. ``PGFLOW["TENANT_CONTEXT"]`` gives the context
manager the worker enters around each body, condition and wait method of a run with a
tenant, so its ORM queries see that tenant's data (``pgflow.contrib.tenants`` provides both
for django-tenants). ``PGFLOW["TENANT_VISIBLE"]`` says which tenants' runs a staff user sees
in the dashboard and through MCP.

A run without a tenant, or a project without these settings, pays nothing: the context is
looked up only for a run whose tenant is set.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

from django.utils.module_loading import import_string

from .conf import pgflow_settings
from .core.jsonvalue import text_problem

MAX_TENANT = 100  # characters of a tenant key (WorkflowRun.tenant's max_length)
_NO_CONTEXT: AbstractContextManager[Any] = nullcontext()  # reusable: nullcontext keeps no state


def checked(value: Any, what: str = "a tenant key") -> str | None:
    """``value`` if it is a tenant key (a non-empty string of at most 100 characters without
    a NUL or a lone surrogate) or None; else an error naming what is accepted."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string or None, got {type(value).__name__} {value!r}")
    problem = text_problem(value) if value else "it is empty"
    if problem is None and len(value) > MAX_TENANT:
        problem = f"it is {len(value)} characters long, more than {MAX_TENANT}"
    if problem:
        raise ValueError(
            f"{what} must be a non-empty string of at most {MAX_TENANT} characters, got {value!r}: {problem}"
        )
    return value


# A tenant that starts made here are for, over PGFLOW["TENANT"] (a schedule's runs).
_ACTING_FOR: ContextVar[str | None] = ContextVar("pgflow_acting_for", default=None)


@contextmanager
def acting_for(tenant: str | None) -> Iterator[None]:
    """Runs started inside belong to ``tenant`` (checked), whatever PGFLOW["TENANT"] would
    return; ``None`` changes nothing."""
    token = _ACTING_FOR.set(checked(tenant))
    try:
        yield
    finally:
        _ACTING_FOR.reset(token)


def current() -> str | None:
    """The current tenant's key: the one ``acting_for`` names, else what ``PGFLOW["TENANT"]``
    returns now (None when unset)."""
    acting = _ACTING_FOR.get()
    if acting is not None:
        return acting
    setting = pgflow_settings.TENANT
    if setting is None:
        return None
    return checked(_callable(setting)(), "the tenant key PGFLOW['TENANT'] returned")


def context(tenant: str | None) -> AbstractContextManager[Any]:
    """The context to run a tenant's code in: ``PGFLOW["TENANT_CONTEXT"](tenant)``; a
    context that does nothing for no tenant or when the setting is unset."""
    if tenant is None:
        return _NO_CONTEXT
    setting = pgflow_settings.TENANT_CONTEXT
    if setting is None:
        return _NO_CONTEXT
    return _callable(setting)(tenant)


def in_context(tenant: str | None) -> bool:
    """Whether a run of ``tenant`` has a context to run in (the worker then runs its async
    bodies in a step thread, where the context is entered)."""
    return tenant is not None and pgflow_settings.TENANT_CONTEXT is not None


def context_of(workflow: Any) -> AbstractContextManager[Any]:
    """``context`` for the run of a workflow instance (the claim read its tenant: no query)."""
    run = getattr(workflow, "run", None)
    return context(getattr(run, "tenant", None) if run is not None else None)


def visible(user: Any) -> frozenset[str] | None:
    """The tenants whose runs ``user`` may see: None for every tenant (no
    ``PGFLOW["TENANT_VISIBLE"]``, or it returned None), else a set of keys (a run without a
    tenant is seen only by a user who sees every tenant)."""
    setting = pgflow_settings.TENANT_VISIBLE
    if setting is None:
        return None
    found = _callable(setting)(user)
    if found is None:
        return None
    if isinstance(found, str) or not isinstance(found, Iterable):
        raise TypeError(
            f"PGFLOW['TENANT_VISIBLE'] must return None (every tenant) or a set of tenant keys, got {found!r}"
        )
    return frozenset(found)


@functools.lru_cache(maxsize=16)
def _imported(path: str) -> Callable[..., Any]:
    return import_string(path)


def _callable(setting: Any) -> Callable[..., Any]:
    # Imported once per path: the worker asks for the context of every attempt of a tenant's run.
    return setting if callable(setting) else _imported(setting)
