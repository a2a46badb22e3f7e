"""JSON values as PostgreSQL's jsonb takes them: one check for inputs, payloads, outputs
and member arguments, with a message that names what was wrong."""

from __future__ import annotations

import json
from typing import Any

NUL = "\\u0000"  # jsonb refuses this escape, so a string holding a NUL character cannot be stored


def encode(value: Any, what: str) -> str:
    """``value`` as JSON text. TypeError naming ``what`` and the offending type when it is
    not JSON; ValueError for NaN / Infinity, self-reference or a NUL character."""
    text, error = _encoded(value)
    if error is not None:
        raise type(error)(f"{what} must be JSON-serialisable: {error}")
    if NUL in text:
        raise ValueError(f"{what} holds a NUL character (\\x00), which PostgreSQL cannot store")
    return text


def problem(value: Any) -> str | None:
    """Why ``value`` cannot be stored as jsonb, or None."""
    text, error = _encoded(value)
    if error is not None:
        return str(error)
    return "it holds a NUL character (\\x00), which PostgreSQL cannot store" if NUL in text else None


def _encoded(value: Any) -> tuple[str, TypeError | ValueError | None]:
    try:
        return json.dumps(value, allow_nan=False), None
    except TypeError as exc:
        return "", exc
    except ValueError as exc:
        return "", ValueError(f"{exc} (NaN and Infinity are not JSON)")
    except RecursionError:
        return "", ValueError("it is nested too deeply or refers to itself")
