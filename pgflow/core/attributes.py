"""A run's attributes: flat JSON tags (``start(attributes=...)``, a body's
``set_attributes()``) that the run list, the MCP and the CLI search with ``attr.K:V``.
Checked here, with messages naming what was wrong and what is accepted. Pure: no Django,
no database.

Flat on purpose: a tag is one value under one key, so ``attr.plan:gold`` is one ``@>``
on the run's GIN index, and the limits keep every run row small (the row is rewritten
on each step of the run).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from . import jsonvalue

MAX_KEYS = 32  # attributes per run
MAX_BYTES = 4096  # the run's attributes as compact JSON, UTF-8
KEY_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
ACCEPTED_KEYS = "1-64 characters of A-Z a-z 0-9 _ . -"
ACCEPTED_VALUES = "a str, int, float, bool or None (no dicts or lists: attributes are flat)"


def checked(attributes: Any, what: str = "attributes") -> dict[str, Any]:
    """``attributes`` (a mapping, or None for none) as a plain dict, every key and value
    checked, and the whole within MAX_KEYS and MAX_BYTES. TypeError for a value of the wrong
    type, ValueError for a bad key or too much."""
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):
        raise TypeError(
            f"{what} must be a dict of flat values ({{'plan': 'gold'}}) or None, got {type(attributes).__name__}"
        )
    values: dict[str, Any] = {}
    for key, value in attributes.items():
        values[check_key(key, what)] = check_value(key, value, what)
    return within_limits(values, what)


def check_key(key: Any, what: str = "attributes") -> str:
    if not isinstance(key, str):
        raise TypeError(f"{what}: a key must be a string of {ACCEPTED_KEYS}, got {type(key).__name__} {key!r}")
    if not KEY_PATTERN.fullmatch(key):
        raise ValueError(f"{what}: key {key!r} is not accepted; a key is {ACCEPTED_KEYS}")
    return key


def check_value(key: str, value: Any, what: str = "attributes") -> Any:
    if value is None or isinstance(value, bool | int | str):
        if isinstance(value, str) and (why := jsonvalue.text_problem(value)):
            raise ValueError(f"{what}: the value of {key!r} {why.removeprefix('it ')}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{what}: the value of {key!r} is {value!r}; a float must be finite (JSON has no NaN)")
        return value
    raise TypeError(f"{what}: the value of {key!r} is a {type(value).__name__}; a value must be {ACCEPTED_VALUES}")


def within_limits(values: dict[str, Any], what: str = "attributes") -> dict[str, Any]:
    """``values`` if they fit a run: at most MAX_KEYS keys and MAX_BYTES of JSON."""
    if len(values) > MAX_KEYS:
        raise ValueError(f"{what}: {len(values)} keys; a run holds at most {MAX_KEYS} attributes")
    size = size_of(values)
    if size > MAX_BYTES:
        raise ValueError(f"{what}: {size} bytes as JSON; a run's attributes are at most {MAX_BYTES} bytes")
    return values


def size_of(values: Mapping[str, Any]) -> int:
    return len(json.dumps(values, separators=(",", ":"), ensure_ascii=False).encode())


def merged(current: Mapping[str, Any] | None, new: Mapping[str, Any], what: str = "set_attributes()") -> dict[str, Any]:
    """The run's attributes once ``new`` (already checked) is merged over ``current``: the
    limits hold for the whole, not for each call."""
    return within_limits({**(current or {}), **new}, what)
