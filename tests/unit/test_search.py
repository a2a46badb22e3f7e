"""The run search language (pgflow.search): a query string in, a plain Query out, and a
clear error naming the bad token and what is accepted. No database."""

from __future__ import annotations

import pytest

from pgflow.search import ACCEPTED, Query, SearchError, has_qualifier, parse


def terms(text: str) -> list[tuple[str, tuple[str, ...], str, tuple[object, ...]]]:
    return [(term.qualifier, term.path, term.op, term.values) for term in parse(text).terms]


def test_every_qualifier_of_the_issue_reads_as_a_term():
    query = parse(
        "attr.plan:gold input.customer.id:42 output.charge.paid:>100 error:Timeout step:charge "
        "status:paused key:order-7 class:Checkout since:2d parent:#12"
    )
    assert [(t.qualifier, t.path, t.op, t.values) for t in query.terms] == [
        ("attr", ("plan",), "=", ("gold",)),
        ("input", ("customer", "id"), "=", (42, "42")),
        ("output", ("charge", "paid"), ">", (100,)),
        ("error", (), "=", ("Timeout",)),
        ("step", (), "=", ("charge",)),
        ("status", (), "=", ("paused",)),
        ("key", (), "=", ("order-7",)),
        ("class", (), "=", ("Checkout",)),
        ("since", (), ">=", (2 * 86400,)),
        ("parent", (), "=", (12,)),
    ]
    assert query.words == ()


@pytest.mark.parametrize(
    ("value", "op", "values"),
    [
        (">100", ">", (100,)),
        (">=2.5", ">=", (2.5,)),
        ("<-3", "<", (-3,)),
        ("<=0", "<=", (0,)),
        ("true", "=", (True, "true")),
        ("null", "=", (None, "null")),
        ("4.5", "=", (4.5, "4.5")),
        ("gold", "=", ("gold",)),
        ('"42"', "=", ("42",)),  # quoted: the text only
        ('">100"', "=", (">100",)),
    ],
)
def test_json_values_and_comparisons(value, op, values):
    assert terms(f"input.total:{value}") == [("input", ("total",), op, values)]


def test_bare_words_and_quoted_values():
    query = parse('order-7  "schedule:3:2025" error:"card declined" key:\'a b\' error:"say \\"no\\""')
    assert query.words == ("order-7", "schedule:3:2025")
    assert [term.value for term in query.terms] == ["card declined", "a b", 'say "no"']


def test_a_key_value_keeps_its_own_colons():
    assert terms("key:schedule:3:2025-01-01T00:00:00+00:00") == [
        ("key", (), "=", ("schedule:3:2025-01-01T00:00:00+00:00",))
    ]


def test_an_attribute_name_may_hold_dots_attributes_being_flat():
    (term,) = parse("attr.order.id:>=7").terms
    assert (term.qualifier, term.path, term.op, term.values) == ("attr", ("order.id",), ">=", (7,))


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("30m", 1800), ("2h", 7200), ("2d", 172800), ("1w", 604800)]
)
def test_since_reads_durations(text, seconds):
    assert parse(f"since:{text}").terms[0].value == seconds


@pytest.mark.parametrize(
    ("text", "named", "says"),
    [
        ("stauts:paused", "'stauts:paused'", "unknown qualifier 'stauts'"),
        ("status:sleeping", "'status:sleeping'", "status must be one of running, paused, finished, cancelled"),
        ("since:2x", "'since:2x'", "since takes a duration such as 30m, 2h, 2d or 1w"),
        ("since:0d", "'since:0d'", "a whole number above 0"),
        ("output.charge.paid:>lots", "'output.charge.paid:>lots'", "> compares with a number"),
        ("output.charge:1", "'output.charge:1'", "output.<step>.<key>[.<key>…]:<value>"),
        ("input:42", "'input:42'", "input needs a path"),
        ("input..a:1", "'input..a:1'", "input needs a path"),
        ("attr.:1", "'attr.:1'", "attr needs an attribute's name (1-64 characters of A-Z a-z 0-9 _ . -)"),
        ("attr.a/b:1", "'attr.a/b:1'", "written attr.<name>:<value>"),
        ("parent:abc", "'parent:abc'", "parent needs a run id"),
        ("step:", "'step:'", "step: needs a value"),
        ('error:"open', "'error:\"open'", 'the quote " is never closed'),
        (":x", "':x'", "unknown qualifier nothing"),
    ],
)
def test_a_bad_query_names_the_token_and_what_is_accepted(text, named, says):
    with pytest.raises(SearchError) as caught:
        parse(f"status:paused {text}")
    message = str(caught.value)
    assert message.startswith(named), message
    assert says in message
    assert caught.value.token == text


def test_an_unknown_qualifier_lists_every_qualifier_and_how_to_quote():
    with pytest.raises(SearchError) as caught:
        parse("foo:bar")
    message = str(caught.value)
    assert ACCEPTED in message
    for shape in ("attr.<name>:<value>", "input.<key>", "output.<step>.<key>", "error:<text>", "since:<30m|2h|2d|1w>"):
        assert shape in message
    assert '"foo:bar"' in message  # how to search for it as text


def test_text_postgresql_cannot_hold_and_overlong_queries_are_refused():
    with pytest.raises(SearchError, match="NUL"):
        parse("key:a\x00b")
    with pytest.raises(SearchError, match="at most 1000"):
        parse("x" * 1001)


def test_has_qualifier_tells_the_language_from_a_plain_search():
    assert has_qualifier("status:paused")
    assert has_qualifier("order-7 input.customer.id:42")
    assert has_qualifier('error:"open')  # parse() will say what is wrong
    assert not has_qualifier("order-7")
    assert not has_qualifier("schedule:3:2025-01-01T00:00:00+00:00")  # a key with colons
    assert not has_qualifier("#12")


def test_the_query_is_a_plain_value():
    query = parse("status:paused order-7")
    assert query == Query(text="status:paused order-7", terms=query.terms, words=("order-7",))
    assert query.to_dict() == {
        "text": "status:paused order-7",
        "terms": [{"qualifier": "status", "path": [], "op": "=", "values": ["paused"], "token": "status:paused"}],
        "words": ["order-7"],
    }
    assert parse("   ").empty


def test_failed_reads_two_iso_times_in_utc():
    (term,) = parse("failed:2026-01-02T10:00:00Z..2026-01-02T12:00:00+01:00").terms
    assert (term.qualifier, term.op, term.values) == (
        "failed",
        "between",
        ("2026-01-02T10:00:00+00:00", "2026-01-02T11:00:00+00:00"),
    )
    (naive,) = parse("failed:2026-01-02..2026-01-03").terms  # no zone: UTC
    assert naive.values == ("2026-01-02T00:00:00+00:00", "2026-01-03T00:00:00+00:00")
    assert "failed:<from>..<until>" in ACCEPTED


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("failed:2026-01-02", "failed takes two ISO 8601 times"),
        ("failed:2026-01-02..", "failed takes two ISO 8601 times"),
        ("failed:yesterday..today", "'yesterday' is not an ISO 8601 time"),
        ("failed:2026-01-03..2026-01-02", "is not before"),
    ],
)
def test_a_bad_failed_span_says_what_is_accepted(text, says):
    with pytest.raises(SearchError) as caught:
        parse(text)
    assert says in str(caught.value) and caught.value.token == text


def test_a_comparison_without_since_reads_a_window_and_says_so():
    bounded = parse("input.amount:>100 status:paused")
    assert bounded.window == 7 * 86400
    (note,) = bounded.notes
    assert "input.amount:>100" in note and "since:7d" in note
    assert parse("input.amount:>100 since:30d").window is None
    assert parse("input.amount:100").window is None and parse("input.amount:100").notes == ()
    assert parse("attr.amount:<=5").window == 7 * 86400
