"""What PostgreSQL's jsonb can store, checked before anything is written."""

from __future__ import annotations

import math

import pytest

from pgflow.core import jsonvalue


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ({"when": {1}}, TypeError, "payload must be JSON-serialisable: Object of type set is not JSON serializable"),
        ([math.inf], ValueError, "payload must be JSON-serialisable: Out of range float values are not JSON "
                                 "compliant"),
        ({"a": "x\x00y"}, ValueError, "payload holds a NUL character (\\x00), which PostgreSQL cannot store"),
    ],
)
def test_encode_names_what_is_wrong(value, error, message):
    with pytest.raises(error) as raised:
        jsonvalue.encode(value, "payload")
    assert str(raised.value).startswith(message)


def test_a_self_referencing_value_is_refused():
    loop: list = []
    loop.append(loop)
    assert jsonvalue.problem(loop) is not None


def test_good_values_pass():
    assert jsonvalue.encode({"a": [1, 2.5, None, "é"]}, "x") == '{"a": [1, 2.5, null, "\\u00e9"]}'
    assert jsonvalue.problem({"ok": True}) is None
