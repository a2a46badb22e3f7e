"""Every error message docs/reference.md quotes is one the code can produce.

The quotes are the backtick spans that read like a message (``… must …``, ``… got …``,
``… cannot …``, ``… only applies …``, ``… names no …``); the code's messages are the string
templates of pgflow's calls (exceptions raised, problems listed), module constants such as
QUEUE_RULE spelled out and every other f-string field matching any text. A quote must be
a whole message, or its end after a field (the doc drops "step 'x': "); a quote shortened
with "…" must have all its literal text in one message. A message assembled from two
templates ("run 7: " + the control's message) is only checked loosely.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reference.md"
MESSAGE_WORDS = re.compile(r"\b(must|got|cannot|only applies|only apply|not both|does not import|names no)\b")


FIELD = "\x00"  # stands for an f-string field while the template is built


def _template(node: ast.expr, constants: dict[str, str | int]) -> str | None:
    """A message expression as text, every field it formats replaced by FIELD."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.sub(r"%[sdr]", FIELD, node.value)  # a logging call's fields
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif (
                isinstance(value, ast.FormattedValue)
                and isinstance(value.value, ast.Name)
                and value.value.id in constants
                and value.conversion == -1
            ):
                parts.append(str(constants[value.value.id]))
            else:
                parts.append(FIELD)
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left, constants), _template(node.right, constants)
        return None if left is None or right is None else left + right
    return None


def _sources() -> list[ast.Module]:
    return [ast.parse(path.read_text(), str(path)) for path in sorted((ROOT / "pgflow").rglob("*.py"))]


def code_templates() -> list[str]:
    """The messages pgflow builds: the string arguments of its calls (exceptions, problems)."""
    trees = _sources()
    constants = {  # module-level string constants, such as QUEUE_RULE, spelled out
        target.id: node.value.value
        for tree in trees
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str | int)
        and not isinstance(node.value.value, bool)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    templates = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call | ast.Return):
                for candidate in ast.walk(node):
                    text = _template(candidate, constants) if isinstance(candidate, ast.expr) else None
                    if text and len(text.replace(FIELD, "").strip(" :")) > 2:
                        templates.add(text)
    return sorted(templates)


def quoted_messages() -> list[str]:
    text = DOC.read_text()
    quotes = re.findall(r"`([^`\n]{12,})`", text.replace("\n  ", " "))
    messages = []
    for quote in quotes:
        # a quote may name the exception first: "TypeError: …"
        message = re.sub(r"^(pgflow\.)?[A-Z]\w*(Error|Exception|Found|Failed|Transition|Large): ", "", quote)
        if (
            MESSAGE_WORDS.search(message)
            and re.match(r"[\w'\"]", message)
            and not message.endswith(" ")
            and not message.startswith(("PGFLOW = ", "python ", "@"))
        ):
            messages.append(message)
    return messages


TEMPLATES = code_templates()


def _regex(template: str) -> re.Pattern[str]:
    """The messages ``template`` produces, as a regex. The doc may leave out what a message
    starts with, up to a field ("step 'x': …", "run 7: …")."""
    pieces = [re.escape(piece) for piece in template.split(FIELD)]
    tails = [pieces] + [["(?:.*?)" + pieces[k], *pieces[k + 1 :]] for k in range(1, len(pieces))]
    return re.compile("|".join(f"(?:{'.*?'.join(tail)})" for tail in tails), re.DOTALL)


def _in(chunk: str, template: str) -> bool:
    """``chunk`` is the template's text, but for words in front that a field gave ("input")."""
    if chunk in template:
        return True
    words = chunk.split(" ")
    return any(
        " ".join(words[k:]) in template for k in range(min(3, len(words) - 1) + 1) if len(" ".join(words[k:])) >= 12
    )


def produced(message: str) -> bool:
    if "…" in message:
        # Shortened: its literal text, around the values it shows, must all be one message's.
        chunks = [chunk.strip() for chunk in re.split(r"…|'[^']*'|\"[^\"]*\"|\d+", message)]
        chunks = [chunk for chunk in chunks if len(chunk) >= 5]
        return bool(chunks) and any(all(_in(chunk, template) for chunk in chunks) for template in TEMPLATES)
    return any(_regex(template).fullmatch(message) for template in TEMPLATES)


@pytest.mark.parametrize("message", quoted_messages())
def test_a_quoted_message_is_one_the_code_produces(message: str) -> None:
    assert produced(message), f"docs/reference.md quotes {message!r}, which no message of pgflow produces"


def test_the_doc_quotes_messages() -> None:
    assert len(quoted_messages()) > 40
