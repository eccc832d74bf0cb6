"""``ids.db``: which agent or group file holds each fact id."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from ...core.types import ScopeKind, ScopeRef
from .files import Connection, StorageError, closed_on_error, connect


class Files(Protocol):
    """What the index uses of the SQLite backend that owns it (:class:`~.backend.SQLiteBackend`): its root, its
    per-thread connections and its locking, so that ``ids.db`` is opened, retried and closed as the scope files
    are."""

    root: Path
    busy_timeout: float
    _local: threading.local

    def _conns(self) -> dict[ScopeRef, Connection]: ...
    def _track(self, conn: Connection) -> None: ...
    def _forget_conn(self, conn: Connection) -> None: ...
    def _conn(self, scope: ScopeRef, create: bool) -> Connection | None: ...
    def _retry(self, fn: Callable[[], Any]) -> Any: ...
    def _immediate(self, conn: Connection) -> AbstractContextManager[None]: ...
    def _scope_of_file(self, path: Path) -> ScopeRef | None: ...


class IdIndex:
    """Which agent or group file holds a fact id, kept in ``ids.db`` beside the scope files: a lookup by id
    (``get``, ``forget``, ``history``) opens one file instead of every file of the id's kind.

    It holds a superset of the truth. A writer adds the ids of a batch before the transaction that stores
    them (a crash in between leaves ids that point at a file without them: a lookup just does not find them
    there) and removes the ids it did not store afterwards. A file nobody indexed (written by a release
    before the index, copied in, or an ``ids.db`` that was deleted) is indexed when a lookup misses, so the
    file may be deleted at any time. The global scope is one file and is not indexed.
    """

    FILE_NAME = "ids.db"

    def __init__(self, backend: Files) -> None:
        self.backend = backend
        self.path = backend.root / self.FILE_NAME
        self.known: set[str] = set()  # file names indexed in full (a file never leaves the index)

    def _conn(self) -> Connection:
        """This thread's connection, creating the file and its tables if needed (StorageError if it cannot).
        A connection to a file that was deleted (or replaced) since is dropped: ids written through it would go
        where no one reads them, and what the process knew was indexed is forgotten with it."""
        self.backend._conns()  # refuses a closed store; resets thread-local state after a fork
        local = self.backend._local
        conn: Connection | None = getattr(local, "ids", None)
        if conn is not None:
            if _identity(self.path) == getattr(local, "ids_identity", None):
                return conn
            local.ids = None
            self.backend._forget_conn(conn)
            self.known.clear()
        try:
            self.backend.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create {self.path}: {exc}", self.path) from exc
        conn = connect(self.path, self.path, self.backend.busy_timeout)
        with closed_on_error(conn, self.path):
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                self.backend._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute("PRAGMA synchronous = NORMAL")
            if conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'indexed_files'").fetchone()[0] == 0:
                with self.backend._immediate(conn):
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS fact_scope (id TEXT NOT NULL, kind TEXT NOT NULL, "
                        "owner TEXT NOT NULL, PRIMARY KEY (id, kind, owner)) WITHOUT ROWID"
                    )
                    conn.execute("CREATE TABLE IF NOT EXISTS indexed_files (name TEXT PRIMARY KEY) WITHOUT ROWID")
        local.ids, local.ids_identity = conn, _identity(self.path)
        self.backend._track(conn)  # closed with this thread
        return conn

    def _reader(self) -> Connection | None:
        """The connection for a lookup; None when the index cannot be used here (a read-only store without
        one): lookups then visit the files."""
        try:
            return self._conn()
        except (StorageError, sqlite3.DatabaseError):
            return None

    def add(self, scope: ScopeRef, fact_ids: Iterable[str]) -> None:
        """Record ids before the transaction that stores them in ``scope``."""
        rows = [(i, scope.kind, scope.owner) for i in fact_ids]
        if scope.kind != "global" and rows:
            conn = self._conn()
            with self.backend._immediate(conn):
                conn.executemany("INSERT OR IGNORE INTO fact_scope (id, kind, owner) VALUES (?, ?, ?)", rows)

    def discard(self, scope: ScopeRef, fact_ids: Iterable[str]) -> None:
        """Drop ids that ``scope`` did not store (merged into another fact) or no longer holds (purged)."""
        rows = [(i, scope.kind, scope.owner) for i in fact_ids]
        conn = self._reader() if rows and scope.kind != "global" else None
        if conn is not None:  # best effort: an id left behind only costs a lookup one file
            with self.backend._immediate(conn):
                conn.executemany("DELETE FROM fact_scope WHERE id = ? AND kind = ? AND owner = ?", rows)

    def mark(self, name: str) -> None:
        """Record that every id of the file ``name`` is in the index (a new file, or one just indexed)."""
        conn = self._conn()
        with self.backend._immediate(conn):
            conn.execute("INSERT OR IGNORE INTO indexed_files (name) VALUES (?)", (name,))
        self.known.add(name)

    def candidates(self, fact_id: str) -> list[ScopeRef] | None:
        """The scopes the index says may hold ``fact_id``; None when there is no usable index."""
        conn = self._reader()
        if conn is None:
            return None
        rows = conn.execute("SELECT kind, owner FROM fact_scope WHERE id = ?", (fact_id,)).fetchall()
        return [ScopeRef(kind, owner) for kind, owner in rows]

    def catch_up(self, kind: ScopeKind) -> bool:
        """Index every file of ``kind`` that is not indexed yet; True if there was one."""
        names = {p.name for p in self.backend.root.glob(f"{kind}_*.db")} - self.known
        conn = self._reader() if names else None
        if conn is None:
            return False
        self.known |= {name for (name,) in conn.execute("SELECT name FROM indexed_files")}
        missing = sorted(names - self.known)
        for name in missing:
            ref = self.backend._scope_of_file(self.backend.root / name)
            scope_conn = self.backend._conn(ref, create=False) if ref is not None else None
            if ref is None or scope_conn is None:
                continue  # not a scope file of this store
            self.add(ref, (fact_id for (fact_id,) in scope_conn.execute("SELECT id FROM facts")))
            self.mark(name)
        return bool(missing)


def _identity(path: os.PathLike[str] | str) -> tuple[int, int] | None:
    """Which file ``path`` is now (device and inode; None when there is none)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
