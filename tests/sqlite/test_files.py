"""Scope files on read-only file systems and full disks (issue 14.9).

Read-only: the tests run as root, and root ignores permission bits, so a store is made read-only with a
read-only bind mount of its directory (``mount --bind`` + ``mount -o remount,bind,ro``): the kernel then
refuses every write with EROFS, root's included, exactly as on a read-only volume. Where mounting is not
permitted, the tests that need it are skipped; as another user, the basic one falls back to a copy whose
files and directory have no write permission. A full disk is SQLite's own ``SQLITE_FULL``, forced with
``PRAGMA max_page_count`` on the backend's connections.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from autogen_shared_memory import FactNotFoundError, SharedMemoryStore
from autogen_shared_memory.backends.sqlite import SCHEMA_VERSION, SQLiteBackend, StorageError
from autogen_shared_memory.core.types import ScopeRef, SharedMemoryError
from autogen_shared_memory.settings import WritePolicy
from autogen_shared_memory.testing import HashEmbedder

GLOBAL = ScopeRef("global", "")
ReadOnly = Callable[[Path], Path]


def _mount_read_only(src: Path, target: Path) -> bool:
    target.mkdir()
    for command in (["mount", "--bind", str(src), str(target)], ["mount", "-o", "remount,bind,ro", str(target)]):
        if subprocess.run(command, capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(target)], capture_output=True)
            return False
    return True


@pytest.fixture
def ro_mount(tmp_path: Path) -> Iterator[ReadOnly]:
    """``view(src)``: ``src`` seen through a read-only bind mount (writes through ``src`` stay possible)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a read-only bind mount")
    mounted: list[Path] = []

    def view(src: Path) -> Path:
        target = tmp_path / f"ro-{uuid.uuid4().hex[:8]}"
        if not _mount_read_only(src, target):
            pytest.skip("mount --bind is not permitted here")
        mounted.append(target)
        return target

    yield view
    for target in mounted:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


@pytest.fixture
def read_only(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ReadOnly]:
    """``view(src)``: a read-only ``src``: a read-only bind mount as root, a copy without write permission
    for any other user (whom permission bits do stop)."""
    if os.geteuid() == 0:
        yield request.getfixturevalue("ro_mount")
        return
    copies: list[Path] = []

    def copy(src: Path) -> Path:
        target = tmp_path / f"ro-{uuid.uuid4().hex[:8]}"
        shutil.copytree(src, target)
        for path in (*target.iterdir(), target):
            path.chmod(0o555 if path.is_dir() else 0o444)
        copies.append(target)
        return target

    yield copy
    for target in copies:
        target.chmod(0o755)


@pytest.fixture
def stores() -> Iterator[Callable[..., SharedMemoryStore]]:
    made: list[SharedMemoryStore] = []

    def make(root: Path, **kwargs: Any) -> SharedMemoryStore:
        store = SharedMemoryStore(root, embedder=HashEmbedder(), **kwargs, policy=WritePolicy(global_writers=["lead"]))
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


def _fill(root: Path) -> dict[str, str]:
    """A cleanly closed store with a fact in each kind of scope; returns the fact ids by scope kind."""
    store = SharedMemoryStore(root, embedder=HashEmbedder(), policy=WritePolicy(global_writers=["lead"]))
    store.operator.add_member("crew", "alice")
    ids = {
        "global": store.as_agent("lead").remember("the deploy key rotates on fridays", "global").id,
        "group": store.as_agent("alice", "crew").remember("the crew meets at nine", "group").id,
        "agent": store.as_agent("alice").remember("alice drinks green tea", "agent").id,
    }
    store.as_agent("alice").log_message("hello from alice")
    store.close()
    files = ["agent_alice.db", "global.db", "group_crew.db", "ids.db"]
    assert sorted(p.name for p in root.iterdir()) == files  # no -wal: all of it is in the files
    return ids


def _counts(store: SharedMemoryStore) -> dict[str, int]:
    return {str(s.scope): s.counts["active"] for s in store.stats()}


def _contents(store: SharedMemoryStore, query: str) -> list[str]:
    return [h.fact.content for h in store.as_agent("alice", "crew").search(query, "all")]


# ------------------------------------------------------------------------------------------ read-only files
def test_cleanly_closed_store_in_a_read_only_directory_is_searchable(
    tmp_path: Path, read_only: ReadOnly, stores: Callable[..., SharedMemoryStore]
) -> None:
    ids = _fill(tmp_path / "mem")
    view = read_only(tmp_path / "mem")
    store = stores(view)

    assert _contents(store, "deploy key") == ["the deploy key rotates on fridays"]
    assert _contents(store, "green tea") == ["alice drinks green tea"]
    assert store.as_agent("alice", "crew").get(ids["group"]).content == "the crew meets at nine"
    assert [r.content for r in store.operator.conversation("alice")] == ["hello from alice"]
    assert _counts(store) == {str(ScopeRef(*k)): 1 for k in (("agent", "alice"), ("global", ""), ("group", "crew"))}
    assert [s.schema_version for s in store.stats()] == [SCHEMA_VERSION] * 3

    # Writes fail with an error that names the file and says it is read-only, and change nothing.
    with pytest.raises(StorageError, match="read-only") as existing:
        store.as_agent("lead").remember("a new fact", "global")
    assert str(view / "global.db") in str(existing.value)
    assert existing.value.path == view / "global.db"
    assert isinstance(existing.value, SharedMemoryError)
    with pytest.raises(StorageError, match="read-only") as new_scope:
        store.as_agent("bob").remember("a fact for a new scope", "agent")
    assert str(view / "agent_bob.db") in str(new_scope.value)
    with pytest.raises(StorageError, match=r"agent_alice\.db.*read-only"):
        store.as_agent("alice").log_message("recorded")
    with pytest.raises(StorageError, match=r"group_crew\.db.*read-only"):
        store.as_agent("alice", "crew").forget(ids["group"])
    assert _contents(store, "deploy key") == ["the deploy key rotates on fridays"]  # still usable after them
    assert sorted(p.name for p in view.iterdir()) == ["agent_alice.db", "global.db", "group_crew.db", "ids.db"]


@pytest.mark.parametrize("with_index", [True, False])
def test_a_read_only_store_finds_facts_by_id_alone(
    tmp_path: Path, read_only: ReadOnly, stores: Callable[..., SharedMemoryStore], with_index: bool
) -> None:
    """Without the scope (trusted code, the CLI), with or without an ``ids.db`` it cannot write."""
    ids = _fill(tmp_path / "mem")
    if not with_index:
        (tmp_path / "mem" / "ids.db").unlink()
    store = stores(read_only(tmp_path / "mem"))
    assert store.operator.get(ids["group"]).content == "the crew meets at nine"
    assert store.operator.get(ids["agent"]).content == "alice drinks green tea"
    with pytest.raises(FactNotFoundError):
        store.operator.get("g_0000000000000000beef")


def test_writable_file_in_a_read_only_directory_falls_back_to_read_only(
    tmp_path: Path, ro_mount: ReadOnly, stores: Callable[..., SharedMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file this user may write in a directory it may not: SQLite cannot create the ``-shm`` and refuses even
    to read ("unable to open database file"); the backend reopens the file read-only."""
    _fill(tmp_path / "mem")
    view = ro_mount(tmp_path / "mem")
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: True)  # as if file and directory were writable
    store = stores(view)
    assert _contents(store, "deploy key") == ["the deploy key rotates on fridays"]
    assert sum(_counts(store).values()) == 3
    with pytest.raises(StorageError, match="read-only") as error:
        store.as_agent("lead").remember("a new fact", "global")
    assert str(view / "global.db") in str(error.value)


def test_read_only_view_of_a_live_store_follows_its_writer(
    tmp_path: Path, ro_mount: ReadOnly, stores: Callable[..., SharedMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleanly closed file is read as an immutable snapshot; when a writer (with write access through
    another path) changes it, the reader reopens it and reads the live WAL through the writer's ``-shm``."""
    _fill(tmp_path / "mem")
    view = ro_mount(tmp_path / "mem")
    reader = stores(view)
    assert _contents(reader, "deploy key") == ["the deploy key rotates on fridays"]

    writer = stores(tmp_path / "mem")
    writer.as_agent("lead").remember("the deploy key lives in the vault", "global")
    assert (view / "global.db-wal").exists() and (view / "global.db-shm").exists()
    assert sorted(_contents(reader, "deploy key")) == [
        "the deploy key lives in the vault",
        "the deploy key rotates on fridays",
    ]
    writer.as_agent("lead").remember("the deploy key is rotated by lead", "global")
    assert len(_contents(reader, "deploy key")) == 3
    assert _counts(reader)["global"] == 3

    # A file SQLite itself opens read-only (os.access says writable, the mount says no): its write error
    # ("attempt to write a readonly database") names the file too.
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: True)
    other = stores(view)
    assert len(_contents(other, "deploy key")) == 3
    with pytest.raises(StorageError, match="read-only") as error:
        other.as_agent("lead").remember("one more", "global")
    assert str(view / "global.db") in str(error.value)
    assert isinstance(error.value.__cause__, sqlite3.OperationalError)
    monkeypatch.undo()

    other.close()
    reader.close()
    writer.close()  # the last connection: checkpoints and removes the WAL
    assert not (view / "global.db-wal").exists()
    again = stores(view)
    assert len(_contents(again, "deploy key")) == 3


def test_a_wal_holding_writes_is_never_skipped(
    tmp_path: Path, ro_mount: ReadOnly, stores: Callable[..., SharedMemoryStore]
) -> None:
    """A WAL with committed writes and no ``-shm`` (copied from a live store) in a read-only directory:
    SQLite cannot read it, and reading the file without it would hide those writes. Every read says so,
    naming the file; ``stats()`` does not pass the store off as empty."""
    _fill(tmp_path / "mem")
    writer = stores(tmp_path / "mem")
    writer.as_agent("lead").remember("written into the WAL only", "global")
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("global.db", "global.db-wal"):
        shutil.copy2(tmp_path / "mem" / name, copy / name)
    assert (copy / "global.db-wal").stat().st_size > 0
    view = ro_mount(copy)
    store = stores(view)
    with pytest.raises(StorageError, match="write-ahead log") as error:
        store.stats()
    assert str(view / "global.db") in str(error.value)
    with pytest.raises(StorageError, match=r"global\.db-wal"):
        store.as_agent("lead").search("deploy key", "global")


_AS_NOBODY = """
import json, sys
from autogen_shared_memory import SharedMemoryStore, WritePolicy
from autogen_shared_memory.backends.sqlite import StorageError
from autogen_shared_memory.testing import HashEmbedder

store = SharedMemoryStore(sys.argv[1], embedder=HashEmbedder(), policy=WritePolicy(global_writers=["lead"]))
out = {
    "hits": [
        [h.fact.content for h in store.as_agent("alice", "crew").search(q, "all")][:1]
        for q in ("green tea", "crew meets", "deploy key")
    ],
    "active": sum(s.counts["active"] for s in store.stats()),
}
for name, call in (
    ("global", lambda: store.as_agent("lead").remember("new", "global")),
    ("agent", lambda: store.as_agent("alice").remember("new", "agent")),
):
    try:
        call()
        out[name] = "written"
    except StorageError as exc:
        out[name] = str(exc)
print(json.dumps(out))
"""


def test_read_only_directory_for_another_user(tmp_path: Path) -> None:
    """Real permissions (root ignores them, so the check runs in a child process as ``nobody``): a directory
    it may not write, holding a file it may write (global.db: the read-write open fails for want of a
    ``-shm``, SQLITE_READONLY_DIRECTORY) and files it may only read. Searches and stats work, writes say
    which file is read-only."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a child process as another user")
    import json
    import sys
    import tempfile

    nobody = 65534
    root = Path(tempfile.mkdtemp(prefix="asm-ro-"))  # pytest's tmp_path is private to root
    try:
        _fill(root / "mem")
        root.chmod(0o755)
        os.chown(root / "mem" / "global.db", nobody, nobody)

        def as_nobody() -> None:
            os.setgid(nobody)
            os.setgroups([])
            os.setuid(nobody)

        done = subprocess.run(
            [sys.executable, "-c", _AS_NOBODY, str(root / "mem")],
            capture_output=True,
            text=True,
            preexec_fn=as_nobody,
            env={**os.environ, "HOME": str(root)},
            cwd=root,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["hits"] == [
            ["alice drinks green tea"],
            ["the crew meets at nine"],
            ["the deploy key rotates on fridays"],
        ]
        assert out["active"] == 3
        assert str(root / "mem" / "global.db") in out["global"] and "read-only" in out["global"]
        assert "directory is not writable" in out["global"]
        assert str(root / "mem" / "agent_alice.db") in out["agent"] and "read-only" in out["agent"]
        assert sorted(p.name for p in (root / "mem").iterdir()) == [
            "agent_alice.db",
            "global.db",
            "group_crew.db",
            "ids.db",
        ]
    finally:
        shutil.rmtree(root)


def test_stats_never_reports_an_unreadable_store_as_empty(
    tmp_path: Path, stores: Callable[..., SharedMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(tmp_path / "mem")
    store = stores(tmp_path / "mem")
    assert len(store.stats()) == 3
    real_connect = sqlite3.connect

    def connect(target: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        if "group_crew.db" in str(target):  # as for a file this user may not read
            raise sqlite3.OperationalError("unable to open database file")
        return real_connect(target, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    with pytest.raises(StorageError, match="cannot be opened") as error:
        store.stats()
    assert str(tmp_path / "mem" / "group_crew.db") in str(error.value)


def test_files_that_are_not_stores_are_still_skipped_by_the_listing(
    tmp_path: Path, stores: Callable[..., SharedMemoryStore]
) -> None:
    _fill(tmp_path / "mem")
    (tmp_path / "mem" / "agent_junk.db").write_bytes(b"not a database at all" * 100)
    (tmp_path / "mem" / "agent_dir.db").mkdir()
    other = sqlite3.connect(tmp_path / "mem" / "group_other.db")
    other.execute("CREATE TABLE t (x)")
    other.close()
    store = stores(tmp_path / "mem")
    assert sum(_counts(store).values()) == 3


# ------------------------------------------------------------------------------------------ full disks
def _limit_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every scope file the backend opens can no longer grow: SQLITE_FULL, as on a full disk."""
    real_open = SQLiteBackend._open

    def tiny_open(self: SQLiteBackend, path: Path, scope: ScopeRef) -> Any:
        conn = real_open(self, path, scope)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn

    monkeypatch.setattr(SQLiteBackend, "_open", tiny_open)


def test_full_disk_names_the_file_and_writes_nothing(
    tmp_path: Path, stores: Callable[..., SharedMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(tmp_path / "mem")
    _limit_pages(monkeypatch)
    store = stores(tmp_path / "mem")
    big = " ".join(f"word{i}" for i in range(800))  # ~6 KB: new pages for the row, its index and FTS entries
    with pytest.raises(StorageError, match="disk is full") as error:
        store.as_agent("lead").remember(big, "global")
    assert str(tmp_path / "mem" / "global.db") in str(error.value)
    assert error.value.path == tmp_path / "mem" / "global.db"
    assert isinstance(error.value.__cause__, sqlite3.OperationalError)
    assert error.value.__cause__.sqlite_errorname == "SQLITE_FULL"
    with pytest.raises(StorageError, match=r"agent_alice\.db.*disk is full"):
        store.as_agent("alice").log_message(big)
    # One statement too big for the file: SQLite rolls the whole transaction back itself, and the error must
    # still say why (not "cannot rollback - no transaction is active").
    with pytest.raises(StorageError, match=r"global\.db.*disk is full"):
        store.backend.set_meta(GLOBAL, "note", "x" * 100_000)
    assert _counts(store) == {"agent:alice": 1, "global": 1, "group:crew": 1}
    assert _contents(store, "word7") == []

    # Space is freed: the same connections write again (no transaction was left open).
    conn = store.backend._conn(GLOBAL, create=False)  # type: ignore[attr-defined]
    conn.execute("PRAGMA max_page_count = 1073741823")
    store.as_agent("lead").remember(big, "global")
    assert _counts(store)["global"] == 2
    assert _contents(store, "word7") == [big]


@pytest.fixture
def full_tmpdir(tmp_path: Path) -> Iterator[Path]:
    """A temporary folder with no room to speak of: a 1 MB tmpfs (root only)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    target = tmp_path / "tiny-tmp"
    target.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target)], capture_output=True).returncode:
        pytest.skip("mount -t tmpfs is not permitted here")
    yield target
    subprocess.run(["umount", "-l", str(target)], capture_output=True)


_REFRESH_WITHOUT_TMPDIR = """
import sys
from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.sqlite import SQLiteBackend
from autogen_shared_memory.testing import HashEmbedder

def store():
    return SharedMemoryStore(SQLiteBackend(sys.argv[1], save_index_from=None), embedder=HashEmbedder(384))

reader, writer = store(), store()
writer.operator.remember("the first note", "global")
assert reader.operator.search("first note", "global")
writer.operator.remember_many([f"note {i} about the harbour crane" for i in range(6000)], "global")
print(len(reader.operator.search("note 4711 harbour", "global")))
"""


def test_a_search_after_many_writes_needs_no_room_in_tmpdir(tmp_path: Path, full_tmpdir: Path) -> None:
    # The reader's index catches up with 6,000 facts (9 MB of vectors) written by another store: SQLite would
    # sort them in a temporary file, and a full TMPDIR made the search fail (blaming the scope's file).
    env = {**os.environ, "TMPDIR": str(full_tmpdir), "SQLITE_TMPDIR": str(full_tmpdir)}
    done = subprocess.run(
        [sys.executable, "-c", _REFRESH_WITHOUT_TMPDIR, str(tmp_path / "mem")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["5"]


def test_lock_timeouts_stay_lock_errors(tmp_path: Path, stores: Callable[..., SharedMemoryStore]) -> None:
    """Only storage errors are wrapped: a lock held past the busy timeout is still SQLite's "database is
    locked" (what the retries and callers expect), not a StorageError."""
    _fill(tmp_path / "mem")
    store = SharedMemoryStore(
        SQLiteBackend(tmp_path / "mem", busy_timeout=0.2),
        embedder=HashEmbedder(),
        policy=WritePolicy(global_writers=["lead"]),
    )
    holder = sqlite3.connect(tmp_path / "mem" / "global.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError, match="locked") as error:
            store.as_agent("lead").remember("blocked", "global")
        assert not isinstance(error.value, StorageError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        store.close()


def test_a_record_or_meta_write_never_loads_the_vector_index(tmp_path: Path) -> None:
    # Logging a message must not read every vector of the agent's file: only fact changes refresh the index.
    with SharedMemoryStore(tmp_path, embedder=HashEmbedder()) as writer:
        writer.as_agent("ann").remember_many([f"fact number {i}" for i in range(50)], "agent")
    with SharedMemoryStore(tmp_path, embedder=HashEmbedder()) as store:
        store.as_agent("ann").log_message("hello", role="user")
        store.operator.set_private("ann")
        backend = store.backend
        assert all(index.n == 0 for index in backend._indexes.values())  # type: ignore[attr-defined]
        store.as_agent("ann").remember("one more fact", "agent")
        assert sum(index.n for index in backend._indexes.values()) == 51  # type: ignore[attr-defined]


def _restore(backup: Path, root: Path) -> None:
    """What a restore from a backup does while a process has the store open: the live file and its WAL
    are removed and the backup's file is put in their place (a new inode)."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(root / f"global.db{suffix}")
    shutil.copy(backup / "global.db", root / "global.db")


def test_a_scope_file_replaced_under_an_open_store_is_read_and_written_anew(tmp_path: Path) -> None:
    backup = SharedMemoryStore(tmp_path / "backup", embedder=HashEmbedder())
    restored = backup.operator.remember("the restored copy says the vault code is amber", "global").id
    backup.close()
    store = SharedMemoryStore(tmp_path / "live", embedder=HashEmbedder())
    try:
        lost = store.operator.remember("the live file says the vault code is crimson", "global").id
        assert [h.fact.id for h in store.operator.search("vault code crimson")][:1] == [lost]
        since = store.changes()[-1].position
        _restore(tmp_path / "backup", tmp_path / "live")
        # Reads see the file now at the path, not the deleted one this thread still had open...
        found = [h.fact.id for h in store.operator.search("vault code amber")]
        assert restored in found and lost not in found
        # ... and so does the feed: a position from the old file reads the new one from its start.
        assert [c.fact_id for c in store.changes(since=since)] == [restored]
        # A write lands in the file other processes open, not in the deleted one.
        written = store.operator.remember("after the restore the vault code is teal", "global").id
    finally:
        store.close()
    reopened = SharedMemoryStore(tmp_path / "live", embedder=HashEmbedder())
    try:
        assert reopened.operator.get(written).content == "after the restore the vault code is teal"
        assert reopened.operator.get(restored) is not None
        with pytest.raises(FactNotFoundError):
            reopened.operator.get(lost)
    finally:
        reopened.close()
