"""The command line's JSON: one document per command on stdout, datetimes as ISO 8601 (as
Django's encoder writes them, the way insights.json does)."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder


def dumps(value: Any, *, indent: int | None = 2) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, indent=indent, ensure_ascii=False)
