"""Find a workflow class from the dotted path a run stores.

Every Workflow subclass with at least one step registers itself under its
``workflow_path()`` when the class is created; a class created again under the same path
(a reloaded module, a test) replaces the earlier one. :func:`resolve` looks here first and
imports the path otherwise, so a worker finds workflows whose modules nothing imported yet.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from typing import TYPE_CHECKING

from .exceptions import WorkflowNotFound

if TYPE_CHECKING:
    from .workflow import Workflow

logger = logging.getLogger("pgflow")

REPORT_EVERY = 60.0  # seconds between two log lines about one class that does not import
_workflows: dict[str, type[Workflow]] = {}
_reported: dict[str, float] = {}  # path -> monotonic time of its last log line
_lock = threading.Lock()
_changes = 0  # registrations so far: what was worked out from the classes is stale once it moves


def register(workflow: type[Workflow]) -> None:
    """Record ``workflow`` under its path (called by ``Workflow.__init_subclass__``)."""
    global _changes
    with _lock:
        _workflows[workflow.workflow_path()] = workflow
        _changes += 1


def changes() -> int:
    """How many registrations there have been: a worker works out again which steps read
    outputs when this has moved (a class first imported since it last looked)."""
    return _changes


def registered() -> list[type[Workflow]]:
    """Every registered workflow class, by path."""
    with _lock:
        return [_workflows[path] for path in sorted(_workflows)]


def resolve(path: str) -> type[Workflow]:
    """The workflow class at ``path`` (``module.QualName``).

    Raises :class:`~pgflow.exceptions.WorkflowNotFound`, naming the path and why, when the
    path does not import or names something that is not a Workflow subclass; never any
    other exception, so a run whose class is gone can be shown and paused, not crash the
    worker.
    """
    # No lock for a lookup: dict.get is atomic, and register() only ever puts whole entries.
    # A worker resolves each attempt's class several times.
    found = _workflows.get(path) if isinstance(path, str) else None
    if found is not None:
        return found
    if not isinstance(path, str) or "." not in path:
        raise WorkflowNotFound(f"workflow class path must be 'module.QualName', got {path!r}")
    try:
        target = import_path(path)
    except Exception as exc:  # noqa: BLE001 - whatever the module raised, the class is not there
        _report(path, exc)
        raise WorkflowNotFound(f"workflow class {path!r} does not import: {type(exc).__name__}: {exc}") from exc
    with _lock:
        # Importing the module may have registered a class made under this path (pgflow.tasks
        # makes one per task, named as the task's function).
        found = _workflows.get(path)
    if found is not None:
        return found
    from .workflow import Workflow  # facade: is it a Workflow? the workflow package imports this module

    if not (isinstance(target, type) and issubclass(target, Workflow)) or target is Workflow:
        raise WorkflowNotFound(f"{path!r} is not a pgflow.Workflow subclass, it is {target!r}")
    return target


def _report(path: str, exc: BaseException) -> None:
    """Log a class that does not import as an ERROR, once a minute per path: its runs pause
    with the error recorded, but the cause (a deploy without the module, a typo, a missing
    dependency) is fixed where the code runs, and the log is where operators look."""
    now = time.monotonic()
    with _lock:
        if now - _reported.get(path, -REPORT_EVERY) < REPORT_EVERY:
            return
        _reported[path] = now
    logger.error(
        "workflow class %s does not import (%s: %s); its runs pause until it does. Define it in an "
        "installed app's workflows.py, or import its module in that app's AppConfig.ready()",
        path,
        type(exc).__name__,
        exc,
        extra={"action": "workflow_not_found", "workflow": path},
    )


def import_path(path: str) -> object:
    """Import the longest module prefix of ``path`` and follow the rest as attributes.

    The rest may hold dots itself (a nested class's qualified name). A missing module is
    only skipped when it is the prefix being tried: a module that exists but fails to
    import one of its own dependencies is that failure, reported as is.
    """
    parts = path.split(".")
    not_found: ModuleNotFoundError | None = None
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            found: object = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if split > 1 and (module_name == missing or module_name.startswith(missing + ".")):
                not_found = not_found or exc
                continue
            raise
        for depth, attribute in enumerate(parts[split:]):
            try:
                found = getattr(found, attribute)
            except AttributeError:
                # "no module regpkg.nowhere" says more than "regpkg has no attribute nowhere".
                if not_found is not None and depth == 0:
                    raise not_found from None
                raise AttributeError(f"module {module_name!r} has no attribute {'.'.join(parts[split:])!r}") from None
        return found
    raise AssertionError("unreachable: a path with a dot has a module prefix")
