"""One error model: every error the package defines lives in ``autogen_shared_memory.errors``, derives from
``SharedMemoryError`` and is exported, so ``except SharedMemoryError`` catches whatever the package raises."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest

import autogen_shared_memory
from autogen_shared_memory import (
    InvalidInputError,
    InvalidInputTypeError,
    MemoryAccessDenied,
    SharedMemoryError,
    SharedMemoryStore,
)
from autogen_shared_memory import errors as errors_module

ROOT = Path(__file__).resolve().parent.parent
# Exception classes that are deliberately not part of the error model, each with the reason.
PRIVATE = {
    # the CLI's usage error: raised only by CLI commands and always caught by the CLI's own handler, which
    # prints it as one line and exits 1; no library call raises it
    "autogen_shared_memory.cli.app._CliError",
    # raised inside the 4-bit first pass's build thread when the interpreter shuts down, and always caught
    # there (the build is given up; no search or caller sees it)
    "autogen_shared_memory.search.packed._Abandoned",
}


def package_modules() -> list[ModuleType]:
    """Every module of the package that imports here; a module whose optional extra (a framework, psycopg)
    is not installed is left out, any other import failure fails the test."""
    modules = []
    for info in pkgutil.walk_packages(autogen_shared_memory.__path__, "autogen_shared_memory."):
        if info.name.endswith("__main__"):  # runs the CLI when imported
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except ModuleNotFoundError as exc:
            if (exc.name or "").startswith("autogen_shared_memory"):
                raise
    return modules


def defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in package_modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == module.__name__:
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def test_the_walk_sees_the_whole_package() -> None:
    names = {m.__name__ for m in package_modules()}
    # the core and the modules that used to hold errors are all walked (a broken walk would pass vacuously)
    for name in ("errors", "core.types", "views.agents", "views.caselog", "transfer", "cli.app", "facts"):
        assert f"autogen_shared_memory.{name}" in names
    assert len(defined_exceptions()) > len(errors_module.__all__)


def test_every_error_is_a_shared_memory_error_defined_in_errors_and_exported() -> None:
    public = {name: cls for name, cls in defined_exceptions().items() if name not in PRIVATE}
    assert public, "no exception classes found"
    for name, cls in public.items():
        assert issubclass(cls, SharedMemoryError), f"{name} does not derive from SharedMemoryError"
        assert cls.__module__ == "autogen_shared_memory.errors", f"{name} is defined outside errors.py"
        assert cls.__name__ in autogen_shared_memory.__all__, f"{name} is not in autogen_shared_memory.__all__"
        assert getattr(autogen_shared_memory, cls.__name__) is cls
    assert set(errors_module.__all__) == {cls.__name__ for cls in public.values()}
    for name in PRIVATE:  # the allow-list names real classes (a rename must update it)
        assert name in defined_exceptions()


def test_the_old_import_places_still_work() -> None:
    from autogen_shared_memory.backends.sqlite import StorageError
    from autogen_shared_memory.core.types import FactNotFoundError, MemoryAccessDenied, PositionError
    from autogen_shared_memory.transfer import ImportFormatError, ImportModelError, ImportPolicyError
    from autogen_shared_memory.views.agents import TaskNotFoundError, UnknownAgentError
    from autogen_shared_memory.views.caselog import CheckpointError

    for cls in (StorageError, FactNotFoundError, MemoryAccessDenied, PositionError, ImportFormatError):
        assert getattr(errors_module, cls.__name__) is cls
    for cls in (ImportModelError, ImportPolicyError, TaskNotFoundError, UnknownAgentError, CheckpointError):
        assert getattr(errors_module, cls.__name__) is cls


def test_errors_still_are_the_builtin_errors_callers_catch() -> None:
    assert issubclass(MemoryAccessDenied, PermissionError)
    assert issubclass(InvalidInputError, ValueError)
    assert issubclass(InvalidInputTypeError, TypeError)
    assert issubclass(errors_module.PositionError, InvalidInputError)
    assert issubclass(errors_module.ImportFormatError, InvalidInputError)
    for name in ("FactNotFoundError", "UnknownAgentError", "TaskNotFoundError", "CheckpointError"):
        cls = getattr(errors_module, name)
        assert issubclass(cls, KeyError)
        assert str(cls("no fact 'x' here")) == "no fact 'x' here"  # not KeyError's quoted repr
    assert issubclass(errors_module.BackendUnavailableError, ConnectionError)
    assert issubclass(errors_module.ImportModelError, errors_module.EmbeddingModelMismatchError)


def test_errors_module_imports_nothing_from_the_package() -> None:
    source = Path(errors_module.__file__).read_text()
    assert not re.search(r"^\s*(from \.|from autogen_shared_memory|import autogen_shared_memory)", source, re.M)
    assert "psycopg" not in re.findall(r"^\s*(?:from|import) (\w+)", source, re.M)


def test_except_shared_memory_error_catches_a_denial(store: SharedMemoryStore) -> None:
    with pytest.raises(SharedMemoryError) as caught:
        store.as_agent("alice").remember("policy: no PII in logs", "global")  # alice is no global writer
    assert isinstance(caught.value, MemoryAccessDenied)
    assert isinstance(caught.value, PermissionError)
    assert store.as_agent("lead").search("PII logs") == []  # nothing was written


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda s: s.as_agent("alice").remember("   ", "agent"), InvalidInputError),
        (lambda s: s.as_agent("alice").search("x", top_k=0), InvalidInputError),
        (lambda s: s.as_agent("a/b").remember("fine", "agent"), InvalidInputError),
        (lambda s: s.as_agent("alice").remember(42, "agent"), InvalidInputTypeError),
    ],
    ids=["blank-content", "limit-zero", "path-in-id", "content-not-str"],
)
def test_invalid_input_is_a_shared_memory_error_and_the_builtin_one(
    store: SharedMemoryStore, call: object, expected: type[Exception]
) -> None:
    with pytest.raises(expected) as caught:
        call(store)  # type: ignore[operator]
    assert isinstance(caught.value, SharedMemoryError)
    builtin = ValueError if expected is InvalidInputError else TypeError
    assert isinstance(caught.value, builtin)
    assert store.as_agent("alice").search("fine") == []


def test_the_docs_and_the_tree_list_every_error() -> None:
    docs = (ROOT / "docs" / "errors.md").read_text()
    tree = errors_module.__doc__ or ""
    for name in errors_module.__all__:
        assert re.search(rf"^\| `{name}`", docs, re.M), f"docs/errors.md has no row for {name}"
        assert re.search(rf"\b{name}\b", tree), f"the tree in errors.py does not show {name}"
    assert "docs/errors.md" in (ROOT / "README.md").read_text()
