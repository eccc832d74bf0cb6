"""The embedded backend: one SQLite file per scope (``global.db``, ``group_<id>.db``, ``agent_<id>.db``).

Why it is built this way:

* Each fact and its float32 vector are one row, written in one transaction: a fact never exists without
  its vector or the other way round (vectors in loose files beside the database could be lost, or left
  behind, by a crash between the two writes).
* WAL + a busy timeout + ``BEGIN IMMEDIATE`` for every read-then-write; the write lock is never held while
  a model embeds (the store embeds first, then calls :meth:`SQLiteBackend.write`).
* Semantic search scans per-process int8 codes of each scope's vectors (a quarter of the bytes) with a bound
  on each product's error, re-scores the rows that can make the top from finer int8 codes (within 4e-5),
  and the few whose order is still in doubt from the file's float32 vectors: the ranking is the float32 one.
  Every write bumps a revision counter in the file and stamps the rows it touched with it, so a search
  refreshes only what changed since it last looked, whichever process wrote it.
* FTS5 (porter stemming) over the content, fed by insert/delete triggers; content is immutable (a trigger
  refuses to change it), so status changes never re-index text.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...core.records import TABLES, fts_column, table_spec
from ...core.types import (
    RUN_SESSION_PREFIX,
    Draft,
    Fact,
    Filters,
    NotAStoreError,
    Receipt,
    ScopeKind,
    ScopeRef,
    ScopeStats,
    kind_of_fact_id,
)
from ...embedding import Vectors
from ...search.index import (
    BatchInserts,
    HashKeys,
    NearestExisting,
    ScopeView,
    VectorIndex,
    VectorIndexKind,
    check_options,
    hash_key,
    hash_keys,
    rank_across,
)
from ...search.postings import ScopeTerms, query_stems, rank
from ..base import (
    DRAFT_COLUMNS,
    STORAGE_TABLES,
    Backend,
    HealthCheck,
    ModelInfo,
    OnConflict,
    RowReader,
    ScopeImport,
    ScopeTx,
    T,
    as_of_clause,
    draft_values,
    fact_from_row,
)
from ..saved_index import DEFAULT_SAVE_FROM, SavedIndexes
from .files import (
    SAVED_INDEX_SUFFIX,
    Connection,
    StorageError,
    building,
    check_sqlite_file,
    closed_on_error,
    connect,
    connect_read_only,
    is_lock_error,
    is_scope_file_name,
    quote,
    read_only_reason,
    remove_stale_scope_builds,
    saved_index_name,
    scope_file_candidates,
    scope_file_name,
    storage_code,
    store_version,
    writable,
)
from .health import check_store
from .ids import IdIndex
from .schema import FACT_COLUMNS, MIGRATIONS, SCHEMA_VERSION
from .watch import ScopeFiles

logger = logging.getLogger("autogen_shared_memory")


def fts5_expression(terms: Iterable[str]) -> str:
    """An FTS5 MATCH expression: the OR of the terms, each a quoted string literal."""
    quoted = ['"' + t.replace('"', '""') + '"' for t in terms if t]
    return " OR ".join(quoted)


_INSERT_FACT = (
    f"INSERT INTO facts ({', '.join(DRAFT_COLUMNS)}, reinforcement, version, updated_at, rev, embedding, seq) "
    f"VALUES ({', '.join('?' * len(DRAFT_COLUMNS))}, 1, 1, ?, ?, ?, ?)"
)


class _Tx:
    """A write transaction on one scope file with the scope's refreshed vector index: the
    :class:`~autogen_shared_memory.core.lifecycle.WriteTx` the lifecycle decides on."""

    def __init__(
        self, conn: sqlite3.Connection, index: VectorIndex, scope: ScopeRef, refresh: Callable[[], None]
    ) -> None:
        self.conn = conn
        self._index = index
        self._refresh: Callable[[], None] | None = refresh  # the index is brought up to date on first use
        self.scope = scope
        self.dirty = False  # facts changed: the scope's revision moves on
        self.now = time.time()
        row = conn.execute("SELECT rev, n_facts FROM state WHERE id = 1").fetchone()
        self.rev = int(row[0]) + 1
        self.n_facts = int(row[1])
        self.vectors = np.zeros((0, 0), dtype=np.float32)
        self.near: NearestExisting | None = None
        self.inserts = BatchInserts()
        self.new_facts: list[tuple[Any, ...]] = []  # rows of _INSERT_FACT, sent by send_facts()
        self.next_seq = 0  # the seq of the next new fact while new_facts holds rows
        self.new_audit: list[tuple[str, str, str, float, str]] = []  # written by finish()
        self.reload = False  # vectors replaced or imported: every process reloads its caches

    @property
    def index(self) -> VectorIndex:
        """The scope's vector index, up to date with the file (record-only transactions never load it).
        Every change to the facts reads it first: refreshed after a row changed, it would load that row twice."""
        if self._refresh is not None:
            self._refresh()
            self._refresh = None
        return self._index

    def send_facts(self) -> None:
        """Insert the buffered new facts (one ``executemany``): before any other statement of the
        transaction, so that every read sees every earlier insert."""
        if self.new_facts:
            self.conn.executemany(_INSERT_FACT, self.new_facts)
            self.new_facts.clear()

    def _exact(self, seqs: npt.NDArray[np.int64], q: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """float32 cosines with stored facts, this write's buffered ones included."""
        self.send_facts()
        return SQLiteBackend._exact(self.conn, seqs, q)

    def _facts(self, where: str, params: Sequence[Any]) -> list[Fact]:
        self.send_facts()
        rows = self.conn.execute(f"SELECT {FACT_COLUMNS} FROM facts WHERE {where} ORDER BY seq", params)
        return [fact_from_row(self.scope, row, self.now) for row in rows]

    def get(self, fact_ids: Sequence[str]) -> list[Fact]:
        if not fact_ids:
            return []
        return self._facts(f"id IN ({','.join('?' * len(fact_ids))})", list(fact_ids))

    def live_by_hash(self, content_hash: str) -> list[Fact]:
        if hash_key(content_hash) not in self.index.hashes:  # no fact of the scope has this hash
            return []
        return self._facts(
            "content_hash = ? AND status = 'active' AND (expires_at IS NULL OR expires_at > ?)",
            (content_hash, self.now),
        )

    def live_hashes(self, content_hashes: Collection[str]) -> set[str]:
        return set(content_hashes)  # live_by_hash asks the scope's index for the hash's key first

    def settle(self) -> None:
        """Add this write's inserted facts to the index (:meth:`insert` defers it): before anything reads
        the index or changes rows after an insert, and before the commit."""
        if self.inserts.pending:
            self.inserts.settle(self.index, self.vectors)

    def nearest(self, j: int, floor: float, exact_from: float) -> list[tuple[str, float]]:
        if self.near is None or len(self.near.earlier[j]):
            self.settle()  # the lookup reads the index, and the positions of this write's earlier inserts
        if self.near is None:
            self.near = NearestExisting(
                self._exact,
                self.index,
                self.vectors,
                self.now,
                floor,
                exact_from,
                self.inserts.position,
            )
        return [(self.index.ids[pos], cos) for pos, cos in self.near.lookup(j)]

    def insert(self, draft: Draft, j: int) -> None:
        """Buffer the new fact (:meth:`send_facts` inserts the batch), numbered as SQLite numbers a row:
        one above the largest ``seq`` in the table."""
        self.index  # noqa: B018 - up to date before rows change
        if not self.new_facts:
            self.next_seq = int(self.conn.execute("SELECT coalesce(max(seq), 0) FROM facts").fetchone()[0]) + 1
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        vector = np.ascontiguousarray(self.vectors[j], dtype=np.float32).tobytes()
        self.new_facts.append((*draft_values(draft), self.now, self.rev, vector, seq))
        self.inserts.add(j, seq, draft.id, draft.status == "active", draft.expires_at)
        self._index.hashes.add([hash_key(draft.content_hash)])
        self.n_facts += 1
        self.dirty = True

    def update(self, fact_id: str, changes: Mapping[str, Any]) -> None:
        self.settle()  # the fact may be one this write inserted
        self.send_facts()
        index = self.index
        names = list(changes)
        values = [json.dumps(list(v)) if isinstance(v, tuple) else v for v in changes.values()]
        row = self.conn.execute(
            f"UPDATE facts SET {', '.join(f'{quote(n)} = ?' for n in names)}, version = version + 1, "
            "updated_at = ?, rev = ? WHERE id = ? RETURNING seq, status, expires_at",
            (*values, self.now, self.rev, fact_id),
        ).fetchone()
        self.dirty = True
        pos = index.position(int(row[0])) if row is not None else None
        if pos is not None:  # keep this transaction's later lookups right
            index.set_status(pos, row[1], row[2])

    def purgeable(self) -> list[Fact]:
        return self._facts("status != 'active' OR expires_at IS NOT NULL", ())

    def delete(self, fact_ids: Sequence[str]) -> None:
        self.index  # noqa: B018 - up to date before rows change
        self.settle()
        self.send_facts()
        for lo in range(0, len(fact_ids), 500):
            chunk = list(fact_ids[lo : lo + 500])
            self.conn.execute(f"DELETE FROM facts WHERE id IN ({','.join('?' * len(chunk))})", chunk)
        self.n_facts -= len(fact_ids)
        self.reload = self.dirty = True  # rows left: reload caches

    def audit(self, fact_id: str, event: str, actor: str, detail: Mapping[str, Any]) -> None:
        self.new_audit.append((fact_id, event, actor, self.now, json.dumps(dict(detail), default=str)))

    def finish(self) -> None:
        """Write what is deferred (index rows, new facts, audit events): before the transaction commits, and
        before a row operation that may read them."""
        self.settle()
        self.send_facts()
        if self.new_audit:
            self.conn.executemany(
                "INSERT INTO audit (fact_id, event, actor, at, detail) VALUES (?, ?, ?, ?, ?)", self.new_audit
            )
            self.new_audit.clear()

    # the row operations of :class:`~autogen_shared_memory.backends.base.ScopeTx`
    def rows(
        self,
        table: str,
        where: Mapping[str, Any] | None = None,
        *,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        self.finish()
        sql, params = _where(where)
        if after_seq is not None:
            sql += " AND rowid > ?"
            params.append(after_seq)
        cur = self.conn.execute(
            f"SELECT * FROM {_table(table)} WHERE {sql} ORDER BY rowid LIMIT ?",
            [*params, -1 if limit is None else limit],
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur]

    def add_rows(self, table: str, rows: Sequence[Mapping[str, Any]], on_conflict: OnConflict = "fail") -> list[int]:
        if _table(table) == "facts":
            self.index  # noqa: B018 - up to date before rows change
        self.finish()
        seqs: list[int] = []
        for row in rows:
            values = {c: v for c, v in row.items() if c not in ("seq", "rev")}
            if table == "facts":
                values["rev"] = self.rev
            columns = list(values)
            sql = f"INTO {table} ({', '.join(quote(c) for c in columns)}) VALUES ({', '.join('?' * len(columns))})"
            if on_conflict == "update" and table != "facts":
                key = ("key",) if table == "meta" else table_spec(table).key
                updates = [c for c in columns if c not in key]
                action = (
                    f"UPDATE SET {', '.join(f'{quote(c)} = excluded.{quote(c)}' for c in updates)}"
                    if updates
                    else "NOTHING"
                )
                sql = f"INSERT {sql} ON CONFLICT ({', '.join(quote(c) for c in key)}) DO {action}"
            else:
                sql = f"INSERT {'OR IGNORE ' if on_conflict != 'fail' else ''}{sql}"
            cur = self.conn.execute(sql, list(values.values()))
            if cur.rowcount > 0:
                seqs.append(int(cur.lastrowid or 0) if table != "meta" else 0)
                if table == "facts":
                    self.n_facts += 1
                    self.reload = self.dirty = True  # vectors came in: every cache reloads
        return seqs

    def update_rows(self, table: str, where: Mapping[str, Any], values: Mapping[str, Any]) -> int:
        table_spec(table).check_mutable()
        self.finish()
        sql, params = _where(where)
        sets = ", ".join(f"{quote(c)} = ?" for c in values)
        return int(self.conn.execute(f"UPDATE {table} SET {sets} WHERE {sql}", [*values.values(), *params]).rowcount)

    def delete_rows(
        self, table: str, where: Mapping[str, Any] | None = None, before: float | None = None, time_column: str = ""
    ) -> int:
        self.finish()
        sql, params = _where(where)
        if before is not None:
            sql += f" AND {quote(time_column)} < ?"
            params.append(before)
        guarded = table in TABLES and table_spec(table).append_only
        if guarded:  # the explicit, operator-only purge: lift the guard inside this transaction
            self.conn.execute(f"DROP TRIGGER {table}_no_delete")
        count = self.conn.execute(f"DELETE FROM {_table(table)} WHERE {sql}", params).rowcount
        if guarded:
            self.conn.execute(
                f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} BEGIN "
                f"SELECT RAISE(ABORT, '{table} is append-only: DELETE is not allowed'); END"
            )
        return int(count)

    def set_vectors(self, fact_ids: Sequence[str], vectors: Vectors) -> None:
        self.index  # noqa: B018 - up to date before rows change
        self.settle()
        self.send_facts()
        self.conn.executemany(
            "UPDATE facts SET embedding = ?, rev = ? WHERE id = ?",
            [
                (np.ascontiguousarray(v, np.float32).tobytes(), self.rev, i)
                for i, v in zip(fact_ids, vectors, strict=True)
            ],
        )
        self.reload = self.dirty = True


def _mode_of_scope_file(saved_index: Path) -> int:
    """The permission bits of the scope file a saved index is beside: the index holds its ids and words."""
    return saved_index.with_name(saved_index.name.removesuffix(SAVED_INDEX_SUFFIX)).stat().st_mode & 0o666


def _id_at(conn: sqlite3.Connection, seq: int) -> str | None:
    """The id of the fact at ``seq`` in a file, or None."""
    row = conn.execute("SELECT id FROM facts WHERE seq = ?", (seq,)).fetchone()
    return None if row is None else str(row[0])


def _texts(conn: sqlite3.Connection, seqs: npt.NDArray[np.int64]) -> dict[int, str]:
    """The content of the facts ``seqs`` (ascending) of a file, by seq, for its postings."""
    rows = conn.execute("SELECT seq, content FROM facts WHERE seq BETWEEN ? AND ?", (int(seqs[0]), int(seqs[-1])))
    return dict(rows.fetchall())


class _ThreadConnections:
    """The connections one thread opened to a store's files (scope files and ``ids.db``), kept in the store's
    thread-local storage. CPython frees a thread's thread-local values when the thread ends, and this closes
    its connections then: a thread per call (a thread pool that replaces its workers, ``asyncio.run`` per call
    with its fresh executor) would otherwise leave two file descriptors per file (the database and its WAL) open
    with every thread, until the process can open no file at all."""

    def __init__(self, registry: dict[Connection, None]) -> None:
        self.scopes: dict[ScopeRef, Connection] = {}  # most recently used last
        self.opened: dict[Connection, None] = {}  # all of them, ``scopes``' included
        self.registry = registry  # the store's every open connection, which ``close()`` closes

    def close(self) -> None:
        """Close the thread's connections; called by the thread itself, or when it has ended."""
        for conn in list(self.opened):
            self.registry.pop(conn, None)  # one dict operation: atomic, no lock (see __del__)
            with contextlib.suppress(Exception):  # closing is best effort, and may run as the interpreter exits
                conn.close()
        self.opened.clear()
        self.scopes.clear()

    def __del__(self) -> None:
        # Runs in the ending thread, or wherever the store's thread-local storage is dropped: never takes a
        # lock, which the thread that drops it may hold.
        self.close()


def _table(name: str) -> str:
    """A table name a transaction may touch (never built from anything else)."""
    if name not in STORAGE_TABLES and name not in TABLES:
        raise ValueError(f"no table {name!r}")
    return name


def _where(where: Mapping[str, Any] | None, prefix: str = "") -> tuple[str, list[Any]]:
    """An SQL condition for equality filters (``None`` matches NULL) on the columns of ``prefix``'s table."""
    items = (where or {}).items()
    clauses = [f"{prefix}{quote(c)} = ?" if v is not None else f"{prefix}{quote(c)} IS NULL" for c, v in items]
    return " AND ".join(clauses) or "1", [v for _, v in items if v is not None]


class SQLiteBackend(Backend):
    """Facts in SQLite files under ``root``; safe for many threads and processes at once.

    Args:
        root: the folder of the scope files (created on the first write).
        busy_timeout: seconds a statement waits for another connection's write lock.
        max_common_term_ratio, max_lexical_postings: the lexical leg's budget: query terms are ranked rarest
            first while their posting lists hold at most ``max_lexical_postings`` rows (terms in more than
            ``max_common_term_ratio`` of a scope's facts are dropped; the rarest term is kept).
        vector_index, ann_min_facts, ann_ef: ``"int4"`` (the default) scans each scope's in-memory int8
            codes, a scope of 262,144 facts or more first by 4-bit codes that choose the rows re-scored
            (built in the background on its first search; docs/concepts.md); ``"exact"`` always scans the
            int8 codes; ``"hnsw"`` answers scopes of ``ann_min_facts`` facts or more from an HNSW graph
            (hnswlib, ``ann_ef`` its search width).
        read_only: open every file read-only and refuse every write.
        save_index_from: a scope of this many facts or more has its search index saved beside its file;
            None: never saved.

    Raises:
        ValueError: an option out of range.
        ImportError: ``vector_index="hnsw"`` without hnswlib.
    """

    # Connections (two file handles each, with the WAL) kept open per thread, closed when the thread ends: a
    # deployment with hundreds of group files, or a lookup of an invented id that visits every file, must not
    # exhaust file descriptors.
    MAX_OPEN_SCOPES = 64

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        max_common_term_ratio: float = 0.1,
        max_lexical_postings: int = 5_000,
        vector_index: VectorIndexKind = "int4",
        ann_min_facts: int = 20_000,
        ann_ef: int = 128,
        read_only: bool = False,
        save_index_from: int | None = DEFAULT_SAVE_FROM,
    ) -> None:
        check_options(
            vector_index,
            max_lexical_postings=max_lexical_postings,
            ann_min_facts=ann_min_facts,
            ann_ef=ann_ef,
            **({} if save_index_from is None else {"save_index_from": save_index_from}),
        )
        if not 0 < max_common_term_ratio <= 1:
            raise ValueError(f"max_common_term_ratio must be in (0, 1], got {max_common_term_ratio!r}")
        self.vector_index = vector_index
        self.ann_min_facts = ann_min_facts
        self.ann_ef = ann_ef
        # A scope of this many facts or more has its search index saved beside its file (``<file>.index``),
        # and saved again when it holds a quarter more: a new process maps it instead of reading every vector
        # and indexing every text (search/saved.py). None: never saved (a saved file is still read).
        self.save_index_from = save_index_from
        self.root = Path(root).expanduser().absolute()
        self.busy_timeout = busy_timeout
        self.max_common_term_ratio = max_common_term_ratio
        self.max_lexical_postings = max_lexical_postings
        self._local = threading.local()  # .held: this thread's _ThreadConnections; .ids: its ids.db connection
        self._all_conns: dict[Connection, None] = {}  # every thread's open connections
        self._indexes: dict[ScopeRef, VectorIndex] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False
        self._ids = IdIndex(self)
        # read_only: every file is opened mode=ro (no migration, no checkpoint on close), no scope file or ids.db
        # is created or changed, and every write is refused (an inspector browsing a live store)
        self.read_only = bool(read_only)
        self._saved = SavedIndexes(save_index_from, writable=not self.read_only, mode=_mode_of_scope_file)
        if not self.read_only:
            remove_stale_scope_builds(self.root)  # what processes killed while creating a scope file left

    # ------------------------------------------------------------------ files and connections
    def path_of(self, scope: ScopeRef) -> Path:
        return self.root / scope_file_name(scope)

    def _held(self) -> _ThreadConnections:
        """The calling thread's connections (RuntimeError once the store is closed)."""
        if self._closed:
            raise RuntimeError("the memory store is closed")
        if os.getpid() != self._pid:  # forked: never share SQLite connections across processes
            self._pid = os.getpid()
            self._local = threading.local()
            self._all_conns = {}
            self._indexes = {}
        held: _ThreadConnections | None = getattr(self._local, "held", None)
        if held is None:
            held = self._local.held = _ThreadConnections(self._all_conns)
        return held

    def _conns(self) -> dict[ScopeRef, Connection]:
        """The calling thread's connections to scope files, by scope, the most recently used last."""
        return self._held().scopes

    def _track(self, conn: Connection) -> None:
        """Keep a connection the calling thread opened: closed with the thread, or by ``close()``."""
        self._held().opened[conn] = None
        with self._lock:
            self._all_conns[conn] = None

    def _conn(self, scope: ScopeRef, create: bool) -> Connection | None:
        if self._closed:
            raise RuntimeError("the memory store is closed")
        conns = self._conns()
        path = self.path_of(scope)
        conn = conns.pop(scope, None)
        if conn is not None:
            # A file deleted or replaced since it was opened, an immutable snapshot that another writer
            # changed, or a read-only file a write finds writable again, is reopened; any other connection is
            # kept.
            replaced = conn.replaced()
            if not (replaced or conn.stale() or (create and conn.read_only is not None and writable(path))):
                conns[scope] = conn  # most recently used last
                return conn
            self._forget_conn(conn)
            if replaced:  # the vectors and postings held for the old file say nothing of the new one
                with self._lock:
                    self._indexes.pop(scope, None)
        if not path.exists():
            if not create:
                return None
            if self.read_only:
                raise StorageError(f"cannot create {path}: the store was opened read-only", path)
            self._create_file(path, scope)
        check_sqlite_file(path)
        conn = self._open(path, scope)
        conns[scope] = conn
        self._track(conn)
        while len(conns) > self.MAX_OPEN_SCOPES:  # bound this thread's file handles: close the least used
            idle = conns.pop(next(iter(conns)))
            self._forget_conn(idle)  # SQLite keeps its locks on a file while another connection of ours has it open
        return conn

    def _forget_conn(self, conn: Connection) -> None:
        """Close a connection the calling thread opened."""
        held: _ThreadConnections | None = getattr(self._local, "held", None)
        if held is not None:
            held.opened.pop(conn, None)
        with self._lock:
            self._all_conns.pop(conn, None)
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    def _create_file(self, path: Path, scope: ScopeRef) -> None:
        """Build a new scope file under a temporary name (WAL on, schema in place), then publish it with
        an atomic hard link: concurrent processes never see (or race to initialise) a half-made file."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create {path}: its directory {self.root} cannot be made ({exc}); create it, writable by "
                "this user, or open the store where it can",
                path,
            ) from exc
        remove_stale_scope_builds(self.root)
        try:
            with building(path) as tmp:
                conn = connect(tmp, tmp, self.busy_timeout)
                try:
                    conn.execute("PRAGMA journal_mode = WAL")
                    self._migrate(conn, scope)
                finally:
                    conn.close()  # checkpoints: the file alone holds everything
                if scope.kind != "global":
                    self._ids.mark(path.name)  # it holds no fact yet; every writer indexes what it adds
                try:
                    with contextlib.suppress(FileExistsError):  # another thread or process published it first
                        os.link(tmp, path)
                except OSError:  # pragma: no cover - file systems without hard links
                    if not path.exists():
                        os.replace(tmp, path)
        except StorageError as exc:
            if os.access(self.root, os.W_OK):
                raise StorageError(f"cannot create {path}: {exc}", path) from exc.__cause__
            why = "on a read-only file system" if read_only_reason(self.root, "") else "read-only for this user"
            raise StorageError(
                f"cannot create {path}: the directory {self.root} is {why} ({exc.__cause__ or exc}); make it "
                "writable by this user to write to this scope (the store's existing files can still be searched)",
                path,
            ) from exc.__cause__

    def _open(self, path: Path, scope: ScopeRef) -> Connection:
        """``path`` opened read-write, or read-only when this process cannot write it (a read-only file,
        directory or file system): searches and reads then work and every write is refused with a
        :class:`StorageError` that says so."""
        if self.read_only:
            return self._open_read_only(path, scope, "the store was opened read-only")
        if not os.access(path, os.W_OK):
            return self._open_read_only(path, scope, read_only_reason(path, "the file is not writable by this user"))
        try:
            return self._open_read_write(path, scope)
        except StorageError as exc:
            if storage_code(exc.__cause__) not in ("SQLITE_CANTOPEN", "SQLITE_READONLY"):
                raise
            if not os.access(path.parent, os.W_OK):
                reason = f"its directory is not writable by this user, and SQLite needs to create {path.name}-shm"
            else:
                reason = f"SQLite could not open it for writing: {exc.__cause__}"
            reason = read_only_reason(path, reason)
            return self._open_read_only(path, scope, reason)

    def _open_read_only(self, path: Path, scope: ScopeRef, reason: str) -> Connection:
        conn = connect_read_only(path, self.busy_timeout, reason)
        with closed_on_error(conn, path):
            if store_version(conn, path) != SCHEMA_VERSION:
                self._migrate(conn, scope)  # newer: NotAStoreError; older or empty: needs writing
        return conn

    def _open_read_write(self, path: Path, scope: ScopeRef) -> Connection:
        conn = connect(path, path, self.busy_timeout)
        with closed_on_error(conn, path):
            store_version(conn, path)
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":  # persistent once set
                self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate(conn, scope)
        return conn

    def _retry(self, fn: Any) -> Any:
        """Run ``fn``, retrying SQLITE_BUSY/LOCKED with jittered backoff until the busy timeout is spent."""
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.005
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not is_lock_error(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.25)

    def _migrate(self, conn: Connection, scope: ScopeRef) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise NotAStoreError(
                f"{self.path_of(scope)} has schema version {version}, newer than this package supports "
                f"({SCHEMA_VERSION}); upgrade autogen-shared-memory"
            )
        if conn.read_only is not None:
            raise StorageError(
                f"{conn.path} has schema version {version} and must be upgraded to {SCHEMA_VERSION} before this "
                f"version can read it, but it is read-only ({conn.read_only}); open the store once with write "
                "access, or with the autogen-shared-memory version that wrote it",
                conn.path,
            )
        with self._immediate(conn):
            version, objects = conn.execute(  # another process may have won the race
                "SELECT (SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_master)"
            ).fetchone()
            if version == 0 and objects:
                raise NotAStoreError(f"{self.path_of(scope)} is a SQLite database but not a memory store")
            for step in range(version, SCHEMA_VERSION):
                MIGRATIONS[step](conn)
            if version == 0:
                conn.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [("scope_kind", scope.kind), ("scope_owner", scope.owner)],
                )
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _immediate(self, conn: Connection) -> Iterator[None]:
        conn.refuse_writes()
        self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
        try:
            yield
            self._retry(lambda: conn.execute("COMMIT"))
        except BaseException:
            # SQLITE_FULL (and some I/O errors) roll the transaction back themselves: a second ROLLBACK would
            # replace the error that says why with "no transaction is active".
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise

    def _index(self, scope: ScopeRef) -> VectorIndex:
        with self._lock:
            index = self._indexes.get(scope)
            if index is None:
                index = self._indexes[scope] = VectorIndex()
                index.home = self.path_of(scope).with_name(saved_index_name(scope))
            return index

    def _refresh(self, conn: sqlite3.Connection, index: VectorIndex) -> None:
        """Bring the scope's vector index up to date with the file (caller holds ``index.lock``)."""
        rev, epoch = conn.execute("SELECT rev, epoch FROM state WHERE id = 1").fetchone()
        if epoch != index.epoch:
            index.reset()
            index.epoch = epoch
        if rev == index.rev:
            return
        if index.rev < 0 and index.home is not None:  # a fresh index: map the saved one if it is this file's
            self._saved.map(index, epoch, rev, functools.partial(_id_at, conn))
            if rev == index.rev:
                return
        last_seq = int(index.seq[index.n - 1]) if index.n else 0
        # New rows carry their vector; known rows only need their status (and a vector when re-embedded).
        # (A re-embed or purge bumps the epoch instead, which reloads everything.)
        if index.n == 0:  # first load: one scan in rowid (= seq) order, no index lookups, no sort
            rows = conn.execute(
                "SELECT seq, id, status, expires_at, embedding, content_hash FROM facts ORDER BY seq"
            ).fetchall()
            index.hashes = HashKeys(np.sort(hash_keys([r[5] for r in rows])))
        else:  # through the rev index, sorted here: SQLite would sort the vectors in a file in TMPDIR
            rows = conn.execute(
                "SELECT seq, id, status, expires_at, CASE WHEN seq > ? THEN embedding END, "
                "CASE WHEN seq > ? THEN content_hash END FROM facts WHERE rev > ?",
                (last_seq, last_seq, index.rev),
            ).fetchall()
            rows.sort(key=lambda row: row[0])
            index.hashes.add(hash_key(r[5]) for r in rows if r[5] is not None)
        index.apply(rows)
        index.rev = rev

    @contextmanager
    def _write(self, scope: ScopeRef) -> Iterator[_Tx]:
        conn = self._conn(scope, create=True)
        assert conn is not None
        index = self._index(scope)
        with index.lock:
            try:
                with self._immediate(conn):
                    tx = _Tx(conn, index, scope, lambda: self._refresh(conn, index))
                    yield tx
                    tx.finish()
                    if tx.dirty:
                        conn.execute(
                            "UPDATE state SET rev = ?, n_facts = ?, last_write = ?, epoch = epoch + ? WHERE id = 1",
                            (tx.rev, tx.n_facts, tx.now, int(tx.reload)),
                        )
            except BaseException:
                index.reset()  # it may hold rows of the rolled-back transaction
                raise
        # index.rev stays at its pre-transaction value: the next refresh re-reads just this
        # transaction's rows, which settles every field the transaction changed.
        self._saved.save_later(index)

    # ------------------------------------------------------------------ writes
    def transact(self, scope: ScopeRef, fn: Callable[[ScopeTx], T], event: str = "write") -> T:
        with self._write(scope) as tx:
            return fn(tx)

    def write(
        self,
        scope: ScopeRef,
        drafts: Sequence[Draft],
        vectors: Vectors,
        model: ModelInfo,
        near_duplicate_threshold: float,
        similar_threshold: float,
        check: Callable[[ScopeTx], None] | None = None,
    ) -> list[Receipt]:
        conn = self._conn(scope, create=True)
        assert conn is not None
        conn.refuse_writes()  # a read-only scope file says so itself, before the index is touched
        self._ids.add(scope, (d.id for d in drafts))  # before the transaction that stores them
        receipts = super().write(scope, drafts, vectors, model, near_duplicate_threshold, similar_threshold, check)
        self._ids.discard(scope, {d.id for d in drafts} - {r.id for r in receipts})
        return receipts

    def purge(self, scope: ScopeRef, before: float, actor: str) -> list[str]:
        purged = super().purge(scope, before, actor)
        self._ids.discard(scope, purged)
        return purged

    # ------------------------------------------------------------------ reads
    def get(self, scope: ScopeRef, fact_ids: Sequence[str]) -> list[Fact]:
        conn = self._conn(scope, create=False)
        if conn is None or not fact_ids:
            return []
        marks = ",".join("?" * len(fact_ids))
        rows = conn.execute(f"SELECT {FACT_COLUMNS} FROM facts WHERE id IN ({marks})", list(fact_ids))
        now = time.time()
        by_id = {row[1]: fact_from_row(scope, row, now) for row in rows}
        return [by_id[i] for i in fact_ids if i in by_id]

    def find(self, fact_id: str) -> Fact | None:
        kind = kind_of_fact_id(fact_id)
        if kind == "global":
            return next(iter(self.get(ScopeRef("global", ""), [fact_id])), None)
        if self.read_only:  # ids.db is written by a lookup that misses: visit the files instead
            return super().find(fact_id)
        for attempt in range(2):
            refs = self._ids.candidates(fact_id)
            if refs is None:
                return super().find(fact_id)  # no usable index (a read-only store): visit the files
            for ref in refs:
                found = self.get(ref, [fact_id])
                if found:
                    return found[0]
            try:
                if attempt or not self._ids.catch_up(kind):
                    return None
            except StorageError:
                return super().find(fact_id)
        return None

    def _filter_sql(self, filters: Filters, now: float) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if filters.as_of is not None:
            clauses.append(as_of_clause("f.", "?", "SELECT 1 FROM audit a WHERE a.fact_id = f.id"))
            params.extend([filters.as_of] * 4)
        elif not filters.include_inactive:
            clauses.append("f.status = 'active' AND (f.expires_at IS NULL OR f.expires_at > ?)")
            params.append(now)
        for tag in filters.tags:
            clauses.append("EXISTS (SELECT 1 FROM json_each(f.tags) WHERE value = ?)")
            params.append(tag)
        if filters.created_by:
            clauses.append(f"f.created_by IN ({','.join('?' * len(filters.created_by))})")
            params.extend(filters.created_by)
        if filters.category is not None:
            clauses.append("f.category = ?")
            params.append(filters.category)
        if filters.since is not None:
            clauses.append("f.created_at >= ?")
            params.append(filters.since)
        if filters.until is not None:
            clauses.append("f.created_at < ?")
            params.append(filters.until)
        if filters.min_confidence is not None:
            clauses.append("f.confidence >= ?")
            params.append(filters.min_confidence)
        return (" AND ".join(clauses) or "1"), params

    def select_ids(self, scope: ScopeRef, filters: Filters, limit: int) -> list[str]:
        conn = self._conn(scope, create=False)
        if conn is None:
            return []
        where, params = self._filter_sql(filters, time.time())
        sql = f"SELECT f.id FROM facts f WHERE {where} ORDER BY f.seq LIMIT ?"
        return [r[0] for r in conn.execute(sql, [*params, limit])]

    def lexical(
        self, scopes: Sequence[ScopeRef], terms: Sequence[str], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        """FTS5's BM25, computed in this process over each scope's postings, kept beside its vectors and
        refreshed with them (:func:`~autogen_shared_memory.search.postings.rank`, shared with PostgreSQL): the
        scores ``bm25()`` gives on the file's FTS5 table, with the IDF of all the searched files together.

        Measured at 100k facts (docs/benchmarks-archive.md, "SQLite's lexical leg in process"): FTS5's own query took
        p50 3.6 / p95 8.0 ms, the postings 0.44 / 0.67 ms. The status rule comes from the in-memory copy, as
        for the semantic leg; narrowing filters are checked in SQL for the scored facts only.
        """
        stems = query_stems(terms)
        if not stems:
            return []
        now = time.time()
        everything = filters.include_inactive or filters.as_of is not None  # no status rule from memory
        found, conns = [], {}
        for scope in scopes:
            conn = self._conn(scope, create=False)
            if conn is None:
                continue
            index = self._index(scope)
            with index.lock:
                self._refresh(conn, index)
                terms_of = index.terms(scope, stems, now, everything, functools.partial(_texts, conn))
            self._saved.save_later(index)
            if terms_of is not None:
                found.append(terms_of)
                conns[scope] = conn
        where, params = self._filter_sql(filters, now)

        def allowed(f: ScopeTerms, positions: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
            """The facts at ``positions`` that pass ``filters`` (SQLite decides), as a mask over all."""
            passed = [
                r[0]
                for r in conns[f.scope].execute(
                    f"SELECT f.seq FROM facts f WHERE f.seq IN (SELECT value FROM json_each(?)) AND {where}",
                    [json.dumps(f.seqs[positions].tolist()), *params],
                )
            ]
            mask = np.zeros(len(f.seqs), dtype=bool)
            mask[positions[np.isin(f.seqs[positions], passed)]] = True
            return mask

        return rank(
            found,
            stems,
            limit,
            common_ratio=self.max_common_term_ratio,
            budget=self.max_lexical_postings,
            allowed=allowed if filters.narrows else None,
        )

    def semantic(
        self, scopes: Sequence[ScopeRef], vector: Vectors, limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        """The ``limit`` live facts of all ``scopes`` nearest to ``vector``, ranked by float32 cosine: each
        scope's refreshed codes (or its HNSW graph's candidates) ranked together by
        :func:`~autogen_shared_memory.search.index.rank_across`, doubtful rows re-scored from the file's float32
        vectors. A cosine is the float32 one or within its row's bound of it (under 4e-5 for MiniLM)."""
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        now = time.time()
        views = [v for v in (self._semantic_view(s, q, limit, filters, now) for s in scopes) if v is not None]

        def exact(asked: Sequence[tuple[ScopeView, npt.NDArray[np.int64]]]) -> list[npt.NDArray[np.float32]]:
            out = []
            for view, seqs in asked:
                ids = [view.ids[int(i)] for i in np.searchsorted(view.seqs, seqs)]  # the view's rows: in seq order
                out.append(self._exact(view.source, seqs, q, ids))
            return out

        return rank_across(views, q, limit, exact)

    def _semantic_view(
        self, scope: ScopeRef, q: npt.NDArray[np.float32], limit: int, filters: Filters, now: float
    ) -> ScopeView | None:
        """One scope's refreshed vectors and live mask, with the HNSW graph's candidates when it has one."""
        conn = self._conn(scope, create=False)
        if conn is None:
            return None
        index = self._index(scope)
        with index.lock:
            self._refresh(conn, index)
            view = index.view(
                scope, q, limit, filters, now, (self.vector_index, self.ann_min_facts, self.ann_ef), source=conn
            )
        self._saved.save_later(index)
        if view is None:
            return None
        if filters.narrows:
            where, params = self._filter_sql(filters, now)
            allowed = np.fromiter(
                (r[0] for r in conn.execute(f"SELECT seq FROM facts f WHERE {where}", params)), dtype=np.int64
            )
            view.mask &= np.isin(view.seqs, allowed, assume_unique=True)
        return view

    @staticmethod
    def _exact(
        conn: sqlite3.Connection,
        seqs: npt.NDArray[np.int64],
        q: npt.NDArray[np.float32],
        ids: Sequence[str] | None = None,
    ) -> npt.NDArray[np.float32]:
        """float32 cosines of ``q`` with the facts ``seqs``, from the vectors stored in the file (the
        in-memory codes rebuild them only to within 4e-5); a fact no longer in the file (purged meanwhile)
        scores -inf, and so does a row whose id is not ``ids``' (a purge lets a new fact reuse a ``seq``)."""
        out = np.full(len(seqs), -np.inf, dtype=np.float32)
        where = {int(s): i for i, s in enumerate(seqs)}
        for lo in range(0, len(seqs), 500):
            chunk = [int(s) for s in seqs[lo : lo + 500]]
            rows = [
                (where[seq], blob)
                for seq, fact_id, blob in conn.execute(
                    f"SELECT seq, id, embedding FROM facts WHERE seq IN ({','.join('?' * len(chunk))})", chunk
                )
                if blob is not None and len(blob) == 4 * q.shape[0] and (ids is None or ids[where[seq]] == fact_id)
            ]
            if rows:
                vectors = np.frombuffer(b"".join(blob for _, blob in rows), dtype=np.float32).reshape(len(rows), -1)
                out[[i for i, _ in rows]] = np.einsum("ij,j->i", vectors, q)  # no BLAS threads for a few rows
        return out

    def build_ann(self, scope: ScopeRef) -> bool:
        """Build the scope's approximate index now, in this thread (e.g. at start-up, before the first search;
        searches go on meanwhile, exactly): its HNSW graph (``vector_index='hnsw'``) or its 4-bit first pass
        (``'int4'``, scopes of 262,144 facts or more). Returns False when there is nothing to build
        (``vector_index='exact'``, or a scope too small)."""
        conn = self._conn(scope, create=False)
        if conn is None:
            return False
        index = self._index(scope)
        return index.build_graph(self.vector_index, self.ann_min_facts, self.ann_ef, lambda: self._refresh(conn, index))

    def neighbours(self, scope: ScopeRef, fact_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        conn = self._conn(scope, create=False)
        if conn is None or not fact_ids:
            return {}
        live = "{a}.status = 'active' AND ({a}.expires_at IS NULL OR {a}.expires_at > ?)"
        sql = (
            f"SELECT f.id, (SELECT p.id FROM facts p WHERE p.session_id = f.session_id AND p.seq < f.seq AND "
            f"{live.format(a='p')} ORDER BY p.seq DESC LIMIT 1), (SELECT n.id FROM facts n WHERE n.session_id = "
            f"f.session_id AND n.seq > f.seq AND {live.format(a='n')} ORDER BY n.seq LIMIT 1) "
            f"FROM facts f WHERE f.id IN ({','.join('?' * len(fact_ids))}) AND f.session_id IS NOT NULL "
            "AND substr(f.session_id, 1, ?) != ?"  # a store run's session: no order to lend credit along
        )
        now = time.time()
        run = [len(RUN_SESSION_PREFIX), RUN_SESSION_PREFIX]
        return {r[0]: (r[1], r[2]) for r in conn.execute(sql, [now, now, *fact_ids, *run])}

    def stats(self, scope: ScopeRef) -> ScopeStats:
        conn = self._conn(scope, create=False)
        counts = dict.fromkeys(("active", "forgotten", "superseded", "expired"), 0)
        if conn is None:
            return ScopeStats(scope, counts, 0, None, None, None, 0)
        for status, count in conn.execute(
            "SELECT CASE WHEN status = 'active' AND expires_at IS NOT NULL AND expires_at <= ? "
            "THEN 'expired' ELSE status END AS s, count(*) FROM facts GROUP BY s",
            (time.time(),),
        ):
            counts[status] = count
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        path = self.path_of(scope)
        size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
        last_write = conn.execute("SELECT last_write FROM state WHERE id = 1").fetchone()[0]
        dim = meta.get("embedding_dim")
        return ScopeStats(
            scope,
            counts,
            size,
            meta.get("embedding_model"),
            int(dim) if dim else None,
            last_write,
            conn.execute("PRAGMA user_version").fetchone()[0],
        )

    def exists(self, scope: ScopeRef) -> bool:
        return scope in self._conns() or self.path_of(scope).is_file()

    def scopes(self, kind: ScopeKind | None = None) -> list[ScopeRef]:
        found = [self._scope_of_file(path) for path in scope_file_candidates(self.root)]
        return [ref for ref in found if ref is not None and (kind is None or ref.kind == kind)]

    def _scope_of_file(self, path: Path) -> ScopeRef | None:
        """The scope a file of the root holds, read from its meta; None for a file that is not a scope file
        of this store (a stray file never fails a listing). A file SQLite cannot read raises
        :class:`StorageError`: skipping it would pass the scope off as empty."""
        try:
            ro = connect_read_only(path, self.busy_timeout, "listing the store's scopes")
            try:
                meta = dict(ro.execute("SELECT key, value FROM meta WHERE key IN ('scope_kind', 'scope_owner')"))
            finally:
                ro.close()
        except sqlite3.DatabaseError:
            return None
        if meta.get("scope_kind") not in ("agent", "group", "global"):
            return None
        try:
            ref = ScopeRef(meta["scope_kind"], meta.get("scope_owner", ""))
        except ValueError:  # an owner no scope of this store can have: not one of its files
            return None
        return ref if scope_file_name(ref) == path.name else None

    # ------------------------------------------------------------------ rows
    def rows(
        self,
        scope: ScopeRef,
        table: str,
        where: Mapping[str, Any] | None = None,
        *,
        limit: int | None = None,
        offset: int = 0,
        after_seq: int | None = None,
        query_terms: Sequence[str] = (),
        oldest_first: bool = True,
    ) -> list[dict[str, Any]]:
        _table(table)
        if query_terms:
            fts_column(table)  # a record table with a full-text index
        conn = self._conn(scope, create=False)
        if conn is None:
            return []
        return self._select(conn, table, where, limit, offset, after_seq, query_terms, oldest_first)

    @contextmanager
    def snapshot(self, scope: ScopeRef) -> Iterator[RowReader]:
        """A deferred ``BEGIN`` on a connection of its own (never the thread's, which its writes use), with a
        first read inside it: WAL keeps that read's snapshot for every read until the ``COMMIT`` on exit."""
        path = self.path_of(scope)
        conn = self._open(path, scope) if path.exists() else None
        try:
            if conn is not None:
                self._retry(lambda: conn.execute("BEGIN").execute("SELECT count(*) FROM meta").fetchone())

            def read(table: str, where: Mapping[str, Any] | None = None, **options: Any) -> list[dict[str, Any]]:
                _table(table)
                if options.get("query_terms"):
                    fts_column(table)
                return [] if conn is None else self._select(conn, table, where, **options)

            yield read
        finally:
            if conn is not None:
                conn.close()  # ends the read transaction

    @staticmethod
    def _select(
        conn: sqlite3.Connection,
        table: str,
        where: Mapping[str, Any] | None,
        limit: int | None = None,
        offset: int = 0,
        after_seq: int | None = None,
        query_terms: Sequence[str] = (),
        oldest_first: bool = True,
    ) -> list[dict[str, Any]]:
        """The rows :meth:`rows` reads, on ``conn``."""
        sql, params = _where(where, "r.")
        clauses = [sql]
        if table == "meta":
            columns, order = "r.key, r.value", "r.key"
        else:
            columns = "r.*" if table != "facts" else f"r.{FACT_COLUMNS.replace(', ', ', r.')}, r.embedding"
            order = "r.seq ASC" if oldest_first else "r.seq DESC"
            if after_seq is not None:
                clauses.append("r.seq > ?")
                params.append(after_seq)
        source = f"{table} r"
        if query_terms:
            source = f"{table}_fts JOIN {table} r ON r.seq = {table}_fts.rowid"
            clauses.insert(0, f"{table}_fts MATCH ?")
            params.insert(0, fts5_expression(query_terms))
            order = f"{table}_fts.rank"
        cur = conn.execute(
            f"SELECT {columns} FROM {source} WHERE {' AND '.join(clauses)} ORDER BY {order} LIMIT ? OFFSET ?",
            [*params, -1 if limit is None else limit, offset],
        )
        names = [d[0] for d in cur.description]
        found = [dict(zip(names, row, strict=True)) for row in cur]
        for row in found:
            row.pop("rev", None)  # the file's change counter is not a column of the contract
        return found

    # ------------------------------------------------------------------ transfer
    def import_scope(
        self, scope: ScopeRef, items: Sequence[tuple[str, dict[str, Any]]], policy: bool = False
    ) -> ScopeImport:
        self._ids.add(scope, (row["id"] for table, row in items if table == "facts"))
        return super().import_scope(scope, items, policy)

    def health(self, model: ModelInfo | None = None) -> list[HealthCheck]:
        """The store directory and every file named like a scope file, each opened read-only
        (:func:`~.health.check_store`: whether it is a store of its scope, permissions, WAL, schema version,
        ``quick_check``, model)."""
        return check_store(self.root, model)

    def scope_location(self, scope: ScopeRef) -> str:
        return scope_file_name(scope)

    def stray_locations(self, listed: Collection[ScopeRef]) -> list[str]:
        names = {scope_file_name(ref) for ref in listed}
        return [str(p) for p in scope_file_candidates(self.root) if p.name not in names]

    def is_storage_path(self, path: Path) -> bool:
        """A name in the root that a scope file or one of its side files has or may be given (an export
        written there would be taken for a scope, or stop that scope's first write)."""
        try:
            inside = path.parent.resolve() == self.root.resolve()
        except OSError:
            return False
        name = path.name
        for side in ("-wal", "-shm", "-journal"):
            if name.endswith(side):
                name = name[: -len(side)]
                break
        return inside and is_scope_file_name(name)

    def change_watcher(self) -> ScopeFiles:
        """Compares the scope files' metadata with the last look (:class:`~.watch.ScopeFiles`)."""
        return ScopeFiles(self.root, self.scopes)

    def release_thread(self) -> None:
        held: _ThreadConnections | None = getattr(self._local, "held", None)
        vars(self._local).clear()  # the ids.db connection too: the thread opens new ones if it goes on
        if held is not None:
            held.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = list(self._all_conns)
            self._all_conns.clear()
            self._indexes.clear()
        self._saved.close()
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):  # closing is best effort
                conn.close()
