"""The package's layers, read from its source: imports only run downwards, and no two modules import each other.

Every import counts, deferred ones (inside functions) included; imports under ``if TYPE_CHECKING:`` do not
(they never run). Layers, bottom up: the core (types, rules, search, backends, embedders), ``facts``
(``FactStore``), the views, ``store`` (the façade), the framework integrations, the CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "autogen_shared_memory"
SRC = Path(__file__).resolve().parent.parent / "src" / PACKAGE

VIEWS = {"views", "transfer"}
ABOVE_THE_CORE = ("__main__", "integration", "cli", "store", "facts", *VIEWS)  # what the core may never import
ABOVE_FACTS = ("integration", "cli", "store", *VIEWS)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str) -> set[str]:
    """The package modules ``name`` imports when it runs (deferred imports included)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(PACKAGE))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.startswith(PACKAGE):
                for alias in node.names:  # `from . import lifecycle` imports the module lifecycle
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in MODULES else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name) for name in MODULES}


def _layer_of(name: str) -> str:
    return name.split(".")[1] if name.count(".") else ""


def _within(name: str, tops: tuple[str, ...]) -> bool:
    return _layer_of(name) in tops


def test_no_two_modules_import_each_other_even_through_others() -> None:
    # The package root re-exports the public names for users: nothing inside imports it.
    graph = {n: deps - {PACKAGE} for n, deps in GRAPH.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def walk(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*trail[trail.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    assert cycles == []


@pytest.mark.parametrize("name", sorted(n for n in MODULES if not _within(n, ABOVE_THE_CORE) and n != PACKAGE))
def test_the_core_imports_nothing_above_it(name: str) -> None:
    assert {m for m in GRAPH[name] if _within(m, ABOVE_THE_CORE) or m == PACKAGE} == set()


@pytest.mark.parametrize(
    "name", ["autogen_shared_memory.facts", *sorted(n for n in MODULES if _within(n, tuple(VIEWS)))]
)
def test_facts_and_the_views_import_no_facade_integration_or_cli(name: str) -> None:
    assert {m for m in GRAPH[name] if _within(m, ABOVE_FACTS) and _layer_of(m) not in VIEWS} == set()


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _within(n, ("core",))))
def test_core_imports_only_core(name: str) -> None:
    assert {m for m in GRAPH[name] if not _within(m, ("core",))} == set()


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _within(n, ("search",))))
def test_search_imports_only_core_and_the_embedder_types(name: str) -> None:
    assert {m for m in GRAPH[name] if not _within(m, ("core", "search", "embedding"))} == set()


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _within(n, ("integration",))))
def test_framework_integrations_depend_on_facts_never_on_the_facade_or_cli(name: str) -> None:
    assert {m for m in GRAPH[name] if _within(m, ("store", "cli"))} == set()
