"""JSON values and text as PostgreSQL stores them: one check for inputs, payloads, outputs
and member arguments, with a message that names what was wrong, and a cleaner for text
pgflow writes on its own account (error messages), which must never fail a write."""

from __future__ import annotations

import json
import re
from typing import Any

NUL = "\\u0000"  # jsonb refuses this escape, so a string holding a NUL character cannot be stored
# json.dumps escapes every surrogate; a lone one (what os.fsdecode makes of a non-UTF-8 byte)
# is refused by PostgreSQL in jsonb and in text alike.
_SURROGATE_ESCAPE = re.compile(r"\\ud[89a-f]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# One encoder for every check: json.dumps with any option builds a new one per call, and most
# values checked here are small enough for that to be most of the cost. Its encode() keeps no
# state between calls, so threads share it.
_ENCODER = json.JSONEncoder(allow_nan=False)
HOLDS_NUL = "holds a NUL character (\\x00), which PostgreSQL cannot store"
HOLDS_SURROGATE = (
    "holds a lone surrogate (such as os.fsdecode makes of a non-UTF-8 name), which PostgreSQL "
    "cannot store; encode it (e.g. os.fsencode(name).hex()) or use a valid UTF-8 string"
)


def encode(value: Any, what: str) -> str:
    """``value`` as JSON text. TypeError naming ``what`` and the offending type when it is
    not JSON; ValueError for NaN / Infinity, self-reference, a NUL character or a lone surrogate."""
    text, error = _encoded(value)
    if error is not None:
        raise type(error)(f"{what} must be JSON-serialisable: {error}")
    why = _unstorable(text)
    if why:
        raise ValueError(f"{what} {why}")
    return text


def problem(value: Any) -> str | None:
    """Why ``value`` cannot be stored as jsonb, or None."""
    text, error = _encoded(value)
    if error is not None:
        return str(error)
    why = _unstorable(text)
    return f"it {why}" if why else None


def text_problem(value: str) -> str | None:
    """Why the string ``value`` cannot be stored in a text column, or None."""
    if "\x00" in value:
        return f"it {HOLDS_NUL}"
    return f"it {HOLDS_SURROGATE}" if _UNSTORABLE.search(value) else None


def storable(value: Any) -> Any:
    """``value`` with every string made storable: NUL and lone surrogates become visible
    escapes (``\\x00``, ``\\ud800``). For text pgflow records itself, such as error messages."""
    if isinstance(value, str):
        if not _UNSTORABLE.search(value):
            return value
        return value.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value


def _unstorable(text: str) -> str | None:
    if NUL in text:
        return HOLDS_NUL
    if not _SURROGATE_ESCAPE.search(text):
        return None
    # A surrogate pair is an escaped character beyond the BMP; only a lone surrogate is refused.
    try:
        json.dumps(json.loads(text), ensure_ascii=False).encode("utf-8")  # pairs decode to one character
    except (UnicodeEncodeError, RecursionError):
        return HOLDS_SURROGATE
    return None


def _encoded(value: Any) -> tuple[str, TypeError | ValueError | None]:
    try:
        return _ENCODER.encode(value), None
    except TypeError as exc:
        return "", exc
    except ValueError as exc:
        return "", ValueError(f"{exc} (NaN and Infinity are not JSON)")
    except RecursionError:
        return "", ValueError("it is nested too deeply or refers to itself")
