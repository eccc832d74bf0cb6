"""The package's layers, read from its source: imports only run downwards, and no two modules import each other.

Every import counts, deferred ones (inside functions) included; imports under ``if TYPE_CHECKING:`` do not
(they never run), except for cycles: no two modules import each other even for type checking. Layers, bottom
up: the core (types, rules, search, backends, embedders), ``facts`` (``FactStore``), the views, ``store`` (the
façade), the framework integrations, the CLI. Storage knowledge stays in ``backends/``: no module outside it
imports a concrete backend (SQLite, PostgreSQL) or opens a SQLite file; everything else reaches storage
through :class:`~autogen_shared_memory.backends.base.Backend` and constructs one with
:func:`~autogen_shared_memory.backends.open_backend`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "autogen_shared_memory"
SRC = Path(__file__).resolve().parent.parent / "src" / PACKAGE

VIEWS = {"views", "transfer", "handles"}
ABOVE_THE_CORE = (
    "__main__",
    "testing",  # test helpers: the conformance suite drives a whole store (see the testing rule below)
    "integration",
    "cli",
    "mcp",
    "ui",
    "store",
    "facts",
    *VIEWS,
)  # what the core may never import
ABOVE_FACTS = ("integration", "cli", "mcp", "ui", "store", *VIEWS)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str, type_checking: bool = False) -> set[str]:
    """The package modules ``name`` imports when it runs (deferred imports included); with ``type_checking``,
    those it imports under ``if TYPE_CHECKING:`` too."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
            for branch in node.orelse:
                visit(branch)
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
TYPED_GRAPH = {name: _imports(name, type_checking=True) for name in MODULES}


def _layer_of(name: str) -> str:
    return name.split(".")[1] if name.count(".") else ""


def _within(name: str, tops: tuple[str, ...]) -> bool:
    return _layer_of(name) in tops


def test_no_two_modules_import_each_other_even_through_others() -> None:
    # The package root re-exports the public names for users: nothing inside imports it. Imports for type
    # checking count here: a cycle through them still ties the two modules together.
    graph = {n: deps - {PACKAGE} for n, deps in TYPED_GRAPH.items()}
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
    # errors.py sits below the core: it imports nothing from the package (tests/test_errors.py)
    assert {m for m in GRAPH[name] if not _within(m, ("core", "errors"))} == set()


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _within(n, ("search",))))
def test_search_imports_only_core_and_the_embedder_types(name: str) -> None:
    assert {m for m in GRAPH[name] if not _within(m, ("core", "search", "embedding", "settings"))} == set()


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _within(n, ("integration",))))
def test_framework_integrations_depend_on_facts_never_on_the_facade_or_cli(name: str) -> None:
    assert {m for m in GRAPH[name] if _within(m, ("store", "cli"))} == set()


def test_the_facade_imports_no_framework_integration() -> None:
    # adapters are found by registration (autogen_shared_memory.adapters), imported on first attach
    facade = f"{PACKAGE}.store"
    assert {m for m in GRAPH[facade] | TYPED_GRAPH[facade] if _within(m, ("integration",))} == set()
    assert f"{PACKAGE}.adapters" in GRAPH[facade]  # the rule sees the registry the façade goes through


TESTING = f"{PACKAGE}.testing"
ON_THE_CORE = sorted(n for n in MODULES if _within(n, ("testing",)) and n not in (TESTING, f"{TESTING}.conformance"))


@pytest.mark.parametrize("name", ON_THE_CORE)
def test_the_testing_embedder_and_in_memory_backend_stand_on_the_core(name: str) -> None:
    """The in-memory backend is written from the backend contract (``backends/base.py``) and the core alone,
    as a third party's would be, and the test embedder needs no store: only the conformance suite (and the
    package's lazy export of it) sits above the core."""
    assert {m for m in GRAPH[name] if _within(m, ABOVE_THE_CORE) or m == PACKAGE} == set()


def test_the_testing_rule_sees_the_in_memory_backend() -> None:
    assert f"{TESTING}.memory" in ON_THE_CORE and f"{PACKAGE}.backends.base" in GRAPH[f"{TESTING}.memory"]


# ----------------------------------------------------------------------------------- storage knowledge
BACKENDS = f"{PACKAGE}.backends"
CONCRETE = (f"{BACKENDS}.sqlite", f"{BACKENDS}.postgres")
# The package root re-exports SQLiteBackend for users (``from autogen_shared_memory import SQLiteBackend``);
# nothing inside the package imports the root (see the cycle test).
OUTSIDE_THE_BACKENDS = sorted(n for n in MODULES if not n.startswith(BACKENDS) and n != PACKAGE)


def _is_concrete(module: str) -> bool:
    return any(module == c or module.startswith(c + ".") for c in CONCRETE)


def _calls(name: str) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(MODULES[name].read_text())) if isinstance(n, ast.Call)]


def _callee(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


@pytest.mark.parametrize("name", OUTSIDE_THE_BACKENDS)
def test_no_module_outside_the_backends_imports_a_concrete_backend(name: str) -> None:
    """Type checks and construction of a particular backend belong to ``backends/``: the change feed asks
    ``Backend.change_watcher``, ``doctor`` asks ``Backend.health``, an export asks ``Backend.is_storage_path``,
    and every store (the CLI's ``--root`` / ``--dsn`` included) is built by ``open_backend``."""
    assert {m for m in TYPED_GRAPH[name] if _is_concrete(m)} == set()
    by_name = [
        call
        for call in _calls(name)
        if _callee(call) in ("importlib.import_module", "import_module", "__import__")
        and call.args
        and isinstance(call.args[0], ast.Constant)
        and _is_concrete(str(call.args[0].value))
    ]
    assert by_name == []


@pytest.mark.parametrize("name", OUTSIDE_THE_BACKENDS)
def test_no_module_outside_the_backends_opens_a_sqlite_file(name: str) -> None:
    """Only in-memory SQLite databases outside ``backends/``: the stemming vocabulary of
    :mod:`~autogen_shared_memory.search.text` and ``doctor``'s FTS5 check. Scope files (and ``ids.db``) are
    opened by the SQLite backend alone."""
    tree = ast.parse(MODULES[name].read_text())
    bare = any(  # `from sqlite3 import connect`
        isinstance(n, ast.ImportFrom) and n.module == "sqlite3" and any(a.name == "connect" for a in n.names)
        for n in ast.walk(tree)
    )
    opened = [
        ast.unparse(call)
        for call in _calls(name)
        if (_callee(call) == "sqlite3.connect" or (bare and _callee(call) == "connect"))
        and not (call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value == ":memory:")
    ]
    assert opened == []


def test_the_storage_rules_see_what_they_look_for() -> None:
    """The rules above read what they must: an import of a concrete backend and a SQLite file opened are
    found where they are (inside the backends), so an empty answer outside them means something."""
    assert any(_is_concrete(m) for m in TYPED_GRAPH[PACKAGE])  # the root's re-export of SQLiteBackend
    assert any(_is_concrete(m) for m in GRAPH[BACKENDS])  # open_backend
    assert any(_callee(c) == "sqlite3.connect" for c in _calls(f"{BACKENDS}.sqlite.files"))  # the backend's own
