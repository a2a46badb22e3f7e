"""Masking secrets out of what the MCP server answers. Pure: values in, values out."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "[redacted]"
MIN_SECRET = 4  # characters of a known secret value masked wherever it appears in text; shorter ones would
# mask ordinary words and digits everywhere
MIN_SECRET_NUMBER = 6  # digits of a number under a secret key (a card number) masked in text

# In text: a value written after a key that names a secret: ``password=hunter2``,
# ``"api_key": "sk_1"``, ``token: abc`` (its closing quote, then ``=`` or ``:``, then a quoted
# or bare value).
_VALUE = r"(\"[^\"]*\"|'[^']*'|[^\s,;&)}\]\"']+)"
# A URL's credentials: ``scheme://user:password@host``.
_URL_PASSWORD = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:)([^@\s/]+)(@)")


def redact(value: Any, keys: Iterable[str], secrets: Iterable[Any] = ()) -> Any:
    """A copy of ``value`` where every dict entry whose key contains one of ``keys``
    (case-insensitive; ``-`` and ``_`` alike) has its value replaced by :data:`MASK`, at any
    depth, inside dicts, lists and tuples; and every string (an error message, a paused
    reason, an event's details) has masked what :func:`redact_text` masks, ``secrets`` being
    values known to be secret (see :func:`secret_values`). Other values are returned unchanged.

    Substrings, not whole names: ``"card"`` masks ``card_number`` and ``"token"`` masks
    ``refresh_token``, since a leaked secret costs more than an over-masked field.
    """
    needles = tuple(_norm(key) for key in keys if key)
    literals = _literals(secrets)
    if not needles and not literals:
        return value
    return _walk(value, needles, _pattern(needles), literals)


def redact_text(text: str, keys: Iterable[str], secrets: Iterable[Any] = ()) -> str:
    """``text`` with masked: each value written after a key naming a secret
    (``password=…``, ``"token": "…"``), a URL's password, and each of ``secrets`` (known
    secret values, at least MIN_SECRET characters) wherever it appears."""
    needles = tuple(_norm(key) for key in keys if key)
    return _text(text, _pattern(needles), _literals(secrets))


def secret_values(value: Any, keys: Iterable[str]) -> set[str]:
    """The strings (and long numbers, as text) held under a secret key anywhere in ``value``:
    what :func:`redact` masks by key, to be masked in text too."""
    needles = tuple(_norm(key) for key in keys if key)
    found: set[str] = set()
    if needles:
        _collect(value, needles, False, found)
    return found


def _norm(key: str) -> str:
    return key.lower().replace("-", "_")


def _pattern(needles: tuple[str, ...]) -> re.Pattern[str] | None:
    if not needles:
        return None
    names = "|".join(re.escape(needle).replace("_", "[_-]?") for needle in needles)
    return re.compile(rf"((?:{names})[\w-]*[\"']?\s*[:=]\s*){_VALUE}", re.IGNORECASE)


def _literals(secrets: Iterable[Any]) -> tuple[str, ...]:
    # Longest first, so a secret that holds another is masked whole.
    kept = {secret for secret in secrets if isinstance(secret, str) and len(secret) >= MIN_SECRET}
    return tuple(sorted(kept, key=len, reverse=True))


def _text(text: str, pattern: re.Pattern[str] | None, literals: tuple[str, ...]) -> str:
    for secret in literals:
        if secret in text:
            text = text.replace(secret, MASK)
    if pattern is not None:
        text = pattern.sub(lambda match: match.group(1) + MASK, text)
    return _URL_PASSWORD.sub(lambda match: match.group(1) + MASK + match.group(3), text)


def _walk(value: Any, needles: tuple[str, ...], pattern: re.Pattern[str] | None, literals: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {
            key: MASK
            if isinstance(key, str) and any(n in _norm(key) for n in needles)
            else _walk(item, needles, pattern, literals)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_walk(item, needles, pattern, literals) for item in value]
    if isinstance(value, str):
        return _text(value, pattern, literals)
    return value


def _collect(value: Any, needles: tuple[str, ...], secret: bool, found: set[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _collect(item, needles, secret or (isinstance(key, str) and any(n in _norm(key) for n in needles)), found)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, needles, secret, found)
    elif secret and isinstance(value, str):
        found.add(value)
    elif secret and isinstance(value, int | float) and not isinstance(value, bool):
        text = str(value)
        if len(text) >= MIN_SECRET_NUMBER:
            found.add(text)
