"""The backend contract stays small and written down: a third backend implements it from the docstrings.

What each backend must do is the packaged conformance suite (autogen_shared_memory.testing.conformance), which
tests/test_conformance.py runs on every backend.
"""

from __future__ import annotations

import inspect

from autogen_shared_memory.backends.base import Backend, ScopeTx
from autogen_shared_memory.core.lifecycle import WriteTx
from autogen_shared_memory.testing import InMemoryBackend


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


def test_the_in_memory_backend_implements_the_abstract_methods_only() -> None:
    # autogen_shared_memory.testing.memory, written from the docstrings: the ten methods (and its own helpers)
    # suffice.
    public = {n for n, v in vars(InMemoryBackend).items() if callable(v) and not n.startswith("_")}
    assert public == set(Backend.__abstractmethods__)
