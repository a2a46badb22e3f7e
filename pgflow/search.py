"""The run search language, one for the run list's search box and ``manage.py pgflow``: a
query string in, a plain :class:`Query` out. Pure: no Django, no database, no clock;
:mod:`pgflow.searching` turns a :class:`Query` into a ``WorkflowRun`` queryset.

A query is words and qualifiers separated by spaces, every one of which must match (AND)::

    status:paused class:Checkout since:2d
    input.customer.id:42 output.charge.paid:>100 error:Timeout
    key:order-7 step:charge parent:12 attr.plan:gold "order 7"

- ``attr.<name>:<value>`` (a run's attributes: flat, so a name may hold dots),
  ``input.<key>[.<key>…]:<value>``, ``output.<step>.<key>[.<key>…]:<value>``:
  a JSON value equals ``value``, or with ``>``, ``>=``, ``<``, ``<=`` before a number, compares
  with it. An unquoted value reads as JSON where it can (``42``, ``4.5``, ``true``, ``null``)
  and then matches that value or the same text as a string; a quoted one is a string only.
  A comparison reads the runs of the last 7 days unless the query has a ``since:`` (no
  index orders JSON values: the window bounds what it reads; :attr:`Query.window` is it,
  :attr:`Query.notes` says so).
- ``error:<text>``: an attempt failed with an error whose class or message holds the text.
- ``failed:<from>..<until>``: an attempt failed (ended with an error) at or after ``from`` and
  before ``until``, ISO 8601 times (UTC unless they name a zone): an insights failures bar.
- ``step:<name>``: the run's current step (a finished run has none). ``status:<status>``.
  ``class:<name or dotted path>``.
- ``key:<key>``: the idempotency key, exactly; a trailing ``*`` matches keys starting so.
- ``since:<duration>``: started in the last ``30s``, ``30m``, ``2h``, ``2d`` or ``1w``.
- ``parent:<run id>``: the children of a run.
- a bare word: a run id, an idempotency key (or part of one) or a subject id, as the run
  list's plain search; quote text with a space or a colon in it: ``"schedule:3:2025"``.

A value with spaces is quoted: ``error:"card declined"`` (a backslash escapes a quote in it).
A query that cannot be read raises :class:`SearchError`, naming the token and what is accepted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .core import attributes as attribute_rules
from .core.states import RunStatus

JSONScalar = str | int | float | bool | None

# Qualifiers whose value is plain text (or a status, a duration, an id), in the order the help lists them.
PLAIN = ("error", "failed", "step", "status", "key", "class", "since", "parent")
# Qualifiers followed by a JSON path: "input.customer.id".
PATHED = ("attr", "input", "output")
QUALIFIERS = (*PATHED, *PLAIN)
OPERATORS = (">=", "<=", ">", "<")  # longest first: ">=" before ">"
STATUSES = tuple(status.value for status in RunStatus)
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_QUERY = 1000  # characters
MAX_RUN_ID = 18  # digits: a bigint
# A comparison (>100) reads every run it may match, with no index to narrow them: without a
# since:, it reads this window's (on pgflow_run_created).
COMPARISON_WINDOW = "7d"

ACCEPTED = (
    "accepted: words and qualifiers separated by spaces, all of which must match: "
    "attr.<name>:<value>, input.<key>[.<key>…]:<value>, output.<step>.<key>[.<key>…]:<value> "
    "(a value, or >N, >=N, <N, <=N; a comparison reads the last 7 days unless since: says), error:<text>, "
    "failed:<from>..<until> (ISO 8601 times), step:<name>, "
    f"status:<{'|'.join(STATUSES)}>, key:<key> (a trailing * for a prefix), class:<name>, "
    "since:<30m|2h|2d|1w>, parent:<run id>, and bare words (a run id, key or subject id); "
    'quote a value with spaces or colons: error:"card declined"'
)

_DURATION = re.compile(r"^(\d{1,9})([smhdw])$")
_NUMBER = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_SEGMENT = re.compile(r"^[^\s\"'.:*]+$")  # one key of a JSON path


class SearchError(ValueError):
    """A query that cannot be read: ``token`` is the part at fault; the message names it and
    what is accepted."""

    def __init__(self, message: str, *, token: str = "") -> None:
        super().__init__(message)
        self.token = token


@dataclass(frozen=True, kw_only=True)
class Term:
    """One qualifier: ``qualifier`` (one of :data:`QUALIFIERS`), ``path`` (attr: the name;
    input: the keys; output: the step, then the keys), ``op`` (``=``, or a comparison for
    the JSON qualifiers; ``since`` is always ``>=``, ``failed`` ``between``) and ``values``, any
    one of which matches (for ``since``: the seconds; for ``parent``: the run id; for
    ``failed``: the two moments, ISO 8601 in UTC)."""

    qualifier: str
    token: str
    path: tuple[str, ...] = ()
    op: str = "="
    values: tuple[JSONScalar, ...] = ()

    @property
    def value(self) -> JSONScalar:
        return self.values[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "qualifier": self.qualifier,
            "path": list(self.path),
            "op": self.op,
            "values": list(self.values),
            "token": self.token,
        }


@dataclass(frozen=True, kw_only=True)
class Query:
    """A parsed query: its qualifiers and its bare words, each of which must match."""

    text: str
    terms: tuple[Term, ...] = ()
    words: tuple[str, ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not self.terms and not self.words

    @property
    def window(self) -> int | None:
        """The seconds of the ``since:`` window a search of this query adds (a comparison
        with no ``since:``: :data:`COMPARISON_WINDOW`), or None."""
        if any(term.qualifier == "since" for term in self.terms):
            return None
        if not any(term.op != "=" and term.qualifier in PATHED for term in self.terms):
            return None
        return duration_seconds(COMPARISON_WINDOW)

    @property
    def notes(self) -> tuple[str, ...]:
        """What a search of this query does that its text does not say, for the reader."""
        if self.window is None:
            return ()
        compared = next(term.token for term in self.terms if term.op != "=" and term.qualifier in PATHED)
        return (
            f"{compared} compares within the runs started in the last {COMPARISON_WINDOW} "
            f"(since:{COMPARISON_WINDOW}); add since: (such as since:30d) to read further back",
        )

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "terms": [term.to_dict() for term in self.terms], "words": list(self.words)}


def parse(text: str) -> Query:
    """``text`` as a :class:`Query`; :class:`SearchError` when it cannot be read."""
    if not isinstance(text, str):
        raise SearchError(f"a search must be text, got {type(text).__name__}; {ACCEPTED}")
    if len(text) > MAX_QUERY:
        raise SearchError(f"the search has {len(text)} characters; at most {MAX_QUERY} are read")
    if "\x00" in text or re.search("[\ud800-\udfff]", text):
        raise SearchError("the search holds a NUL character or a lone surrogate, which no run holds")
    terms: list[Term] = []
    words: list[str] = []
    for token in tokens(text):
        if token.qualifier is None:
            words.append(token.value)
        else:
            terms.append(_term(token))
    return Query(text=text.strip(), terms=tuple(terms), words=tuple(words))


def has_qualifier(text: str) -> bool:
    """Whether ``text`` names a qualifier of the language (``status:``, ``input.x:`` …): the
    run list reads such a search with the language, and any other as its plain search."""
    try:
        found = tokens(text)
    except SearchError:
        return True  # an unterminated quote after a qualifier: let parse() say so
    return any(token.qualifier is not None and _known(token.qualifier) for token in found)


# --- tokens -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Token:
    """One space-separated piece of a query: ``qualifier`` is what comes before its first
    unquoted colon (``None`` for a bare word), ``value`` what follows, unquoted."""

    text: str
    qualifier: str | None
    value: str
    quoted: bool  # some of the value was in quotes: it is text, never a number or an operator


def tokens(text: str) -> list[Token]:
    """The pieces of ``text``, split on unquoted spaces; quotes (``"`` or ``'``) group, a
    backslash inside them escapes the next character."""
    found: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        start = i
        before: str | None = None  # the qualifier, once an unquoted colon is met
        value: list[str] = []
        quoted = False
        while i < n and not text[i].isspace():
            char = text[i]
            if char in "\"'":
                close = i + 1
                piece: list[str] = []
                while close < n and text[close] != char:
                    if text[close] == "\\" and close + 1 < n:
                        close += 1
                    piece.append(text[close])
                    close += 1
                if close >= n:
                    raise SearchError(
                        f"{text[start:]!r}: the quote {char} is never closed; {ACCEPTED}", token=text[start:]
                    )
                value.extend(piece)
                quoted = True
                i = close + 1
            elif char == ":" and before is None and not quoted:
                before = "".join(value)
                value = []
                i += 1
            else:
                value.append(char)
                i += 1
        written = text[start:i]
        if before is None:
            found.append(Token(text=written, qualifier=None, value="".join(value), quoted=quoted))
        else:
            found.append(Token(text=written, qualifier=before, value="".join(value), quoted=quoted))
    return found


def _known(qualifier: str) -> bool:
    return qualifier in PLAIN or qualifier.split(".", 1)[0] in PATHED


# --- qualifiers -------------------------------------------------------------------------------


def _term(token: Token) -> Term:
    name = token.qualifier or ""
    head, dot, rest = name.partition(".")
    if head in PATHED:
        return _pathed(token, head, rest if dot else None)
    if name not in PLAIN:
        shown = f"{name!r}" if name else "nothing"
        raise SearchError(
            f"{token.text!r}: unknown qualifier {shown} before the colon (quote the word to search for "
            f'it as text: "{token.text}"); {ACCEPTED}',
            token=token.text,
        )
    value = token.value.strip()
    if not value:
        raise SearchError(f"{token.text!r}: {name}: needs a value after the colon; {ACCEPTED}", token=token.text)
    if name == "status":
        if value not in STATUSES:
            raise SearchError(
                f"{token.text!r}: status must be one of {', '.join(STATUSES)}, got {value!r}", token=token.text
            )
        return Term(qualifier=name, token=token.text, values=(value,))
    if name == "since":
        return Term(qualifier=name, token=token.text, op=">=", values=(duration_seconds(value, token.text),))
    if name == "failed":
        return Term(qualifier=name, token=token.text, op="between", values=failed_between(value, token.text))
    if name == "parent":
        number = value.removeprefix("#")
        if not number.isdigit() or len(number) > MAX_RUN_ID:
            raise SearchError(
                f"{token.text!r}: parent needs a run id (a whole number), got {value!r}", token=token.text
            )
        return Term(qualifier=name, token=token.text, values=(int(number),))
    return Term(qualifier=name, token=token.text, values=(value,))


def _pathed(token: Token, head: str, rest: str | None) -> Term:
    shape = {
        "attr": "attr.<name>:<value>",
        "input": "input.<key>[.<key>…]:<value>",
        "output": "output.<step>.<key>[.<key>…]:<value>",
    }[head]
    if head == "attr":
        # Attributes are flat, and a name may hold dots: attr.order.id is the name "order.id".
        if not rest or not attribute_rules.KEY_PATTERN.fullmatch(rest):
            raise SearchError(
                f"{token.text!r}: attr needs an attribute's name ({attribute_rules.ACCEPTED_KEYS}), written {shape}",
                token=token.text,
            )
        path: tuple[str, ...] = (rest,)
    else:
        path = tuple(rest.split(".")) if rest else ()
        least = 2 if head == "output" else 1
        if len(path) < least or any(not _SEGMENT.match(part) for part in path):
            raise SearchError(
                f"{token.text!r}: {head} needs a path of names separated by dots, written {shape}", token=token.text
            )
    op, values = json_values(token, shape)
    return Term(qualifier=head, token=token.text, path=path, op=op, values=values)


def json_values(token: Token, shape: str) -> tuple[str, tuple[JSONScalar, ...]]:
    """The operator and the values a JSON qualifier's value matches."""
    value = token.value
    if token.quoted:
        return "=", (value,)
    op = next((candidate for candidate in OPERATORS if value.startswith(candidate)), "=")
    if op != "=":
        number = _number(value[len(op) :].strip())
        if number is None:
            raise SearchError(
                f"{token.text!r}: {op} compares with a number (such as {shape.split(':')[0]}:{op}100), "
                f"got {value[len(op) :]!r}",
                token=token.text,
            )
        return op, (number,)
    if not value:
        raise SearchError(f"{token.text!r}: needs a value after the colon, written {shape}", token=token.text)
    literal = _literal(value)
    # An unquoted 42 is the number or the text "42": inputs come from forms as often as from code.
    return "=", (value,) if literal is _TEXT else (literal, value)


_TEXT = object()
_LITERALS: dict[str, JSONScalar] = {"true": True, "false": False, "null": None}


def _literal(value: str) -> Any:
    if value in _LITERALS:
        return _LITERALS[value]
    number = _number(value)
    return _TEXT if number is None else number


def _number(value: str) -> int | float | None:
    if not _NUMBER.match(value):
        return None
    if re.match(r"^-?\d+$", value):
        return int(value)
    number = float(value)
    return number if math.isfinite(number) else None


def failed_between(value: str, token: str = "") -> tuple[str, str]:
    """``"2026-01-02T10:00:00Z..2026-01-02T11:00:00Z"`` -> the two moments in UTC, ISO 8601."""
    shown = token or value
    start, dots, end = value.partition("..")
    accepted = "failed takes two ISO 8601 times, the earlier first: failed:2026-01-02T10:00Z..2026-01-02T11:00Z"
    if not dots or not start or not end:
        raise SearchError(f"{shown!r}: {accepted}, got {value!r}", token=shown)
    moments = []
    for part in (start, end):
        try:
            moment = datetime.fromisoformat(part)
        except ValueError:
            raise SearchError(f"{shown!r}: {part!r} is not an ISO 8601 time; {accepted}", token=shown) from None
        moments.append((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC))
    if moments[0] >= moments[1]:
        raise SearchError(f"{shown!r}: {start!r} is not before {end!r}; {accepted}", token=shown)
    return moments[0].isoformat(), moments[1].isoformat()


def duration_seconds(value: str, token: str = "") -> int:
    """``"30m"`` -> 1800: a whole number and one of the units s, m, h, d, w."""
    match = _DURATION.match(value.strip())
    if match is None or int(match[1]) == 0:
        shown = token or value
        raise SearchError(
            f"{shown!r}: since takes a duration such as 30m, 2h, 2d or 1w (a whole number above 0 and one "
            f"of the units s, m, h, d, w), got {value!r}",
            token=shown,
        )
    return int(match[1]) * DURATION_UNITS[match[2]]
