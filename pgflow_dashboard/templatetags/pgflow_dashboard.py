"""Template filters of the dashboard pages. Each returns plain text: autoescape applies."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from django import template
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

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
def when(value: datetime | None, form: str = "") -> SafeString | str:
    """A moment in one format everywhere: ``2025-03-04 10:02:07`` in the site's zone (the
    page's script, times.js, re-renders it in the viewer's own zone), the UTC moment on
    hover; ``when:"time"`` shows the clock only, ``when:"ms"`` adds milliseconds (the audit
    trail). ``None`` -> ``"—"``."""
    if value is None:
        return "—"
    local = timezone.localtime(value)
    utc = value.astimezone(UTC)
    shown = {"time": f"{local:%H:%M:%S}", "ms": f"{local:%Y-%m-%d %H:%M:%S.%f}"[:23]}.get(
        form, f"{local:%Y-%m-%d %H:%M:%S}"
    )
    return format_html(
        '<time datetime="{}" title="{} UTC" data-pgflow-time="{}">{}</time>',
        utc.isoformat(),
        f"{utc:%Y-%m-%d %H:%M:%S.%f}"[:23] if form == "ms" else f"{utc:%Y-%m-%d %H:%M:%S}",
        form or "full",
        shown,
    )


@register.filter
def compact_json(value: Any) -> str:
    """A JSON value on one line, for a table cell's preview."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, cls=DjangoJSONEncoder)


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
