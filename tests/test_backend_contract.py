"""The backend contract stays small and written down: a third backend implements it from the docstrings."""

from __future__ import annotations

import inspect

from memory_backend import InMemoryBackend

from autogen_shared_memory.backends.base import Backend, ScopeTx
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.backends.sqlite import SQLiteBackend
from autogen_shared_memory.core.lifecycle import WriteTx


def test_at_most_twelve_abstract_methods_each_documented() -> None:
    abstract = sorted(Backend.__abstractmethods__)
    assert len(abstract) <= 12, abstract
    for name in abstract:
        assert inspect.getdoc(getattr(Backend, name)), f"Backend.{name} has no docstring"


def test_every_transaction_operation_is_documented() -> None:
    for protocol in (WriteTx, ScopeTx):
        for name, member in vars(protocol).items():
            if callable(member) and not name.startswith("_"):
                assert inspect.getdoc(member), f"{protocol.__name__}.{name} has no docstring"


def test_backends_override_derived_methods_only_to_add_to_them() -> None:
    # What each backend may override beyond the abstract methods, and why: an id index (find, write, purge,
    # import on SQLite), a cheaper existence check, and the storage hooks that say what only the backend knows
    # of its storage (change watching, health checks, where a scope is kept). Anything else is derived once in
    # base.py.
    hooks = {"change_watcher", "health", "is_storage_path", "scope_location", "stray_locations"}
    allowed = {"find", "exists", "write", "purge", "import_scope", "close", "release_thread", *hooks}
    derived = {n for n, v in vars(Backend).items() if callable(v) and not n.startswith("_")} - set(
        Backend.__abstractmethods__
    )
    for backend in (SQLiteBackend, PostgresBackend, InMemoryBackend):
        overridden = {n for n in derived if n in vars(backend)}
        assert overridden <= allowed, (backend.__name__, overridden - allowed)


def test_the_in_memory_backend_implements_the_abstract_methods_only() -> None:
    # tests/memory_backend.py, written from the docstrings: the nine methods (and its own helpers) suffice.
    public = {n for n, v in vars(InMemoryBackend).items() if callable(v) and not n.startswith("_")}
    assert public == set(Backend.__abstractmethods__)
