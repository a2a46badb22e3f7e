"""Template filters of the dashboard pages. Each returns plain text: autoescape applies."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django import template
from django.core.serializers.json import DjangoJSONEncoder

from ..timeformat import duration as words

register = template.Library()


@register.filter
def duration(value: float | int | timedelta | None) -> str:
    """Seconds (or a timedelta) in words: ``125`` -> ``"2m 5s"``, ``None`` -> ``"—"``."""
    return words(value)


@register.filter
def pretty_json(value: Any) -> str:
    """A JSON value indented for a ``<pre>``; the template escapes it like any text."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, cls=DjangoJSONEncoder)


@register.filter
def percent(value: float | None) -> str:
    """``0.987`` -> ``"98.7%"``; ``None`` -> ``"—"``."""
    return "—" if value is None else f"{value * 100:.1f}%"


@register.filter
def short_class(path: str | None) -> str:
    """``"shop.flows.Onboarding"`` -> ``"Onboarding"``."""
    return "" if not path else path.rsplit(".", 1)[-1]


@register.filter
def field(row: dict[str, Any], key: str) -> Any:
    """``row[key]`` (``None`` when missing), for a key held in a variable."""
    return row.get(key)
