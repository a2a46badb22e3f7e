"""Masking secrets out of what the MCP server answers. Pure: values in, values out."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MASK = "[redacted]"


def redact(value: Any, keys: Iterable[str]) -> Any:
    """A copy of ``value`` where every dict entry whose key contains one of ``keys``
    (case-insensitive; ``-`` and ``_`` alike) has its value replaced by :data:`MASK`, at any
    depth, inside dicts, lists and tuples. Other values are returned unchanged.

    Substrings, not whole names: ``"card"`` masks ``card_number`` and ``"token"`` masks
    ``refresh_token``, since a leaked secret costs more than an over-masked field.
    """
    needles = tuple(_norm(key) for key in keys if key)
    return _walk(value, needles) if needles else value


def _norm(key: str) -> str:
    return key.lower().replace("-", "_")


def _walk(value: Any, needles: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {
            key: MASK if isinstance(key, str) and any(n in _norm(key) for n in needles) else _walk(item, needles)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_walk(item, needles) for item in value]
    return value
