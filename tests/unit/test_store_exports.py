"""``pgflow.store.__all__`` is exactly the names used outside the store: read from the
sources of pgflow, pgflow_dashboard, tests, benchmarks and example_project with ``ast``
(``from pgflow.store import X``, relative forms included, and ``store.X`` /
``pgflow.store.X`` where ``store`` is the package). A name used only inside the store is
not advertised; a test reaching a store internal names its module (``pgflow.store.transitions``)."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pgflow.store

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pgflow", "pgflow_dashboard", "tests", "benchmarks", "example_project")
STORE = ROOT / "pgflow" / "store"
SUBMODULES = {module.name for module in pkgutil.iter_modules([str(STORE)])}


def _package_of(relative: Path) -> list[str]:
    """The package a module's relative imports start from (a package's own for its __init__)."""
    return list(relative.parent.parts)


def _absolute(node: ast.ImportFrom, relative: Path) -> str:
    if not node.level:
        return node.module or ""
    package = _package_of(relative)
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def names_used(tree: ast.AST, relative: Path) -> set[str]:
    """The names of ``pgflow.store`` a module uses (submodules and dunders left out)."""
    used: set[str] = set()
    aliases: set[str] = set()  # local names bound to the package itself
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = _absolute(node, relative)
            if module == "pgflow.store":
                used.update(alias.name for alias in node.names)
            elif module == "pgflow":
                aliases.update(alias.asname or alias.name for alias in node.names if alias.name == "store")
        elif isinstance(node, ast.Import):
            aliases.update(alias.asname for alias in node.names if alias.name == "pgflow.store" and alias.asname)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in aliases:
            used.add(node.attr)
        elif (
            isinstance(value, ast.Attribute)
            and value.attr == "store"
            and isinstance(value.value, ast.Name)
            and value.value.id == "pgflow"
        ):
            used.add(node.attr)
    return {name for name in used if name not in SUBMODULES and not name.startswith("__")}


def used_outside_the_store() -> dict[str, set[str]]:
    """Each name of pgflow.store used outside it, with the files that use it."""
    found: dict[str, set[str]] = {}
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            if STORE in path.parents:
                continue
            relative = path.relative_to(ROOT)
            for name in names_used(ast.parse(path.read_text(), str(path)), relative):
                found.setdefault(name, set()).add(str(relative))
    return found


def test_store_all_is_exactly_what_is_used_outside_the_store():
    used = used_outside_the_store()
    exported = set(pgflow.store.__all__)
    assert len(exported) == len(pgflow.store.__all__), "a name listed twice in pgflow.store.__all__"
    unused = sorted(exported - used.keys())
    assert not unused, f"pgflow.store.__all__ advertises {unused}, used nowhere outside the store: drop them"
    missing = {name: sorted(files) for name, files in used.items() if name not in exported}
    assert not missing, (
        f"used outside the store but not in pgflow.store.__all__: {missing}; export them, or (for a test) "
        "import them from their module (pgflow.store.<module>)"
    )


def test_every_exported_name_is_there():
    missing = [name for name in pgflow.store.__all__ if not hasattr(pgflow.store, name)]
    assert not missing


def test_the_reader_finds_each_form_of_use():
    source = (
        "from pgflow.store import claim, rows\n"
        "from .. import store\n"
        "import pgflow.store as s\n"
        "import pgflow\n"
        "store.finish(); s.heartbeat(); pgflow.store.now(); store.__all__; store.claims.claim_step\n"
    )
    names = names_used(ast.parse(source), Path("pgflow/runtime/x.py"))
    assert names == {"claim", "finish", "heartbeat", "now"}
    assert names_used(ast.parse("from ..store import park\n"), Path("pgflow/runtime/x.py")) == {"park"}
    assert names_used(ast.parse("from .store import park\n"), Path("pgflow/__init__.py")) == {"park"}
