"""Opening scope files safely: connections whose storage errors name the file, read-only fallbacks, atomic
creation leftovers, and the checks that keep a foreign or newer file out."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ...core.types import NotAStoreError, ScopeRef
from ...errors import StorageError as StorageError
from ...tempfiles import building as building
from ...tempfiles import remove_stale


def is_lock_error(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


# SQLite primary result codes (extended codes start with them: SQLITE_READONLY_DIRECTORY, SQLITE_IOERR_WRITE)
# that are storage errors, with what they mean for the file and what to do; the message text is the fallback
# for errors that carry no code.
STORAGE_CODES = {
    "SQLITE_READONLY": (
        "attempt to write a readonly database",
        "is read-only",
        "make the file, its -wal and -shm files and its directory writable by this user, then retry",
    ),
    "SQLITE_FULL": (
        "database or disk is full",
        "cannot grow: the disk is full (or the file reached its size limit, or SQLite's temporary folder is full)",
        "free space on the disk that holds it (and in TMPDIR, where SQLite keeps temporary files), then retry; "
        "nothing of a failed write was stored",
    ),
    "SQLITE_CANTOPEN": (
        "unable to open database file",
        "cannot be opened",
        "check that it and its directory exist and that this user may read them (and write them, to write)",
    ),
    "SQLITE_IOERR": (
        "disk i/o error",
        "could not be read or written (I/O error)",
        "check the disk and the file system that hold it",
    ),
}


def storage_code(exc: BaseException | None) -> str | None:
    """The :data:`STORAGE_CODES` key of a SQLite error, or None."""
    if not isinstance(exc, sqlite3.Error):
        return None
    name = getattr(exc, "sqlite_errorname", None) or ""
    text = str(exc).lower()
    for code, (message, _, _) in STORAGE_CODES.items():
        if name == code or name.startswith(code + "_") or (not name and message in text):
            return code
    return None


def storage_error(exc: sqlite3.Error, path: Path, read_only: str | None = None) -> StorageError | None:
    """``exc`` as a :class:`StorageError` naming ``path``, or None when it is not a storage error (lock errors,
    SQL errors, constraint violations are left as they are). ``read_only`` says why the file was opened
    read-only, when it was."""
    code = storage_code(exc)
    if code is None:
        return None
    _, what, fix = STORAGE_CODES[code]
    if code == "SQLITE_READONLY" and read_only:
        what = f"is read-only ({read_only})"
        fix = "searches and reads work; to write, " + fix.replace(", then retry", " and reopen the store")
    return StorageError(f"{path} {what}: {exc}; {fix}", path)


class Connection(sqlite3.Connection):
    """A connection to one scope file whose storage errors name the file (:func:`storage_error`).

    ``read_only`` says why the file was opened read-only (None: read-write); ``snapshot`` is set when it was
    opened ``immutable`` (a cleanly closed WAL file in a directory where SQLite cannot create the ``-shm``):
    the file's identity, size and mtime then, so that a change by another writer reopens it."""

    path: Path = Path()
    read_only: str | None = None
    snapshot: tuple[int, int, int, int] | None = None
    identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file when it was opened

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.OperationalError as exc:
            error = storage_error(exc, self.path, self.read_only)
            if error is None:
                raise
            raise error from exc

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        try:
            return super().executemany(sql, parameters)
        except sqlite3.OperationalError as exc:
            error = storage_error(exc, self.path, self.read_only)
            if error is None:
                raise
            raise error from exc

    def refuse_writes(self) -> None:
        """Raise the :class:`StorageError` of a write to a file opened read-only."""
        if self.read_only is not None:
            raise StorageError(
                f"{self.path} is read-only ({self.read_only}): searches and reads work, writes are refused; "
                "make the file, its -wal and -shm files and its directory writable by this user, then reopen "
                "the store",
                self.path,
            )

    def replaced(self) -> bool:
        """The file at :attr:`path` is no longer the one this connection has open: it was deleted, or
        deleted and made again, or replaced by a restored copy. Reads would see the old file and writes would
        go to a file nobody else can open, so such a connection is reopened (one ``stat`` per lookup)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return True
        return self.identity is not None and (st.st_dev, st.st_ino) != self.identity

    def stale(self) -> bool:
        """An immutable snapshot of a file that another writer has changed since (or is writing now)."""
        if self.snapshot is None:
            return False
        try:
            return signature(self.path) != self.snapshot
        except OSError:
            return True


def signature(path: Path) -> tuple[int, int, int, int]:
    """The file's identity, size and mtime, and its WAL's size (-1: none): a writer changes one of them."""
    st = path.stat()
    try:
        wal = Path(f"{path}-wal").stat().st_size
    except FileNotFoundError:
        wal = -1
    return st.st_ino, st.st_size, st.st_mtime_ns, wal


def connect(
    target: str | Path, path: Path, timeout: float, read_only: str | None = None, uri: bool = False
) -> Connection:
    try:
        # The identity is read before opening: a file replaced in between is only reopened once more.
        st = os.stat(path)
        identity: tuple[int, int] | None = (st.st_dev, st.st_ino)
    except OSError:
        identity = None
    try:
        conn = sqlite3.connect(
            target, timeout=timeout, isolation_level=None, check_same_thread=False, uri=uri, factory=Connection
        )
    except sqlite3.OperationalError as exc:
        error = storage_error(exc, path, read_only)
        if error is None:
            raise
        raise error from exc
    assert isinstance(conn, Connection)
    conn.path, conn.read_only, conn.identity = path, read_only, identity
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    return conn


def read_only_reason(path: Path, otherwise: str) -> str:
    with contextlib.suppress(OSError):
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "it is on a read-only file system"
    return otherwise


def writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def connect_read_only(path: Path, timeout: float, reason: str) -> Connection:
    """``path`` opened read-only: ``mode=ro`` (which reads a live WAL through its ``-shm``), or, for a cleanly
    closed file whose ``-shm`` SQLite cannot create (a read-only directory; see "Read-Only Databases" in
    SQLite's WAL documentation), ``immutable=1``: no locks, no ``-shm``, and the connection is reopened when
    the file changes (:meth:`Connection.stale`). A WAL that still holds writes is never skipped."""
    conn = connect(f"{path.as_uri()}?mode=ro", path, timeout, reason, uri=True)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the first read opens the WAL
        return conn
    except StorageError as exc:
        conn.close()
        # SQLITE_CANTOPEN on a read-only file system, SQLITE_READONLY_DIRECTORY or _CANTINIT in a directory
        # this user may not write: SQLite cannot create the -shm
        if storage_code(exc.__cause__) not in ("SQLITE_CANTOPEN", "SQLITE_READONLY"):
            raise
        wal = Path(f"{path}-wal")
        with contextlib.suppress(FileNotFoundError):
            if wal.stat().st_size > 0:
                raise StorageError(
                    f"{path} cannot be read: its write-ahead log {wal.name} holds writes not yet copied into it, "
                    f"and SQLite cannot create {path.name}-shm to read them ({reason}); open the store once "
                    "with write access to fold the log in, or copy the directory somewhere writable",
                    path,
                ) from exc
    snapshot = signature(path)
    conn = connect(f"{path.as_uri()}?mode=ro&immutable=1", path, timeout, reason, uri=True)
    conn.snapshot = snapshot
    return conn


def remove_stale_scope_builds(root: Path) -> None:
    """Delete what processes killed while building a scope file left in ``root`` (:func:`~...tempfiles.remove_stale`:
    a build still under way is left alone). This process's own builds are never touched: opening a file this
    process has open would drop its locks on it (see :func:`check_sqlite_file`)."""
    remove_stale(root, is_scope_file_name)


def store_version(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version, read before anything in it is changed (even its journal mode): a foreign
    SQLite database is a NotAStoreError. One statement, one snapshot: another process may be committing the
    first migration."""
    version, objects = conn.execute(
        "SELECT (SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_master)"
    ).fetchone()
    if version == 0 and objects:
        raise NotAStoreError(f"{path} is a SQLite database but not a memory store; left untouched")
    return int(version)


@contextmanager
def closed_on_error(conn: sqlite3.Connection, path: Path) -> Iterator[None]:
    """Close a connection being opened if opening fails; a file that is not a database is a NotAStoreError."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        conn.close()
        if "not a database" in str(exc) or "malformed" in str(exc):
            raise NotAStoreError(f"{path} is not a SQLite database ({exc}); the file was left untouched") from exc
        raise
    except BaseException:
        conn.close()
        raise


def quote(name: str) -> str:
    """A quoted SQL identifier (column names come from the table specs, never from users)."""
    return '"' + name.replace('"', '""') + '"'


def check_sqlite_file(path: Path) -> None:
    """Refuse a directory at a scope path. A file's content is checked by SQLite itself in ``_open``: reading
    it here with ``open()`` would be unsafe, because closing ANY descriptor of a file drops every POSIX lock
    this process holds on it, SQLite's included (another process could then checkpoint and delete the WAL
    under this process's live connections: database corruption, seen in a benchmark)."""
    if path.is_dir():
        raise NotAStoreError(f"{path} is a directory, not a SQLite memory store")


_SAFE_FILE_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def owner_file_token(owner_id: str) -> str:
    """Map a validated id to a file-name token that cannot escape the root or collide.

    Lower-case ASCII ids like ``researcher`` or ``team-1`` are used verbatim. Any other id becomes a readable
    slug plus ``~`` plus 16 hex digits of its SHA-256, so ``Alice`` and ``alice`` (equal on a case-insensitive
    file system) get different files, and no verbatim token equals an encoded one (``~`` is never verbatim).
    """
    if _SAFE_FILE_ID.match(owner_id) and ".." not in owner_id:
        return owner_id
    ascii_text = unicodedata.normalize("NFKD", owner_id).encode("ascii", "ignore").decode().lower()
    slug = re.sub(r"[^a-z0-9_-]+", "-", ascii_text).strip("-")[:40] or "id"
    digest = hashlib.sha256(owner_id.encode("utf-8")).hexdigest()[:16]
    return f"{slug}~{digest}"


def scope_file_name(scope: ScopeRef) -> str:
    """The name of a scope's file in the store's directory: the one place that decides it.

    Args:
        scope: the scope.

    Returns:
        ``global.db``, ``group_<token>.db`` or ``agent_<token>.db`` (the token is the owner id itself when it
        is a safe, lowercase file name, else a slug and a hash: :func:`owner_file_token`).
    """
    if scope.kind == "global":
        return "global.db"
    return f"{scope.kind}_{owner_file_token(scope.owner)}.db"


SAVED_INDEX_SUFFIX = ".index"


def saved_index_name(scope: ScopeRef) -> str:
    """The name of the file beside a scope's file that holds its saved search index (``<scope file>.index``).

    Args:
        scope: the scope.

    Returns:
        The file name.
    """
    return scope_file_name(scope) + SAVED_INDEX_SUFFIX


def is_scope_file_name(name: str) -> bool:
    """Whether a file of the store's directory is named like a scope file (``global.db``, ``agent_*.db``,
    ``group_*.db``); what it holds decides whether it is one."""
    return name == "global.db" or (name.startswith(("agent_", "group_")) and name.endswith(".db"))


def scope_file_candidates(root: Path) -> list[Path]:
    """The files of ``root`` named like scope files (:func:`is_scope_file_name`), sorted, whether or not they
    are scope files of a store: :meth:`SQLiteBackend.scopes` lists those whose meta says so, and ``doctor`` /
    ``scopes`` report the others."""
    if not root.is_dir():
        return []
    return [p for p in sorted(root.glob("*.db")) if is_scope_file_name(p.name) and p.is_file()]
