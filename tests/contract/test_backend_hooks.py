"""What the layers above ask a backend about its storage: health checks (``doctor``), a change watcher (the
change feed) and the names its storage takes (an export's file name), and :func:`open_backend`."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from autogen_shared_memory import NotAStoreError, SharedMemoryStore
from autogen_shared_memory.backends import open_backend
from autogen_shared_memory.backends.sqlite import SQLiteBackend, scope_file_name
from autogen_shared_memory.core.types import ScopeRef

StoreFactory = Callable[..., SharedMemoryStore]


@pytest.mark.sqlite_only
def test_sqlite_names_its_scope_files_and_their_side_files_as_storage(make_store: StoreFactory) -> None:
    store = make_store()
    store.operator.remember("The office opens at nine", "global")
    root = Path(store.root)
    backend = store.backend
    assert backend.scope_location(ScopeRef("group", "crew")) == scope_file_name(ScopeRef("group", "crew"))
    for name in ("global.db", "agent_newbie.db-wal", "group_crew.db-shm", "agent_x.db-journal"):
        assert backend.is_storage_path(root / name), name
    for path in (root / "backup.jsonl", root / "agent_x.txt", root / "ids.db", root.parent / "global.db"):
        assert not backend.is_storage_path(path), path
    (root / "agent_stray.db").write_bytes(b"not a database")
    assert backend.stray_locations(backend.scopes()) == [str(root / "agent_stray.db")]


def test_open_backend_picks_the_backend_a_location_names(tmp_path: Path) -> None:
    for location in (tmp_path / "a", str(tmp_path / "a"), f"sqlite://{tmp_path / 'a'}"):
        backend = open_backend(location)
        assert isinstance(backend, SQLiteBackend) and backend.root == tmp_path / "a"
        backend.close()
    with pytest.raises(NotAStoreError, match="no memory store at"):
        open_backend(tmp_path / "missing", create=False)
    assert not (tmp_path / "missing").exists()
    with pytest.raises(ValueError, match="kind must be"):
        open_backend(tmp_path, kind="mysql")  # type: ignore[arg-type]


def test_open_backend_on_a_dsn_needs_its_schema_unless_it_may_create_it(pg_dsn: str) -> None:
    from autogen_shared_memory.backends.postgres import PostgresBackend

    with pytest.raises(NotAStoreError, match="no memory store in PostgreSQL schema 'hooks_absent'"):
        open_backend(pg_dsn, create=False, schema="hooks_absent")
    backend = open_backend(pg_dsn, schema=f"hooks{uuid.uuid4().hex[:12]}")
    try:
        assert isinstance(backend, PostgresBackend)
    finally:
        backend.close()
