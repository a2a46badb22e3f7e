"""Error capture: an exception turned into the error columns of a step attempt.

When a step body raises, the operator should be able to act from the dashboard alone,
without opening an error service. :func:`capture` gives the attempt row:

``error_class``
    the qualified class name (``"ValueError"``, ``"myapp.errors.PaymentDeclined"``);
``error_message``
    ``str(error)``, at most :data:`MESSAGE_LIMIT` characters;
``error_backtrace``
    the error's own traceback, formatted the way Python prints it, without the frames of
    pgflow's runtime and of the standard library's thread plumbing (they are the same in
    every backtrace and say nothing about the step), cut to the innermost frames;
``error_causes``
    ``[{"class", "message"}]`` along the chain Python prints as "The above exception was
    …", at most :data:`MAX_CAUSES` deep, stopping where a cyclic chain repeats.

Pure: no Django, no database. Capture runs on the worker's error path, so it never raises
for an exception whose ``__str__`` is broken.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import traceback
from collections.abc import Iterable
from typing import Any

MESSAGE_LIMIT = 10_000  # characters of error_message
CAUSE_MESSAGE_LIMIT = 1_000  # characters of each cause's message, and of the backtrace's last line
MAX_CAUSES = 5  # links of the cause chain kept
ELLIPSIS = "…"


def _normalized(path: str) -> str:
    return os.path.normcase(os.path.abspath(path))


# pgflow/ as installed: this file is pgflow/core/errors.py.
_PGFLOW_DIR = os.path.dirname(os.path.dirname(_normalized(__file__)))

# Frames from these places are plumbing: the claim loop, the runner that calls the body,
# the store that records the outcome, the thread pool the body runs in.
HIDDEN_DIRECTORIES: tuple[str, ...] = (
    os.path.join(_PGFLOW_DIR, "runtime"),
    os.path.join(_PGFLOW_DIR, "core"),
    os.path.dirname(_normalized(concurrent.futures.__file__)),
)
HIDDEN_FILES: frozenset[str] = frozenset(
    {
        os.path.join(_PGFLOW_DIR, "store.py"),
        _normalized(threading.__file__),
    }
)


def capture(error: BaseException, *, backtrace_lines: int) -> dict[str, Any]:
    """The error columns of the attempt that raised ``error``.

    ``backtrace_lines`` is the number of frames kept (``ERROR_BACKTRACE_LINES``): a frame
    is one entry of the backtrace, printed with its source line.
    """
    return {
        "error_class": qualified_name(type(error)),
        "error_message": truncate(_message(error), MESSAGE_LIMIT),
        "error_backtrace": backtrace(error, backtrace_lines),
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
    """True for a frame of pgflow's runtime or of the standard library's thread plumbing."""
    path = _normalized(filename)
    if path in HIDDEN_FILES:
        return True
    return any(path.startswith(directory + os.sep) for directory in HIDDEN_DIRECTORIES)


def clean(frames: Iterable[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    """``frames`` without the hidden ones; all of them when nothing else would be left.

    An error raised inside pgflow itself is then still shown where it happened.
    """
    frames = list(frames)
    return [frame for frame in frames if not is_hidden(frame.filename)] or frames


def backtrace(error: BaseException, lines: int) -> str:
    """The traceback of ``error`` as one string; ``""`` for an error that was never raised.

    Keeps the innermost ``lines`` frames (where the error was raised: the outer ones are
    the same for every step) and says how many outer frames were left out. Ends with the
    exception line, cut at :data:`CAUSE_MESSAGE_LIMIT` since ``error_message`` holds the
    message in full. The causes' own tracebacks are not included: ``error_causes`` names them.
    """
    frames = clean(traceback.extract_tb(error.__traceback__))
    if not frames:
        return ""
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
