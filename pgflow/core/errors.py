"""Error capture: an exception turned into the error columns of a step attempt.

When a step body raises, the operator should be able to act from the dashboard alone,
without opening an error service. :func:`capture` gives the attempt row:

``error_class``
    the qualified class name (``"ValueError"``, ``"myapp.errors.PaymentDeclined"``);
``error_message``
    ``str(error)``, at most :data:`MESSAGE_LIMIT` characters;
``error_backtrace``
    the error's own traceback, formatted the way Python prints it, keeping the
    application's frames like ``Rails.backtrace_cleaner``: the frames of installed
    libraries (site-packages), the standard library (its thread plumbing included) and
    pgflow itself are dropped, so an error raised inside Django's validators shows the
    step body's line; when nothing is left, every frame; then cut to the innermost ones.
    ``PGFLOW["BACKTRACE_CLEANER"]`` may name another rule;
``error_causes``
    ``[{"class", "message"}]`` along the chain Python prints as "The above exception was
    …", at most :data:`MAX_CAUSES` deep, stopping where a cyclic chain repeats.

Pure: no Django, no database. Capture runs on the worker's error path, so it never raises
for an exception whose ``__str__`` is broken.
"""

from __future__ import annotations

import os
import sysconfig
import threading
import traceback
from collections.abc import Callable, Iterable
from typing import Any

MESSAGE_LIMIT = 10_000  # characters of error_message
CAUSE_MESSAGE_LIMIT = 1_000  # characters of each cause's message, and of the backtrace's last line
MAX_CAUSES = 5  # links of the cause chain kept
ELLIPSIS = "…"


def _normalized(path: str) -> str:
    return os.path.normcase(os.path.abspath(path))


# pgflow/ as installed: this file is pgflow/core/errors.py.
_PGFLOW_DIR = os.path.dirname(os.path.dirname(_normalized(__file__)))


def _stdlib_directories() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    found = {_normalized(paths[key]) for key in ("stdlib", "platstdlib") if paths.get(key)}
    # A virtualenv's sysconfig may point at the venv; the modules' own files say where they are.
    found.add(os.path.dirname(_normalized(os.__file__)))
    return tuple(sorted(found))


# Frames from these places are not the application's: pgflow (the claim loop, the runner
# that calls the body, the store that records the outcome) and the standard library (the
# thread pool the body runs in). Installed libraries are told by a path component.
HIDDEN_DIRECTORIES: tuple[str, ...] = (_PGFLOW_DIR, *_stdlib_directories())
HIDDEN_FILES: frozenset[str] = frozenset({_normalized(threading.__file__)})
LIBRARY_FOLDERS = frozenset({"site-packages", "dist-packages"})

# A cleaner: the frames of a traceback (outermost first) -> the ones error_backtrace keeps.
Cleaner = Callable[[list[traceback.FrameSummary]], Iterable[traceback.FrameSummary]]


def capture(error: BaseException, *, backtrace_lines: int, cleaner: Cleaner | None = None) -> dict[str, Any]:
    """The error columns of the attempt that raised ``error``.

    ``backtrace_lines`` is the number of frames kept (``ERROR_BACKTRACE_LINES``): a frame
    is one entry of the backtrace, printed with its source line. ``cleaner``
    (``BACKTRACE_CLEANER``) replaces the rule of :func:`clean`.
    """
    return {
        "error_class": qualified_name(type(error)),
        "error_message": truncate(_message(error), MESSAGE_LIMIT),
        "error_backtrace": backtrace(error, backtrace_lines, cleaner=cleaner),
        "error_causes": causes(error),
    }


def cleared() -> dict[str, Any]:
    """The error columns reset, for the run's view once a later attempt succeeds or it resumes."""
    return {"error_class": None, "error_message": None, "error_backtrace": None, "error_causes": []}


def truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, the last one ``…`` when something was cut."""
    if limit < 1:
        raise ValueError(f"limit must be a whole number of at least 1, got {limit!r}")
    if len(text) <= limit:
        return text
    return text[: limit - 1] + ELLIPSIS


def qualified_name(cls: type) -> str:
    """``module.QualName``; a builtin exception goes by its bare name, as Python prints it."""
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", cls.__name__)
    if not module or module == "builtins":
        return name
    return f"{module}.{name}"


def causes(error: BaseException) -> list[dict[str, str]]:
    """The chain behind ``error``, nearest first: ``[{"class": …, "message": …}]``.

    Follows ``__cause__`` (``raise … from cause``), else ``__context__`` (an error raised
    while handling another) unless ``raise … from None`` suppressed it: the chain Python
    itself prints.
    """
    seen = {id(error)}  # identity: two equal errors are still two links
    chain: list[dict[str, str]] = []
    link = _next_link(error)
    while link is not None and len(chain) < MAX_CAUSES and id(link) not in seen:
        seen.add(id(link))
        chain.append(
            {
                "class": qualified_name(type(link)),
                "message": truncate(_message(link), CAUSE_MESSAGE_LIMIT),
            }
        )
        link = _next_link(link)
    return chain


def is_hidden(filename: str) -> bool:
    """True for a frame that is not the application's: an installed library's
    (site-packages), the standard library's, or pgflow's own."""
    if filename.startswith("<frozen "):
        return True  # the standard library's frozen modules (importlib)
    if filename.startswith("<"):
        return False  # code compiled from a string: the application's
    path = _normalized(filename)
    if path in HIDDEN_FILES or LIBRARY_FOLDERS.intersection(path.split(os.sep)):
        return True
    return any(path.startswith(directory + os.sep) for directory in HIDDEN_DIRECTORIES)


def clean(frames: Iterable[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    """``frames`` without the hidden ones; all of them when nothing else would be left.

    An error raised inside a library or pgflow alone is then still shown where it happened.
    """
    frames = list(frames)
    return [frame for frame in frames if not is_hidden(frame.filename)] or frames


def backtrace(error: BaseException, lines: int, *, cleaner: Cleaner | None = None) -> str:
    """The traceback of ``error`` as one string; ``""`` for an error that was never raised.

    Keeps the innermost ``lines`` frames (where the error was raised: the outer ones are
    the same for every step) and says how many outer frames were left out. Ends with the
    exception line, cut at :data:`CAUSE_MESSAGE_LIMIT` since ``error_message`` holds the
    message in full. The causes' own tracebacks are not included: ``error_causes`` names them.
    """
    raw = list(traceback.extract_tb(error.__traceback__))
    if not raw:
        return ""
    frames = list((cleaner or clean)(list(raw))) or raw  # a cleaner that keeps nothing: every frame
    kept = frames[-lines:] if lines > 0 else []
    parts = ["Traceback (most recent call last):\n"]
    omitted = len(frames) - len(kept)
    if omitted:
        parts.append(f"  {ELLIPSIS} {omitted} outer frame{'' if omitted == 1 else 's'} not shown\n")
    parts.extend(traceback.StackSummary.from_list(kept).format())
    last_line = "".join(traceback.format_exception_only(type(error), error)).rstrip("\n")
    parts.append(truncate(last_line, CAUSE_MESSAGE_LIMIT))
    return "".join(parts)


def _next_link(error: BaseException) -> BaseException | None:
    if error.__cause__ is not None:
        return error.__cause__
    if error.__suppress_context__:
        return None
    return error.__context__


def _message(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:
        return f"<unprintable {qualified_name(type(error))} object>"
