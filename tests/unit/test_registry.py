"""The workflow registry: registration at class creation, and resolving a stored path."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgflow import Workflow, registry, step
from pgflow.exceptions import WorkflowNotFound


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(registry, "_workflows", dict(registry._workflows))
    yield


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for throwaway packages; they are unloaded afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("regpkg"):
            del sys.modules[name]


def write(root: Path, path: str, source: str) -> None:
    file = root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(textwrap.dedent(source))


GOOD = """
    import pgflow

    class Orders(pgflow.Workflow):
        @pgflow.step
        def one(self):
            pass

        class Nested(pgflow.Workflow):
            @pgflow.step
            def inner(self):
                pass

    class NotAWorkflow:
        pass

    NOT_A_CLASS = 3
"""


def test_a_class_registers_itself_when_created() -> None:
    class Flow(Workflow):
        @step
        def a(self) -> None:
            pass

    path = f"{__name__}.test_a_class_registers_itself_when_created.<locals>.Flow"
    assert Flow.workflow_path() == path
    assert Flow in registry.registered()
    assert registry.resolve(path) is Flow  # a class defined in a function is found in the registry


def test_a_class_created_again_under_the_same_path_replaces_the_old_one() -> None:
    def make() -> type[Workflow]:
        class Flow(Workflow):
            @step
            def a(self) -> None:
                pass

        return Flow

    first, second = make(), make()
    assert first is not second
    assert registry.resolve(first.workflow_path()) is second
    assert [w for w in registry.registered() if w.workflow_path() == first.workflow_path()] == [second]


def test_a_class_without_steps_is_not_registered() -> None:
    class Base(Workflow):
        queue = "q"

    assert Base not in registry.registered()


def test_registered_is_sorted_by_path() -> None:
    class Zeta(Workflow):
        @step
        def a(self) -> None:
            pass

    class Alpha(Workflow):
        @step
        def a(self) -> None:
            pass

    paths = [w.workflow_path() for w in registry.registered()]
    assert paths == sorted(paths)
    assert paths.index(Alpha.workflow_path()) < paths.index(Zeta.workflow_path())


def test_resolve_imports_a_module_nothing_imported_yet(modules: Path) -> None:
    write(modules, "regpkg/__init__.py", "")
    write(modules, "regpkg/flows.py", GOOD)
    assert "regpkg.flows" not in sys.modules
    found = registry.resolve("regpkg.flows.Orders")
    assert found.__name__ == "Orders"
    assert found.steps().names() == ("one",)
    assert registry.resolve("regpkg.flows.Orders") is found  # registered by the import
    assert registry.resolve("regpkg.flows.Orders.Nested").steps().names() == ("inner",)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (
            "regpkg.nowhere.Orders",
            "workflow class 'regpkg.nowhere.Orders' does not import: ModuleNotFoundError: "
            "No module named 'regpkg.nowhere'",
        ),
        (
            "nosuchpackage_x.flows.Orders",
            "workflow class 'nosuchpackage_x.flows.Orders' does not import: ModuleNotFoundError: "
            "No module named 'nosuchpackage_x'",
        ),
        (
            "regpkg.flows.Missing",
            "workflow class 'regpkg.flows.Missing' does not import: AttributeError: module 'regpkg.flows' has no "
            "attribute 'Missing'",
        ),
        (
            "regpkg.flows.Orders.Missing",
            "workflow class 'regpkg.flows.Orders.Missing' does not import: AttributeError: module 'regpkg.flows' "
            "has no attribute 'Orders.Missing'",
        ),
        (
            "regpkg.broken.Orders",
            "workflow class 'regpkg.broken.Orders' does not import: RuntimeError: the module fails at import",
        ),
        (
            "regpkg.needs_dep.Orders",
            "workflow class 'regpkg.needs_dep.Orders' does not import: ModuleNotFoundError: "
            "No module named 'a_dependency_that_is_not_installed'",
        ),
        (
            "regpkg.syntax.Orders",
            "workflow class 'regpkg.syntax.Orders' does not import: SyntaxError:",
        ),
        (
            "regpkg.invalid.Orders",
            "workflow class 'regpkg.invalid.Orders' does not import: DefinitionError: regpkg.invalid.Orders: "
            "step 'one': timeout must be more than 0 seconds, got 0",
        ),
        ("regpkg.flows.NotAWorkflow", "'regpkg.flows.NotAWorkflow' is not a pgflow.Workflow subclass, it is <class"),
        ("regpkg.flows.NOT_A_CLASS", "'regpkg.flows.NOT_A_CLASS' is not a pgflow.Workflow subclass, it is 3"),
        ("pgflow.workflow.Workflow", "'pgflow.workflow.Workflow' is not a pgflow.Workflow subclass"),
        ("Orders", "workflow class path must be 'module.QualName', got 'Orders'"),
        ("", "workflow class path must be 'module.QualName', got ''"),
        (None, "workflow class path must be 'module.QualName', got None"),
    ],
)
def test_resolve_reports_what_is_wrong(modules: Path, path: str, message: str) -> None:
    write(modules, "regpkg/__init__.py", "")
    write(modules, "regpkg/flows.py", GOOD)
    write(modules, "regpkg/broken.py", "raise RuntimeError('the module fails at import')\n")
    write(modules, "regpkg/needs_dep.py", "import a_dependency_that_is_not_installed\n")
    write(modules, "regpkg/syntax.py", "def (:\n")
    write(
        modules,
        "regpkg/invalid.py",
        """
        import pgflow

        class Orders(pgflow.Workflow):
            @pgflow.step(timeout=0)
            def one(self):
                pass
        """,
    )
    with pytest.raises(WorkflowNotFound, match="^" + re.escape(message)):
        registry.resolve(path)


def test_import_path_follows_attributes() -> None:
    assert registry.import_path("pgflow.registry.resolve") is registry.resolve
    assert registry.import_path("pgflow.workflow.Workflow.steps") == Workflow.steps
