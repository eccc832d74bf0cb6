"""What tests of code that uses the store, and of a storage backend, need: a deterministic embedder, an
in-process backend, and the backend conformance suite.

* :class:`HashEmbedder`: a fast, dependency-free embedder (words hashed into buckets; not semantic).
* :class:`InMemoryBackend`: a third backend, written from the contract's docstrings alone
  (:mod:`autogen_shared_memory.backends.base`); nothing outlives the process.
* :class:`~autogen_shared_memory.testing.conformance.BackendConformance`: the backend contract as pytest tests,
  for a third-party backend to run against itself (docs/backends.md). It needs pytest, so it is imported on
  first use: importing this package does not import pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .embedder import HashEmbedder, HashEmbedderConfig
from .memory import InMemoryBackend, MemoryDatabase
from .values import make_fact, vector_at_cosine

if TYPE_CHECKING:
    from .conformance import BackendConformance

__all__ = [
    "BackendConformance",
    "HashEmbedder",
    "HashEmbedderConfig",
    "InMemoryBackend",
    "MemoryDatabase",
    "make_fact",
    "vector_at_cosine",
]


def __getattr__(name: str) -> Any:
    """``BackendConformance``, imported on first use (it imports pytest)."""
    if name == "BackendConformance":
        from .conformance import BackendConformance

        return BackendConformance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
