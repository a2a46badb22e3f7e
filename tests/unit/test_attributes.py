"""A run's attributes: flat JSON tags within limits, each refusal naming what was wrong and
what is accepted (pgflow.core.attributes)."""

from __future__ import annotations

import pytest

from pgflow.core.attributes import MAX_BYTES, MAX_KEYS, checked, merged


def test_flat_values_of_the_accepted_types_pass_unchanged():
    values = {"plan": "gold", "seats": 12, "ratio": 0.5, "vip": True, "coupon": None, "order.id": "A-7", "x_y-z": 1}
    assert checked(values) == values
    assert checked(None) == {}


@pytest.mark.parametrize(
    ("values", "error", "says"),
    [
        ({"plan": {"tier": "gold"}}, TypeError, "the value of 'plan' is a dict; a value must be a str, int, float"),
        ({"tags": ["a"]}, TypeError, "no dicts or lists: attributes are flat"),
        ({"when": object()}, TypeError, "the value of 'when' is a object"),
        ({"ratio": float("nan")}, ValueError, "a float must be finite"),
        ({"": 1}, ValueError, "key '' is not accepted; a key is 1-64 characters of A-Z a-z 0-9 _ . -"),
        ({"k" * 65: 1}, ValueError, "a key is 1-64 characters"),
        ({"has space": 1}, ValueError, "key 'has space' is not accepted"),
        ({"plan:gold": 1}, ValueError, "key 'plan:gold' is not accepted"),
        ({7: 1}, TypeError, "a key must be a string of 1-64 characters of A-Z a-z 0-9 _ . -, got int 7"),
        ({"note": "a\x00b"}, ValueError, "the value of 'note' holds a NUL character"),
        ({f"k{i}": i for i in range(MAX_KEYS + 1)}, ValueError, f"{MAX_KEYS + 1} keys; a run holds at most {MAX_KEYS}"),
        ({"note": "x" * MAX_BYTES}, ValueError, f"bytes as JSON; a run's attributes are at most {MAX_BYTES} bytes"),
    ],
)
def test_what_is_refused_and_the_message_says_what_is_accepted(values, error, says):
    with pytest.raises(error) as caught:
        checked(values, "start(attributes=...)")
    assert str(caught.value).startswith("start(attributes=...)")
    assert says in str(caught.value)


def test_not_a_mapping_is_refused():
    with pytest.raises(TypeError, match=r"attributes must be a dict of flat values .* got list"):
        checked([("plan", "gold")])


def test_the_limits_hold_for_the_run_once_merged():
    current = {f"k{i}": i for i in range(MAX_KEYS - 1)}
    assert len(merged(current, {"k0": "again", "last": 1})) == MAX_KEYS  # a key set again is not a new one
    with pytest.raises(ValueError, match=f"a run holds at most {MAX_KEYS} attributes"):
        merged(current, {"one": 1, "two": 2})
    with pytest.raises(ValueError, match="at most 4096 bytes"):
        merged({"a": "x" * 3000}, {"b": "y" * 1100})
