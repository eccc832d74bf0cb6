from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from autogen_shared_memory import SentenceTransformerEmbedder, SharedMemoryStore
from autogen_shared_memory.testing import HashEmbedder


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def store(tmp_path: Path, embedder: HashEmbedder) -> Iterator[SharedMemoryStore]:
    s = SharedMemoryStore(tmp_path / "mem", embedder=embedder, global_writers=["lead"])
    s.add_group_member("crew", "alice")
    s.add_group_member("crew", "bob")
    s.add_group_member("crew", "lead")
    yield s
    s.close()


@pytest.fixture(scope="session")
def minilm() -> SentenceTransformerEmbedder:
    """The real all-MiniLM-L6-v2 from the packaged copy (loaded once per test session)."""
    model = SentenceTransformerEmbedder()
    model.load()
    return model
