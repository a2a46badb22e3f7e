"""docs/architecture.md names only modules that exist: every ``pgflow/…`` or
``pgflow_dashboard/…`` path, every dotted ``pgflow.x.y`` name, and the short forms the page
uses inside the engine (``store/claims.py``, ``store.rows.loaded``, ``core.states.CONTROLS``).
A dotted name resolves to its longest module prefix; a name left after it must be defined or
imported in that module's source. Pure: reads files, imports nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("pgflow", "pgflow_dashboard")
# The engine's subpackages, which the page also names without the leading "pgflow".
SHORT = ("core", "store", "runtime", "workflow", "models", "fanout", "observability")

_START = r"(?<![\w/.\-])(?:" + "|".join((*PACKAGES, *SHORT)) + ")"  # not inside a longer word or path
PATH = re.compile(rf"({_START}/[\w/]*(?:\.py)?)((?:\.[A-Za-z_]\w*)*)")
DOTTED = re.compile(rf"({_START}(?:\.[A-Za-z_]\w*)+)")
CHECK_ID = re.compile(r"[EW]\d{3}")  # pgflow.E001: a system check's id, not a name
# Dotted strings the page quotes that are values, not names in the code.
VALUES = {"pgflow.LeaseExpired"}  # the error_class a lost lease records (store.leases); no class


def _file(parts: list[str]) -> Path | None:
    """The source file of the module ``parts`` (a package's ``__init__.py``), or None."""
    if parts[0] in SHORT:
        parts = ["pgflow", *parts]
    base = ROOT.joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def _defines(source: Path, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", source.read_text()) is not None


def problems(text: str) -> list[str]:
    """What in ``text`` names a path or module that does not exist."""
    found: list[str] = []
    for match in PATH.finditer(text):
        path, attributes = match.group(1), match.group(2)
        parts = [part for part in path.removesuffix(".py").split("/") if part]
        target = ROOT.joinpath(*(["pgflow"] if parts[0] in SHORT else []), path)
        if not (target.is_file() if path.endswith(".py") else target.exists() or _file(parts)):
            found.append(f"{path}: no such file or folder")
            continue
        source = target if target.is_file() else _file(parts)
        for name in [a for a in attributes.split(".") if a][:1]:
            if source is None or not _defines(source, name):
                found.append(f"{path}{attributes}: {name!r} is not in {path}")
    for match in DOTTED.finditer(text):
        dotted = match.group(1)
        if dotted in VALUES:
            continue
        parts = dotted.split(".")
        if text[match.end() : match.end() + 1] == "/" or text[match.start() - 1 : match.start()] == "/":
            continue  # part of a path, checked above
        prefix = max((n for n in range(1, len(parts) + 1) if _file(parts[:n])), default=0)
        if prefix == 0:
            found.append(f"{dotted}: no such module")
            continue
        rest = parts[prefix:]
        if rest and not CHECK_ID.fullmatch(rest[0]) and not _defines(_file(parts[:prefix]), rest[0]):  # type: ignore[arg-type]
            found.append(f"{dotted}: {rest[0]!r} is not in {'.'.join(parts[:prefix])}")
    return found


def test_every_path_and_module_named_in_the_architecture_page_exists():
    assert problems(PAGE.read_text()) == []


def test_a_wrong_path_or_module_is_found():
    assert problems("see `pgflow/store/claimz.py` and `pgflow.core.phasez`") == [
        "pgflow/store/claimz.py: no such file or folder",
        "pgflow.core.phasez: 'phasez' is not in pgflow.core",
    ]
    assert problems("`store/rows.py`, `store.rows.loaded`, `pgflow_dashboard/admin/`, `pgflow.E001`") == []
    assert problems("`pgflow_dashboard/admin.py`") == ["pgflow_dashboard/admin.py: no such file or folder"]
    assert problems("`pgflow_dashboard/mcp/actions.CONTROLZ`") == [
        "pgflow_dashboard/mcp/actions.CONTROLZ: 'CONTROLZ' is not in pgflow_dashboard/mcp/actions"
    ]
