"""What PostgreSQL's jsonb can store, checked before anything is written."""

from __future__ import annotations

import math

import pytest

from pgflow.core import jsonvalue


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ({"when": {1}}, TypeError, "payload must be JSON-serialisable: Object of type set is not JSON serializable"),
        ([math.inf], ValueError, "payload must be JSON-serialisable: Out of range float values are not JSON compliant"),
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


@pytest.mark.parametrize("value", [{"name": "report-\udcff.csv"}, {"\ud800": 1}, ["a\udfffb"]])
def test_a_lone_surrogate_is_refused_naming_it(value):
    # what os.fsdecode makes of a non-UTF-8 file name: PostgreSQL refuses it in jsonb and text
    with pytest.raises(ValueError, match="output holds a lone surrogate"):
        jsonvalue.encode(value, "output")
    assert "lone surrogate" in jsonvalue.problem(value)


def test_a_surrogate_pair_and_characters_beyond_the_bmp_pass():
    assert jsonvalue.problem({"emoji": "😀", "pair": "\ud83d\ude00"}) is None


def test_text_problem_names_nul_and_lone_surrogates():
    assert "NUL" in jsonvalue.text_problem("a\x00b")
    assert "lone surrogate" in jsonvalue.text_problem("a\udc80b")
    assert jsonvalue.text_problem("plain é 😀") is None


def test_storable_makes_recorded_text_writable_and_keeps_it_readable():
    assert jsonvalue.storable({"error_message": "bad\x00 \ud800", "error_causes": [{"m": "\udcff"}], "n": 3}) == {
        "error_message": "bad\\x00 \\ud800",
        "error_causes": [{"m": "\\udcff"}],
        "n": 3,
    }
    assert jsonvalue.storable("fine") == "fine"
