"""The layers of docs/architecture.md, read from every module's imports.

A module may import its own layer and the layers below it; an import under ``TYPE_CHECKING``
is for annotations and never runs. The dashboard acts through pgflow's public API: it never
imports the store, not even inside a function.

An import inside a function (or a method, or a nested function) carries a label, in a comment on
its line or in the comment lines just above it (a run of imports may share one):

- ``# facade: <why>``: a higher-layer import, allowed only from a function named in ``FACADES``,
  the list docs/architecture.md "The layers" draws (the test compares the two);
- ``# cycle: a -> b -> here``: an import of the module ``a``, which imports ``b`` … which imports
  this module at its top; the test checks every link is a real top-level import;
- ``# lazy: <why>``: any other, e.g. an optional extra, the app registry, an import's cost.

Every function-level import is labelled, third-party ones too (the project's rule: every lazy
import says why), and those may only say ``lazy``: an optional extra (django_q, mcp,
opentelemetry, prometheus_client) says so; one with no reason to wait moves to the top.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Bottom first. A module belongs to the layer of its longest matching prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # pgflow.search is pure (a query string in, a plain Query out): alert rules check theirs with it.
    ("core", ("pgflow.core", "pgflow.exceptions", "pgflow.approvals", "pgflow.search")),
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
            "pgflow.readdb",
            "pgflow.backlog",  # the scheduled attempts by queue and due time: the gauges, alerts, dashboard
            "pgflow.db",
            "pgflow.tenants",  # a run's tenant, its context, who sees it: settings in, plain values out
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
            "pgflow.deciding",
            "pgflow.fanout",
            "pgflow.failures",
            "pgflow.rollup",
            "pgflow.schedules",
            "pgflow.queues",
            "pgflow.observability.alerts",
            "pgflow.tasks",
            "pgflow.records",
            "pgflow.searching",  # a Query as a queryset: the run list, the CLI, the MCP, alert rules
            "pgflow.archive",  # the runs retention purges, written before (the sweep hands it in)
            "pgflow.approval_mail",  # the approvers mailed when an approval opens (after the commit)
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
# The only upward imports: "module.function → imported module", each marked ``# facade:``.
# docs/architecture.md "The layers" lists the same (the test compares them).
FACADES = (
    # The run controls on the model: the store imports the models, so they call it lazily.
    "pgflow.models.runs.WorkflowRun.pause → pgflow.store",
    "pgflow.models.runs.WorkflowRun.resume → pgflow.store",
    "pgflow.models.runs.WorkflowRun.cancel → pgflow.store",
    "pgflow.models.runs.WorkflowRun.skip_step → pgflow.store",
    "pgflow.models.runs.WorkflowRun.rerun_from → pgflow.store",
    "pgflow.models.runs.WorkflowRun.rerun_plan → pgflow.store",
    # The user's door to start_run: the store reads the class, so it sits above it.
    "pgflow.workflow.base.Workflow.start → pgflow.store",
    # What resolve() imported must be a Workflow; the workflow package registers itself here.
    "pgflow.registry.resolve → pgflow.workflow",
    # A declared schedule's input is checked against MAX_INPUT_BYTES where Django is configured.
    "pgflow.core.ticks._input_limit → pgflow.conf",
    # `manage.py pgflow show` prints the run page's "why" sentence where the dashboard is installed.
    "pgflow.cli.show.why_sentence → pgflow_dashboard.runfacts",
    "pgflow.cli.show.why_sentence → pgflow_dashboard.why",
)


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


def imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The modules an import statement names (``from a import b`` is ``a.b`` when b is a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base_parts = package.split(".")
        base_parts = base_parts[: len(base_parts) - (node.level - 1)]
        base = ".".join(base_parts + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    return [candidate if _is_package_module(candidate := f"{base}.{alias.name}") else base for alias in node.names]


def _package_of(path: Path) -> str:
    module = module_name(path)
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def top_level_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import that runs when the module is imported."""
    package = _package_of(path)
    found: list[tuple[int, str]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.extend((node.lineno, target) for target in imported(node, package))
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


def test_the_store_imports_no_feature_not_even_inside_a_function():
    # A feature the store must tell (an approval opened: its mail) registers a hook with the
    # store from AppConfig.ready; the store never reaches up for it.
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno} imports {target} ({layer_of(target)}) inside {function}"
        for path in sorted((ROOT / "pgflow" / "store").rglob("*.py"))
        for node, function in function_level_imports(ast.parse(path.read_text()))
        for target in imported(node, _package_of(path))
        if RANK.get(layer_of(target) or "core", 0) > RANK["store"]
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


LABEL = re.compile(r"#\s*(facade|cycle|lazy):\s*(\S.*)")


def _label(lines: list[str], node: ast.stmt, imports: set[int]) -> tuple[str, str] | None:
    """The label on the statement's lines, else in the comments (and imports) just above it."""
    own = range(node.lineno - 1, (node.end_lineno or node.lineno))
    above = []
    index = node.lineno - 2
    while index >= 0 and (lines[index].lstrip().startswith("#") or index + 1 in imports):
        above.append(index)
        index -= 1
    for index in [*own, *above]:
        if found := LABEL.search(lines[index]):
            return found.group(1), found.group(2).strip()
    return None


def _existing(name: str, package: str) -> str | None:
    """``name`` as a module: relative to ``package`` or one of its parents, else absolute."""
    parts = package.split(".")
    for cut in range(len(parts), -1, -1):
        candidate = ".".join([*parts[:cut], name])
        if _is_package_module(candidate):
            return candidate
    return None


def _imports_at_top(module: str, target: str) -> bool:
    base = ROOT.joinpath(*module.split("."))
    path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
    return any(t == target or t.startswith(target + ".") for _, t in top_level_imports(path))


def _cycle_problems(chain: str, target: str, module: str, package: str) -> list[str]:
    names = [name.strip() for name in chain.split("->")]
    if len(names) < 2 or names[-1].split(" ")[0] != "here":  # "here (why)" may explain
        return [f"the cycle {chain!r} must read `a -> b -> here`"]
    resolved = [_existing(name, package) for name in names[:-1]]
    missing = [name for name, found in zip(names, resolved, strict=False) if found is None]
    if missing:
        return [f"the cycle {chain!r} names {', '.join(missing)}, no module of pgflow or pgflow_dashboard"]
    chain_modules = [*(found for found in resolved if found), module]
    problems = []
    if not (target == chain_modules[0] or target.startswith(chain_modules[0] + ".")):
        problems.append(f"the cycle {chain!r} starts at {chain_modules[0]}, but the import is of {target}")
    for before, after in zip(chain_modules, chain_modules[1:], strict=False):
        if not _imports_at_top(before, after):
            problems.append(f"the cycle {chain!r}: {before} does not import {after} at its top")
    return problems


def function_level_imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import inside a function, method or nested function, with that function's dotted name."""
    found: list[tuple[ast.Import | ast.ImportFrom, str]] = []

    def visit(node: ast.AST, scope: list[str], in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                found.append((child, ".".join(scope)))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, [*scope, child.name], in_function or not isinstance(child, ast.ClassDef))
            else:
                visit(child, scope, in_function or isinstance(child, ast.Lambda))

    visit(tree, [], False)
    return found


def function_level_problems(source: str, module: str, *, package: str | None = None) -> list[str]:
    """Every problem with ``module``'s imports inside functions, each naming the file and line."""
    package = module.rpartition(".")[0] if package is None else package
    own = layer_of(module)
    assert own is not None, f"{module} is in no layer of tests/unit/test_layers.py: give it one"
    shown = module.replace(".", "/") + ("/__init__.py" if package == module else ".py")
    lines = source.splitlines()
    tree = ast.parse(source)
    problems: list[str] = []
    found = function_level_imports(tree)
    import_lines = {line for node, _ in found for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    for node, function in found:
        where = f"{shown}:{node.lineno}"
        label = _label(lines, node, import_lines)
        for target in dict.fromkeys(imported(node, package)):
            layer = layer_of(target)
            kind, why = label or (None, "")
            if own == "dashboard" and target.startswith(DASHBOARD_FORBIDDEN):
                problems.append(f"{where}: the dashboard imports {target}; it acts through pgflow's public API")
            if kind is None:
                problems.append(
                    f"{where}: {module} imports {target} inside {function} with no label: mark it "
                    "`# lazy: <why>`, `# cycle: a -> b -> here`, or move it to the top"
                )
            elif layer is None:
                if kind != "lazy":
                    problems.append(f"{where}: {target} is no pgflow module; its label can only be `# lazy:`")
            elif RANK[layer] > RANK[own]:
                entry = f"{module}.{function} → {target}"
                if kind != "facade":
                    problems.append(
                        f"{where}: {module} ({own}) imports {target} ({layer}), a higher layer, inside "
                        f"{function}: only a facade of FACADES may, marked `# facade:`"
                    )
                elif entry not in FACADES:
                    problems.append(f"{where}: `{entry}` is marked facade but is not in FACADES")
            elif kind == "facade":
                problems.append(f"{where}: {target} ({layer}) is no higher layer: say `# lazy:` or `# cycle:`")
            elif kind == "cycle":
                problems.extend(f"{where}: {problem}" for problem in _cycle_problems(why, target, module, package))
    return problems


def test_every_function_level_import_is_labelled_and_upward_only_from_a_facade():
    problems = [
        problem
        for path in modules()
        for problem in function_level_problems(path.read_text(), module_name(path), package=_package_of(path))
    ]
    assert not problems, "function-level imports (see tests/unit/test_layers.py's docstring):\n" + "\n".join(problems)


def test_every_facade_listed_is_still_in_the_code():
    # A facade removed from the code leaves the list (and the drawing).
    marked = set()
    for path in modules():
        module, package, source = module_name(path), _package_of(path), path.read_text()
        for node, function in function_level_imports(ast.parse(source)):
            label = _label(source.splitlines(), node, set())
            if label and label[0] == "facade":
                marked.update(f"{module}.{function} → {target}" for target in imported(node, package))
    assert set(FACADES) - marked == set()


def _drawn_facades() -> set[str]:
    """The facades docs/architecture.md "The layers" lists, ``a.{b,c} → d`` expanded."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    entries = set()
    for head, names, tail in re.findall(r"`([\w.]+?)\.?\{?([\w,]*)\}? → ([\w.]+)`", section):
        for name in names.split(",") if names else [""]:
            entries.add(f"{head}.{name} → {tail}" if name else f"{head} → {tail}")
    return entries


def test_the_drawing_lists_exactly_the_facades():
    assert _drawn_facades() == set(FACADES)


# The checker itself, on small sources (the modules named are real, nothing is written).


def test_an_unlabelled_function_level_import_is_named():
    source = "def f():\n    from . import locking\n"
    assert function_level_problems(source, "pgflow.store.zz_probe") == [
        "pgflow/store/zz_probe.py:2: pgflow.store.zz_probe imports pgflow.store.locking inside f with no "
        "label: mark it `# lazy: <why>`, `# cycle: a -> b -> here`, or move it to the top"
    ]


def test_a_labelled_lazy_import_of_a_lower_layer_passes():
    source = "class A:\n    def f(self):\n        # lazy: import cost\n        from ..core import states\n"
    assert function_level_problems(source, "pgflow.store.zz_probe") == []


def test_a_facade_not_in_the_list_is_named():
    source = "def f():\n    from ..runtime import worker  # facade: it would be handy\n"
    assert function_level_problems(source, "pgflow.store.zz_probe") == [
        "pgflow/store/zz_probe.py:2: `pgflow.store.zz_probe.f → pgflow.runtime.worker` is marked facade "
        "but is not in FACADES"
    ]


def test_an_upward_import_labelled_lazy_is_named():
    source = "def f():\n    from ..runtime import worker  # lazy: cycle\n"
    assert function_level_problems(source, "pgflow.store.zz_probe") == [
        "pgflow/store/zz_probe.py:2: pgflow.store.zz_probe (store) imports pgflow.runtime.worker (runtime), a "
        "higher layer, inside f: only a facade of FACADES may, marked `# facade:`"
    ]


def test_a_listed_facade_passes():
    source = "class Workflow:\n    def start(self):\n        from .. import store  # facade: the user's door\n"
    assert function_level_problems(source, "pgflow.workflow.base") == []


def test_a_cycle_is_checked_link_by_link():
    # leases imports scheduling at its top, and children -> batches -> leases is true too.
    true = "def f():\n    from .children import child_ended  # cycle: children -> batches -> leases -> here\n"
    assert function_level_problems(true, "pgflow.store.scheduling") == []
    made_up = "def f():\n    from .children import child_ended  # cycle: children -> nowhere -> here\n"
    assert function_level_problems(made_up, "pgflow.store.scheduling") == [
        "pgflow/store/scheduling.py:2: the cycle 'children -> nowhere -> here' names nowhere, no module of "
        "pgflow or pgflow_dashboard"
    ]
    broken = "def f():\n    from .children import child_ended  # cycle: children -> here\n"
    assert function_level_problems(broken, "pgflow.store.scheduling") == [
        "pgflow/store/scheduling.py:2: the cycle 'children -> here': pgflow.store.children does not import "
        "pgflow.store.scheduling at its top"
    ]


def test_a_third_party_import_needs_a_lazy_label():
    source = "def f():\n    import prometheus_client\n\n\ndef g():\n    import json  # cycle: a -> here\n"
    assert function_level_problems(source, "pgflow.observability.zz_probe") == [
        "pgflow/observability/zz_probe.py:2: pgflow.observability.zz_probe imports prometheus_client inside f "
        "with no label: mark it `# lazy: <why>`, `# cycle: a -> b -> here`, or move it to the top",
        "pgflow/observability/zz_probe.py:6: json is no pgflow module; its label can only be `# lazy:`",
    ]


def test_the_dashboard_never_imports_the_store_even_lazily():
    source = "def f():\n    from pgflow import store  # lazy: handy\n"
    assert function_level_problems(source, "pgflow_dashboard.zz_probe") == [
        "pgflow_dashboard/zz_probe.py:2: the dashboard imports pgflow.store; it acts through pgflow's public API"
    ]
