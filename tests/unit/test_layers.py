"""The layers of docs/architecture.md, read from every module's top-level imports.

A module may import its own layer and the layers below it. An import the other way (upward) is
allowed only inside a function, with a comment saying why; an import under ``TYPE_CHECKING`` is
for annotations and never runs. The dashboard acts through pgflow's public API: it never imports
the store.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Bottom first. A module belongs to the layer of its longest matching prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("pgflow.core", "pgflow.exceptions")),
    (
        "foundations",
        (
            "pgflow.models",
            "pgflow.conf",
            "pgflow.registry",
            "pgflow.evaluation",
            "pgflow.migrations",
            "pgflow.observability",
            "pgflow.observability.metrics",
            "pgflow.observability.tracing",
        ),
    ),
    # The workflow class is the definition the store reads; only its start() calls the store,
    # through a function-level import marked as the facade.
    ("definitions", ("pgflow.workflow",)),
    ("store", ("pgflow.store",)),
    (
        "features",
        (
            "pgflow.signals",
            "pgflow.fanout",
            "pgflow.failures",
            "pgflow.rollup",
            "pgflow.schedules",
            "pgflow.queues",
            "pgflow.observability.alerts",
        ),
    ),
    (
        "runtime",
        (
            "pgflow",
            "pgflow.runtime",
            "pgflow.testing",
            "pgflow.management",
            "pgflow.checks",
            "pgflow.apps",
            "pgflow.observability.views",
            "pgflow.observability.urls",
        ),
    ),
    ("dashboard", ("pgflow_dashboard",)),
]
RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}
# What the dashboard may not import even though it sits above it: it acts through the public API.
DASHBOARD_FORBIDDEN = ("pgflow.store",)


def layer_of(module: str) -> str | None:
    best: tuple[int, str] | None = None
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), name)
    return best[1] if best else None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def top_level_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import that runs when the module is imported."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.extend((node.lineno, alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = package.split(".")
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    candidate = f"{base}.{alias.name}"
                    found.append((node.lineno, candidate if _is_package_module(candidate) else base))
            elif isinstance(node, ast.If) and not _is_type_checking(node):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(ast.parse(path.read_text(), filename=str(path)).body)
    return found


def modules() -> list[Path]:
    return sorted(p for package in ("pgflow", "pgflow_dashboard") for p in (ROOT / package).rglob("*.py"))


def upward_imports(path: Path) -> list[str]:
    module = module_name(path)
    own = layer_of(module)
    assert own is not None, f"{module} is in no layer of tests/unit/test_layers.py: give it one"
    problems = []
    for line, target in top_level_imports(path):
        layer = layer_of(target)
        if layer is None:
            continue  # the standard library, Django, django-q2 …
        where = f"{path.relative_to(ROOT)}:{line}"
        if RANK[layer] > RANK[own]:
            problems.append(f"{where}: {module} ({own}) imports {target} ({layer}), a higher layer")
        if own == "dashboard" and target.startswith(DASHBOARD_FORBIDDEN):
            problems.append(f"{where}: the dashboard imports {target}; it acts through pgflow's public API")
    return problems


def test_every_module_imports_only_its_own_layer_and_those_below():
    problems = [problem for path in modules() for problem in upward_imports(path)]
    assert not problems, "upward imports (import inside a function, saying why, or move the code):\n" + "\n".join(
        problems
    )


def test_core_imports_no_django():
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in (ROOT / "pgflow" / "core").rglob("*.py")
        for line, target in top_level_imports(path)
        if target.split(".")[0] == "django"
    ]
    assert not offenders, offenders


def test_an_upward_import_added_on_purpose_is_caught(tmp_path, monkeypatch):
    # A store module that imports the runtime at its top: the rule must name it.
    rogue = ROOT / "pgflow" / "store" / "zz_layer_probe.py"
    rogue.write_text("from ..runtime import worker\n")
    try:
        problems = upward_imports(rogue)
    finally:
        rogue.unlink()
    assert problems == [
        "pgflow/store/zz_layer_probe.py:1: pgflow.store.zz_layer_probe (store) imports pgflow.runtime.worker "
        "(runtime), a higher layer"
    ]


def test_the_workflow_package_sits_below_the_store():
    # The store reads Workflow's members, so no module of pgflow/workflow/ may import the store,
    # a feature or the runtime when it is imported; Workflow.start() reaches the store lazily.
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {target} ({layer_of(target)})"
        for path in sorted((ROOT / "pgflow" / "workflow").rglob("*.py"))
        for line, target in top_level_imports(path)
        if RANK.get(layer_of(target) or "core", 0) > RANK["definitions"]
    ]
    assert not offenders, offenders


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("pgflow.core.states", "core"),
        ("pgflow.models", "foundations"),
        ("pgflow.workflow.base", "definitions"),
        ("pgflow.store.claims", "store"),
        ("pgflow.fanout", "features"),
        ("pgflow.runtime.worker", "runtime"),
        ("pgflow", "runtime"),
        ("pgflow_dashboard.mcp.server", "dashboard"),
    ],
)
def test_layer_of(module, layer):
    assert layer_of(module) == layer
