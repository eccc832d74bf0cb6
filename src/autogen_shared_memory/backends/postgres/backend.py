"""The server backend: every scope of a deployment in one PostgreSQL database (pgvector + full text).

The same contract as the SQLite backend, mapped to rows: every table carries ``(scope_kind, owner)``
(``owner`` is ``''`` for global) and every key, index and query is prefixed by it, so the scopes stay as
isolated as separate files are. A row per scope in ``asm_scopes`` is locked (``SELECT ... FOR UPDATE``)
by every read-then-write, which serialises writers of one scope across hosts exactly like
``BEGIN IMMEDIATE`` does on a file. Writes ``NOTIFY`` the schema's channel so other hosts learn of them without polling.

Why it is built this way (measured: docs/benchmarks-archive.md, "PostgreSQL at SQLite-class speed"):

* Vectors are stored in a pgvector column, but searched as the SQLite backend searches them: each process
  keeps a scope's vectors as int8 codes (:mod:`..search.index`), refreshed by revision. Every write that
  changes facts stamps the rows it touched with the scope's next revision (``asm_facts.rev``,
  ``asm_scopes.rev``), so a search reads only what changed since this process last looked, whichever host
  wrote it. A pgvector HNSW index cost ~2.5 ms per insert (400 inserts/s at 100k rows) and the planner did
  not use it for a scope's query before ANALYZE; the codes answer exactly, in a few ms at 100k facts.
* A write transaction buffers its new facts and audit events and sends them with ``COPY`` (sequence
  numbers are reserved in one round trip); the near-duplicate check of a whole batch runs in memory
  (:class:`~..search.index.NearestExisting`, as on SQLite) and re-scores from the stored float32 vectors
  only the cosines that can decide a merge. A key of each row's content hash is kept in memory too
  (:class:`~..search.index.HashKeys`, as on SQLite), so only a draft whose hash is already stored asks the
  database for its duplicates.
* Lexical search runs in process too: each process keeps a scope's postings beside its vectors
  (:mod:`..search.postings`: FTS5's tokens and BM25, the SQLite backend's postings budget), built from the
  facts' text on the scope's first search and extended by the same revision refresh. ``ts_rank`` over the
  budgeted matches read a heap row per posting: 10-13 ms of server time per query at 100k facts, and two
  round trips. So facts have no ``tsvector`` column, GIN index or term-count table: nothing would read
  them, and every insert would pay for them. Record tables have them, for ``rows(query_terms=...)``,
  written from FTS5's tokens and stems (:mod:`.fulltext`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import struct
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...core.records import TABLES, fts_column, table_spec
from ...core.types import (
    RUN_SESSION_PREFIX,
    Draft,
    EmbeddingModelMismatchError,
    Fact,
    Filters,
    ScopeKind,
    ScopeRef,
    ScopeStats,
    kind_of_fact_id,
    validate_schema_name,
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
    rank_across,
)
from ...search.postings import ScopeTerms, query_stems, rank
from ..base import (
    DRAFT_COLUMNS,
    FACT_COLUMN_NAMES,
    FACT_JSON_COLUMNS,
    STORAGE_TABLES,
    Backend,
    OnConflict,
    RowReader,
    ScopeTx,
    T,
    as_of_clause,
    draft_values,
    fact_from_row,
)
from ..saved_index import DEFAULT_SAVE_FROM, SavedIndexes

try:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - optional dependency
    raise ImportError(
        "the PostgreSQL backend needs psycopg 3 and psycopg-pool: pip install 'autogen-shared-memory[postgres]'"
    ) from exc

from .errors import BackendUnavailableError, redact
from .fulltext import tsquery_literal, tsvector_literal
from .notify import channel, notify, subscribe
from .schema import SCHEMA_VERSION, prepare, search_path
from .server_search import (
    SERVER_EF,
    SERVER_MIN_FACTS,
    SearchMode,
    ServerSearch,
    check_mode,
    enable,
    enabled,
    fact_stems,
)

logger = logging.getLogger("autogen_shared_memory")

DEFAULT_SCHEMA = "autogen_shared_memory"

# The approved events of the fact of an ``asm_facts`` row (every filter query reads that table unaliased).
_APPROVALS = (
    "SELECT 1 FROM asm_audit a WHERE a.scope_kind = asm_facts.scope_kind AND a.owner = asm_facts.owner "
    "AND a.fact_id = asm_facts.id"
)
_JSON_COLUMNS = frozenset(FACT_JSON_COLUMNS)
_FACT_COLUMNS = ", ".join(f"{c}::text" if c in _JSON_COLUMNS else c for c in FACT_COLUMN_NAMES)  # fact_from_row's
# Their casts: metadata (and an audit event's detail) is kept as written (schema 6: ``json``, not ``jsonb``).
_JSON_CASTS = {c: "::json" if c == "metadata" else "::jsonb" for c in _JSON_COLUMNS}


def _vec(vector: Any) -> str:
    """A pgvector literal; 9 significant digits round-trip a float32 exactly."""
    values = np.asarray(vector, dtype=np.float32).reshape(-1).tolist()
    return _vec_format(len(values)) % tuple(values)


@lru_cache(maxsize=8)
def _vec_format(dim: int) -> str:
    return "[" + ",".join(["%.9g"] * dim) + "]"  # one C-level format call: 3x faster than a join of reprs


def _parse_vec(text: str | None) -> bytes | None:
    if text is None:
        return None
    return np.asarray(json.loads(text), dtype=np.float32).tobytes()


def _from_pg(blobs: Sequence[bytes]) -> npt.NDArray[np.float32]:
    """pgvector's binary form (int16 dimension, int16 unused, big-endian float32s) of equal-length vectors,
    as one float32 matrix."""
    dim = (len(blobs[0]) - 4) // 4
    if any(len(b) != 4 + 4 * dim for b in blobs):
        raise EmbeddingModelMismatchError("vectors of different dimensions in one scope")
    raw = np.frombuffer(b"".join(blobs), dtype=">f4").reshape(len(blobs), dim + 1)
    return raw[:, 1:].astype(np.float32)


# search.index.hash_key in SQL: the key of each row, computed by the server
_HKEY_SQL = "CASE WHEN content_hash ~ '^[0-9a-f]{15}' THEN ('x' || left(content_hash, 15))::bit(60)::bigint ELSE 0 END"


def _id_at(conn: psycopg.Connection[Any], scope: ScopeRef, seq: int) -> str | None:
    """The id of the fact at ``seq`` in a scope, or None."""
    row = conn.execute(
        "SELECT id FROM asm_facts WHERE scope_kind = %s AND owner = %s AND seq = %s", (scope.kind, scope.owner, seq)
    ).fetchone()
    return None if row is None else str(row[0])


def _seconds(timeout: float) -> int:
    """libpq's ``connect_timeout``: whole seconds, at least 1 (0 would mean its 130 s default)."""
    return max(1, round(timeout))


def schema_exists(dsn: str, schema: str, connect_timeout: float = 10.0) -> bool | None:
    """Whether ``schema`` exists in the database (None when that cannot be told: the DSN cannot be parsed or
    the server cannot be reached, which opening the backend then reports, without the password)."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=_seconds(connect_timeout)) as conn:
            row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    except psycopg.Error:
        return None
    return row is not None


class PostgresBackend(Backend):
    """Facts and records of every scope in one PostgreSQL database (needs the pgvector extension).

    Args:
        dsn: a libpq connection string or URI.
        schema: the PostgreSQL schema holding the tables (one deployment per schema).
        min_size, max_size: connection pool bounds.
        retries: how often an operation interrupted by a dropped connection is retried (each attempt is a
            whole transaction, so nothing is ever half-written).
        connect_timeout: seconds to wait for a connection, new or from the pool; an unreachable server is a
            :class:`BackendUnavailableError` after about that long.
        lock_timeout: seconds a write waits for a scope another writer holds (SQLite's ``busy_timeout``)
            before it fails with :class:`BackendUnavailableError`, nothing written.
        max_common_term_ratio, max_lexical_postings: the lexical leg's budget, as on SQLite: query terms are
            ranked rarest first while their posting lists hold at most ``max_lexical_postings`` rows (terms
            in more than ``max_common_term_ratio`` of a scope's facts are dropped; the rarest term is kept).
        vector_index, ann_min_facts, ann_ef: ``"int4"`` (the default) scans each scope's in-memory int8
            codes, a scope of 262,144 facts or more first by 4-bit codes that choose the rows re-scored
            (built in the background on its first search; docs/concepts.md); ``"exact"`` always scans the
            int8 codes; ``"hnsw"`` answers scopes of ``ann_min_facts`` facts (default 20,000) or more from an
            HNSW graph (hnswlib, ``ann_ef`` default 128), built in the background on their first search, as
            on SQLite.
        search: ``"process"`` keeps each searched scope's vectors and postings in this process (exact,
            FTS5's BM25); ``"server"`` searches with SQL (:mod:`.server_search`: pgvector HNSW for scopes of
            ``ann_min_facts`` facts (default 1,000) or more, ``ann_ef`` its ``hnsw.ef_search`` (default 256);
            full text), keeping nothing per scope in the process. Opening a schema with ``"server"`` the first
            time builds its indexes (docs/postgres.md, "Search in the server").
        index_dir: with ``search="process"``, a directory of this machine where a scope's in-process index
            is saved once the scope holds ``save_index_from`` facts (default 20,000), and saved again after
            a quarter more: the next process maps it and reads only what changed since (docs/postgres.md).
            None (the default): nothing is saved, each process reads its scopes from the server.
        save_index_from: see ``index_dir``; None: never save (files already there are still mapped).
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        min_size: int = 1,
        max_size: int = 8,
        retries: int = 2,
        connect_timeout: float = 10.0,
        lock_timeout: float = 30.0,
        max_common_term_ratio: float = 0.1,
        max_lexical_postings: int = 5_000,
        vector_index: VectorIndexKind = "int4",
        ann_min_facts: int | None = None,
        ann_ef: int | None = None,
        search: SearchMode = "process",
        index_dir: str | Path | None = None,
        save_index_from: int | None = DEFAULT_SAVE_FROM,
    ) -> None:
        try:
            conninfo_to_dict(dsn)
            parsed = True
        except psycopg.ProgrammingError:  # its message quotes the DSN, password and all: not even chained
            parsed = False
        if not parsed:
            raise ValueError(
                "the PostgreSQL DSN cannot be parsed: give a postgresql://user:password@host:port/dbname URL or "
                "key=value pairs (a SQLAlchemy URL such as postgresql+psycopg://... is neither)"
            )
        validate_schema_name(schema)
        if ann_min_facts is None:  # an exact scan in the server reads each row's vector from TOAST: ~5 us a fact
            ann_min_facts = SERVER_MIN_FACTS if search == "server" else 20_000
        if ann_ef is None:  # pgvector's iterative scan needs a wider search than hnswlib for the same recall
            ann_ef = SERVER_EF if search == "server" else 128
        check_options(
            vector_index,
            max_lexical_postings=max_lexical_postings,
            ann_min_facts=ann_min_facts,
            ann_ef=ann_ef,
            **({} if save_index_from is None else {"save_index_from": save_index_from}),
        )
        if not 0 < max_common_term_ratio <= 1:
            raise ValueError(f"max_common_term_ratio must be in (0, 1], got {max_common_term_ratio!r}")
        self.search = check_mode(search)
        if self.search == "server" and vector_index == "hnsw":
            raise ValueError("vector_index chooses the in-process index: it does not apply to search='server'")
        if self.search == "server" and ann_ef > 1000:  # pgvector's largest hnsw.ef_search
            raise ValueError(f"ann_ef must be at most 1000 with search='server', got {ann_ef!r}")
        if not 0 < lock_timeout <= 86400 or not 0 < connect_timeout <= 3600:
            raise ValueError("lock_timeout must be in (0, 86400] seconds and connect_timeout in (0, 3600]")
        self.dsn = dsn
        self.schema = schema
        self.retries = retries
        self.lock_timeout = float(lock_timeout)
        self.connect_timeout = float(connect_timeout)
        self._pool_size = (min_size, max_size)
        self._pool_lock = threading.Lock()
        self._closed = False
        self._in_use: dict[int, int] = {}  # connections this process's calls hold, per pool (by id)
        self.max_common_term_ratio = max_common_term_ratio
        self.max_lexical_postings = max_lexical_postings
        self.vector_index = vector_index
        self.ann_min_facts = ann_min_facts
        self.ann_ef = ann_ef
        self._caches: dict[ScopeRef, VectorIndex] = {}
        self._caches_lock = threading.Lock()
        # The scopes' in-process indexes saved in ``index_dir`` and mapped by the next process on this machine
        # (backends/saved_index.py); files named by the database, schema and scope, checked against the rows.
        self.index_dir = None if index_dir is None else Path(index_dir).expanduser().absolute()
        if self.index_dir is not None and self.search == "server":
            raise ValueError("index_dir keeps the in-process index: it does not apply to search='server'")
        if self.index_dir is not None:
            try:
                self.index_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ValueError(f"index_dir {str(self.index_dir)!r} cannot be used as a folder: {exc}") from exc
        self._saved = SavedIndexes(save_index_from if self.index_dir is not None else None)
        self._existing: set[ScopeRef] = set()  # scopes known to exist (a row in asm_scopes is never deleted)
        self._added_since_check = 0  # facts this process added since it last looked at the statistics
        self._checked_stats = False
        self._maintaining = False  # a VACUUM ANALYZE is running in the background
        self._maintenance_failed = False
        self._fact_forms: list[Callable[[Any], bytes]] | None = None  # binary COPY forms of a fact row's columns
        self._listeners: list[Callable[[], None]] = []  # stops this backend's wake-up subscriptions
        self._server = ServerSearch(schema, ann_min_facts, max_common_term_ratio, max_lexical_postings)
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=_seconds(connect_timeout)) as conn:
                self._search_path = search_path(self.schema, prepare(conn, self.schema, dsn))
                if self.search == "server":
                    conn.execute(f"SET search_path TO {self._search_path}")
                    enable(conn, self.schema)
                self._writes_stems = enabled(conn, self.schema)  # every writer fills what the server searches
        except psycopg.OperationalError as exc:
            raise BackendUnavailableError(f"cannot connect to PostgreSQL at {redact(dsn)}: {exc}".strip()) from exc
        self.pool: ConnectionPool[Any] = self._new_pool()

    def _new_pool(self) -> ConnectionPool[Any]:
        return ConnectionPool(
            self.dsn,
            min_size=self._pool_size[0],
            max_size=self._pool_size[1],
            open=True,
            configure=self._configure,
            timeout=self.connect_timeout,  # psycopg_pool's own default waits 30 s for a connection
            kwargs={"connect_timeout": _seconds(self.connect_timeout), "autocommit": True},
        )

    @contextlib.contextmanager
    def _borrowed(self, pool: ConnectionPool[Any]) -> Iterator[psycopg.Connection[Any]]:
        """A connection of ``pool``, counted while this process's call holds it (see :meth:`_renew_pool`)."""
        with pool.connection() as conn:
            with self._pool_lock:
                self._in_use[id(pool)] = self._in_use.get(id(pool), 0) + 1
            try:
                yield conn
            finally:
                with self._pool_lock:
                    left = self._in_use.get(id(pool), 1) - 1
                    if left:
                        self._in_use[id(pool)] = left
                    else:
                        del self._in_use[id(pool)]

    def _renew_pool(self, failed: ConnectionPool[Any]) -> bool:
        """After pool ``failed`` could not hand out a connection: whether a call may try again. A pool that
        holds no connection while the server answers gets replaced (psycopg_pool backs off its reconnection
        attempts up to minutes after an outage, and would keep failing calls long after the server is back);
        a pool whose connections are all in use is only busy: it stays. False while the server does not
        answer, and once the backend is closed."""
        with self._pool_lock:
            if self._in_use.get(id(failed), 0) > 0:  # calls of this process hold its connections: busy
                return self.pool is failed and not self._closed
        try:
            psycopg.connect(self.dsn, connect_timeout=_seconds(self.connect_timeout)).close()
        except psycopg.Error:
            return False
        with self._pool_lock:
            if self._closed:
                return False
            if self.pool is failed:  # the first caller to get here renews; the others use its pool
                self.pool = self._new_pool()
                threading.Thread(target=failed.close, kwargs={"timeout": 5.0}, daemon=True).start()
        return True

    def __repr__(self) -> str:
        return f"PostgresBackend({redact(self.dsn)!r}, schema={self.schema!r})"

    # ------------------------------------------------------------------ setup
    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"SET search_path TO {self._search_path}")
        conn.execute(f"SET lock_timeout = {int(self.lock_timeout * 1000)}")  # a stuck writer: an error, as on SQLite
        if self.search == "server":  # the HNSW scan goes on until the filters let enough rows through
            conn.execute(f"SET hnsw.ef_search = {int(self.ann_ef)}")
            conn.execute("SET hnsw.iterative_scan = strict_order")

    def _cache(self, scope: ScopeRef) -> VectorIndex:
        with self._caches_lock:
            cache = self._caches.get(scope)
            if cache is None:
                cache = self._caches[scope] = VectorIndex()
                if self.index_dir is not None:
                    cache.home = self.index_dir / self._saved_index_name(scope)
            return cache

    def _saved_index_name(self, scope: ScopeRef) -> str:
        """The file of a scope's saved index in ``index_dir``: a hash of the server, database, schema and
        scope (no credentials), so one directory serves several deployments."""
        info = conninfo_to_dict(self.dsn)
        where = [str(info.get(k, "")) for k in ("host", "hostaddr", "port", "dbname")]
        key = "\x00".join([*where, self.schema, scope.kind, scope.owner])
        return f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.index"

    @staticmethod
    def _states(conn: psycopg.Connection[Any], scopes: Sequence[ScopeRef]) -> dict[ScopeRef, tuple[int, int]]:
        """The ``(rev, epoch)`` of several scopes, read in one round trip (``(0, 0)``: a scope with no row)."""
        rows = conn.execute(
            "SELECT s.scope_kind, s.owner, s.rev, s.epoch FROM asm_scopes s "
            "JOIN unnest(%s::text[], %s::text[]) AS asked(kind, owner) "
            "ON s.scope_kind = asked.kind AND s.owner = asked.owner",
            ([r.kind for r in scopes], [r.owner for r in scopes]),
        ).fetchall()
        found = {(str(r[0]), str(r[1])): (int(r[2]), int(r[3])) for r in rows}
        return {ref: found.get((ref.kind, ref.owner), (0, 0)) for ref in scopes}

    def _refresh(
        self,
        conn: psycopg.Connection[Any],
        scope: ScopeRef,
        cache: VectorIndex,
        seen: tuple[int, int] | None = None,
    ) -> None:
        """Bring this process's copy of the scope's vectors and hashes up to date (caller holds
        ``cache.lock``): the rows stamped with a revision it has not seen, or everything after an epoch change.
        ``seen``: the scope's ``(rev, epoch)`` as :meth:`_states` read it for a search of several scopes, a
        moment before: a copy that is at that state is what the search reads, with no round trip of its own
        (as if the search had started then); any other copy is refreshed as usual."""
        if seen is not None and seen == (cache.rev, cache.epoch):
            return
        row = conn.execute(
            "SELECT rev, epoch FROM asm_scopes WHERE scope_kind = %s AND owner = %s", (scope.kind, scope.owner)
        ).fetchone()
        rev, epoch = (int(row[0]), int(row[1])) if row is not None else (0, 0)
        if epoch != cache.epoch:
            cache.reset()
            cache.epoch = epoch
        if rev == cache.rev:
            return
        key = (scope.kind, scope.owner)
        if cache.rev < 0 and cache.home is not None:  # a fresh copy: map the saved one if it is this scope's
            self._saved.map(cache, epoch, rev, functools.partial(_id_at, conn, scope))
            if rev == cache.rev:
                return
        if cache.n == 0:  # first load: in seq order, streamed in chunks
            with conn.transaction(), conn.cursor(name=f"asm_load_{threading.get_ident()}", binary=True) as cur:
                cur.itersize = 16384
                cur.execute(
                    f"SELECT seq, id, status, expires_at, {_HKEY_SQL}, embedding FROM asm_facts "
                    "WHERE scope_kind = %s AND owner = %s ORDER BY seq",
                    key,
                )
                keys: list[npt.NDArray[np.int64]] = []
                while rows := cur.fetchmany(65536):
                    self._apply(cache, rows, first_load=True)
                    keys.append(np.fromiter((r[4] for r in rows), dtype=np.int64, count=len(rows)))
            cache.hashes = HashKeys(np.sort(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64))
        else:
            last_seq = int(cache.seq[cache.n - 1])
            with conn.cursor(binary=True) as cur:
                rows = cur.execute(
                    f"SELECT seq, id, status, expires_at, {_HKEY_SQL}, CASE WHEN seq > %s THEN embedding END "
                    "FROM asm_facts WHERE scope_kind = %s AND owner = %s AND rev > %s ORDER BY seq",
                    (last_seq, *key, cache.rev),
                ).fetchall()
            self._apply(cache, rows)
            cache.hashes.add(int(r[4]) for r in rows if r[0] > last_seq)
        cache.rev = rev

    @staticmethod
    def _apply(cache: VectorIndex, rows: Sequence[Any], first_load: bool = False) -> None:
        """Hand rows ``(seq, id, status, expires_at, hkey, pgvector-or-None)`` to the vector index (a first
        load's chunks are appended whole: row by row, 100k facts took seconds more)."""
        with_vector = [i for i, r in enumerate(rows) if r[5] is not None]
        blobs: dict[int, bytes] = {}
        if with_vector:
            matrix = _from_pg([rows[i][5] for i in with_vector])
            blobs = {i: matrix[k].tobytes() for k, i in enumerate(with_vector)}
        converted = [(int(r[0]), r[1], r[2], r[3], blobs.get(i)) for i, r in enumerate(rows)]
        if first_load:
            cache._append_many([r for r in converted if r[4] is not None])
        else:
            cache.apply(converted)

    # ------------------------------------------------------------------ connections and retries
    def _run(
        self,
        fn: Callable[[psycopg.Connection[Any]], Any],
        *,
        write: bool,
        hold: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> Any:
        """Run ``fn`` (a write: in one transaction); retry it whole when the connection drops (never
        half-written). Pooled connections are in autocommit mode, so a read costs no BEGIN and COMMIT.
        ``hold()`` is entered once the connection is taken and left after the COMMIT: a lock taken in that
        order everywhere (connection, then scope cache), so that threads holding the pool's connections and
        a thread holding a cache's lock never wait on each other.

        A connection lost while COMMIT was on its way leaves the outcome unknown: the server may have
        committed. Running the write again would then apply it twice (a remember counted as said twice, a
        forget answered "already forgotten"), so the transaction's id is taken first, and before any retry
        the server is asked what became of it: committed means done, with the result the write computed.
        """
        attempt = 0
        pending: tuple[str, Any] | None = None  # (transaction id, result) of a write whose COMMIT got no answer
        while True:
            pool = self.pool
            try:
                with self._borrowed(pool) as conn, hold() if hold is not None else contextlib.nullcontext():
                    if not write:  # autocommit: a read is its statements, without BEGIN and COMMIT round trips
                        return fn(conn)
                    if pending is not None:
                        if self._committed(conn, pending[0]):
                            return pending[1]
                        pending = None
                    with conn.transaction():
                        row = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
                        assert row is not None
                        result = fn(conn)
                        pending = (str(row[0]), result)  # until COMMIT answers
                    return result
            except psycopg.errors.ProgramLimitExceeded as exc:  # a value past a limit of the server: bad input
                raise ValueError(
                    f"PostgreSQL refused a value (nothing was written): {exc.diag.message_primary}"
                ) from exc
            except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:  # not a lost connection
                raise BackendUnavailableError(
                    f"PostgreSQL at {redact(self.dsn)} stopped a {'write' if write else 'read'} that waited too long "
                    f"(nothing was written): {exc.diag.message_primary} (a lock another writer holds: lock_timeout "
                    f"{self.lock_timeout:g} s, or the server's statement_timeout)"
                ) from exc
            except PoolTimeout as exc:
                attempt += 1
                if attempt > self.retries or not self._renew_pool(pool):
                    raise BackendUnavailableError(
                        f"no connection to PostgreSQL at {redact(self.dsn)} within {self.connect_timeout:g} s "
                        f"(nothing was written): {exc}"
                    ) from exc
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                attempt += 1
                if attempt > self.retries or self.pool.closed:
                    raise BackendUnavailableError(
                        f"PostgreSQL at {redact(self.dsn)} failed during a {'write' if write else 'read'} "
                        + (
                            "(its COMMIT got no answer: it may or may not have been applied)"
                            if pending is not None
                            else "(nothing was half-written)"
                        )
                        + f": {exc}"
                    ) from exc
                logger.warning("retrying after a dropped PostgreSQL connection: %s", exc)
                self.pool.check()
                time.sleep(0.05 * attempt)

    @staticmethod
    def _committed(conn: psycopg.Connection[Any], xid: str) -> bool:
        """Whether transaction ``xid`` committed; waits while the server still has it in progress (its
        backend has not yet noticed the lost client)."""
        deadline = time.monotonic() + 30.0
        while True:
            row = conn.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()
            status = row[0] if row else None
            if status != "in progress" or time.monotonic() > deadline:
                return status == "committed"
            time.sleep(0.02)

    @staticmethod
    def _lock_scope(conn: psycopg.Connection[Any], scope: ScopeRef) -> int:
        """Lock the scope's row (created if new) for this transaction; return its revision (one round trip)."""
        with conn.pipeline():
            conn.execute(
                "INSERT INTO asm_scopes (scope_kind, owner, created_at) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (scope.kind, scope.owner, time.time()),
            )
            cur = conn.execute(
                "SELECT rev FROM asm_scopes WHERE scope_kind = %s AND owner = %s FOR UPDATE",
                (scope.kind, scope.owner),
            )
        row = cur.fetchone()
        assert row is not None
        return int(row[0])

    @staticmethod
    def _audit(
        conn: psycopg.Connection[Any], scope: ScopeRef, fact_id: str, event: str, actor: str, at: float, **detail: Any
    ) -> None:
        conn.execute(
            "INSERT INTO asm_audit (scope_kind, owner, fact_id, event, actor, at, detail) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s::json)",
            (scope.kind, scope.owner, fact_id, event, actor, at, json.dumps(detail, default=str)),
        )

    # ------------------------------------------------------------------ writes
    def transact(self, scope: ScopeRef, fn: Callable[[ScopeTx], T], event: str = "write") -> T:
        cache = self._cache(scope)

        added = [0]

        def run(conn: psycopg.Connection[Any]) -> T:
            tx = _PgTx(self, conn, scope, cache, self._lock_scope(conn, scope))
            result = fn(tx)
            tx.finish(event)
            added[0] = tx.n_delta
            return result

        @contextlib.contextmanager
        def holding() -> Iterator[None]:
            """This process's copy of the scope follows the transaction (as on SQLite): locked from before the
            first statement to after the COMMIT, and reset if the attempt fails (it may hold rows that were
            never stored)."""
            with cache.lock:
                try:
                    yield
                except BaseException:
                    cache.reset()
                    raise

        result: T = self._run(run, write=True, hold=holding)
        # cache.rev stays at its pre-transaction value: the next refresh re-reads just this transaction's rows.
        self._saved.save_later(cache)
        if added[0] > 0:
            self._maybe_analyze(added[0])
        return result

    def _copy_forms(self, conn: psycopg.Connection[Any]) -> list[Callable[[Any], bytes]] | None:
        """The binary ``COPY`` form of each column a new fact fills (:data:`_BINARY_FORMS`), in the order of
        :data:`_COPY_FACTS`, read once from the catalog; None if a column has a type without one here."""
        if self._fact_forms is None:
            rows = conn.execute(
                "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
                (f"{self.schema}.asm_facts",),
            ).fetchall()
            types = dict(rows)
            names = [types.get(c) for c in [*_COPY_FACT_COLUMNS, "embedding"]]
            if any(name not in _BINARY_FORMS for name in names):
                return None
            self._fact_forms = [_BINARY_FORMS[str(name)] for name in names]
        return self._fact_forms

    def _maybe_analyze(self, added: int) -> None:
        """Refresh the planner's statistics and the full-text index when the facts table has grown by a
        fifth since it was last analyzed: ``VACUUM (ANALYZE)``, in a background thread.

        Without statistics the planner takes every scope for a handful of rows and answers the lexical leg
        by reading the whole scope through its btree (14 ms at 10k facts) instead of the GIN index of the
        terms (the issue's "before ANALYZE"). The VACUUM also merges the GIN index's pending list (which
        every full-text query otherwise scans whole) and sets the new rows' hint bits (which the first
        queries otherwise write back). Autovacuum gets there too, a minute or more later. Checked once per
        1,000 facts this process added (and on its first write), never failing or delaying a write.
        """
        with self._caches_lock:
            self._added_since_check += added
            if (self._added_since_check < 1000 and self._checked_stats) or self._maintaining:
                return
            self._added_since_check = 0
            self._checked_stats = True
            self._maintaining = True
        threading.Thread(target=self._maintain, name="asm-analyze", daemon=True).start()

    def _maintain(self) -> None:
        """The check of :meth:`_maybe_analyze` on a pooled connection; the VACUUM, when due, on a connection of
        its own (it can take seconds, and a pooled connection would be held from searches and writes)."""
        try:
            row = self._read(
                lambda conn: conn.execute(
                    "SELECT (SELECT reltuples FROM pg_class WHERE oid = %s::regclass), "
                    f"(SELECT coalesce(sum(n_facts), 0) FROM {self.schema}.asm_scopes)",
                    (f"{self.schema}.asm_facts",),
                ).fetchone()
            )
            assert row is not None
            estimate, total = float(row[0]), int(row[1])
            if total >= 1000 and total > 1.2 * max(estimate, 0.0):
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"VACUUM (ANALYZE, SKIP_LOCKED) {self.schema}.asm_facts")
        except Exception as exc:  # maintenance is an optimisation: log once, never fail a write
            if not self._maintenance_failed and not self._closed:  # (a backend closed meanwhile: nothing to say)
                logger.warning("could not VACUUM ANALYZE the facts table (autovacuum will): %s", exc)
            self._maintenance_failed = True
        finally:
            with self._caches_lock:
                self._maintaining = False

    # ------------------------------------------------------------------ reads
    def _read(self, fn: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        return self._run(fn, write=False)

    def get(self, scope: ScopeRef, fact_ids: Sequence[str]) -> list[Fact]:
        return self.get_across({scope: fact_ids})[scope]

    def get_across(self, wanted: Mapping[ScopeRef, Sequence[str]]) -> dict[ScopeRef, list[Fact]]:
        """:meth:`get` of every scope in one round trip."""
        ids = list(dict.fromkeys(i for fact_ids in wanted.values() for i in fact_ids))
        if not ids:
            return {scope: [] for scope in wanted}
        rows = self._read(
            lambda c: c.execute(
                f"SELECT scope_kind, owner, {_FACT_COLUMNS} FROM asm_facts WHERE id = ANY(%s)", (ids,)
            ).fetchall()
        )
        now = time.time()
        asked = {(scope.kind, scope.owner): scope for scope in wanted}
        found: dict[tuple[str, str, str], Fact] = {}
        for r in rows:
            if (scope := asked.get((r[0], r[1]))) is not None:
                found[(r[0], r[1], r[3])] = fact_from_row(scope, r[2:], now)
        return {
            scope: [found[k] for k in ((scope.kind, scope.owner, i) for i in fact_ids) if k in found]
            for scope, fact_ids in wanted.items()
        }

    def find(self, fact_id: str) -> Fact | None:
        kind = kind_of_fact_id(fact_id)
        rows = self._read(
            lambda c: c.execute(
                f"SELECT owner, {_FACT_COLUMNS} FROM asm_facts WHERE id = %s AND scope_kind = %s LIMIT 1",
                (fact_id, kind),
            ).fetchall()
        )
        return fact_from_row(ScopeRef(kind, rows[0][0]), rows[0][1:], time.time()) if rows else None

    @staticmethod
    def _filter_sql(filters: Filters, now: float) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if filters.as_of is not None:
            clauses.append(as_of_clause("", "%s", _APPROVALS))
            params.extend([filters.as_of] * 4)
        elif not filters.include_inactive:
            clauses.append("status = 'active' AND (expires_at IS NULL OR expires_at > %s)")
            params.append(now)
        if filters.tags:
            clauses.append("tags @> %s::jsonb")
            params.append(json.dumps(list(filters.tags)))
        if filters.created_by:
            clauses.append("created_by = ANY(%s)")
            params.append(list(filters.created_by))
        for column, op, value in (
            ("category", "=", filters.category),
            ("created_at", ">=", filters.since),
            ("created_at", "<", filters.until),
            ("confidence", ">=", filters.min_confidence),
        ):
            if value is not None:
                clauses.append(f"{column} {op} %s")
                params.append(value)
        return (" AND ".join(clauses) or "TRUE"), params

    def select_ids(self, scope: ScopeRef, filters: Filters, limit: int) -> list[str]:
        where, params = self._filter_sql(filters, time.time())
        return [
            r[0]
            for r in self._read(
                lambda c: c.execute(
                    f"SELECT id FROM asm_facts WHERE scope_kind = %s AND owner = %s AND {where} ORDER BY seq LIMIT %s",
                    (scope.kind, scope.owner, *params, limit),
                ).fetchall()
            )
        ]

    def lexical(
        self, scopes: Sequence[ScopeRef], terms: Sequence[str], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        """FTS5's BM25, computed in this process over each scope's postings, kept beside its vectors and
        refreshed with them (:func:`~autogen_shared_memory.search.postings.rank`): the SQLite backend's
        ranking and budget. The status rule comes from the in-memory copy, as for the semantic leg;
        narrowing filters are checked by the database for the scored facts only.

        Measured at 100k facts (docs/benchmarks-archive.md, "PostgreSQL lexical leg in process"): the leg takes
        p50 1.1 / p95 4.2 ms this way (one round trip), against 19.7 / 40.8 ms as ``ts_rank`` over the
        budgeted matches (term counts from a table the database keeps, two round trips, a heap row per
        posting); so the facts have no ``tsvector`` and no term-count table.
        """
        if self.search == "server":
            return self._in_server(self._server.lexical, scopes, terms, limit, filters)
        stems = query_stems(terms)
        if not stems:
            return []
        now = time.time()
        everything = filters.include_inactive or filters.as_of is not None  # no status rule from memory

        def run(conn: psycopg.Connection[Any]) -> list[tuple[ScopeRef, str, float]]:
            seen = self._states(conn, scopes) if len(scopes) > 1 else {}
            terms = [self._terms(conn, s, stems, now, everything, seen.get(s)) for s in scopes]
            found = [f for f in terms if f is not None]

            def allowed(f: ScopeTerms, positions: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
                return self._allowed(conn, f.scope, f.seqs, positions, filters, now)

            return rank(
                found,
                stems,
                limit,
                common_ratio=self.max_common_term_ratio,
                budget=self.max_lexical_postings,
                allowed=allowed if filters.narrows else None,
            )

        result: list[tuple[ScopeRef, str, float]] = self._read(run)
        return result

    def _terms(
        self,
        conn: psycopg.Connection[Any],
        scope: ScopeRef,
        stems: Sequence[str],
        now: float,
        everything: bool,
        seen: tuple[int, int] | None,
    ) -> ScopeTerms | None:
        """One scope's refreshed postings of ``stems`` (the text of facts this process has not indexed yet is
        read here, once); ``seen`` as for :meth:`_refresh`."""

        def texts(seqs: npt.NDArray[np.int64]) -> dict[int, str]:
            rows = conn.execute(
                "SELECT seq, content FROM asm_facts WHERE scope_kind = %s AND owner = %s AND seq BETWEEN %s AND %s",
                (scope.kind, scope.owner, int(seqs[0]), int(seqs[-1])),
            ).fetchall()
            return dict(rows)

        cache = self._cache(scope)
        with cache.lock:
            self._refresh(conn, scope, cache, seen)
            found = cache.terms(scope, stems, now, everything, texts)
        self._saved.save_later(cache)
        return found

    def _allowed(
        self,
        conn: psycopg.Connection[Any],
        scope: ScopeRef,
        seqs: npt.NDArray[np.int64],
        positions: npt.NDArray[np.int64],
        filters: Filters,
        now: float,
    ) -> npt.NDArray[np.bool_]:
        """The facts at ``positions`` that pass ``filters`` (the database decides), as a mask over all."""
        mask = np.zeros(len(seqs), dtype=bool)
        if len(positions):
            where, params = self._filter_sql(filters, now)
            rows = conn.execute(
                f"SELECT seq FROM asm_facts WHERE scope_kind = %s AND owner = %s AND seq = ANY(%s) AND {where}",
                (scope.kind, scope.owner, seqs[positions].tolist(), *params),
            ).fetchall()
            passed = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            mask[positions[np.isin(seqs[positions], passed)]] = True
        return mask

    def semantic(
        self, scopes: Sequence[ScopeRef], vector: Vectors, limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        """The ``limit`` live facts of all ``scopes`` nearest to ``vector``, ranked by float32 cosine: the
        SQLite backend's search (int8 codes of each scope scanned in memory, or its HNSW graph; rows whose
        order is in doubt re-scored from the stored float32 vectors), over this process's copy of each
        scope, refreshed by revision first."""
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if self.search == "server":
            return self._in_server(self._server.semantic, scopes, q, limit, filters)
        now = time.time()

        def run(conn: psycopg.Connection[Any]) -> list[tuple[ScopeRef, str, float]]:
            seen = self._states(conn, scopes) if len(scopes) > 1 else {}
            asked = [self._semantic_view(conn, s, q, limit, filters, now, seen.get(s)) for s in scopes]
            views = [v for v in asked if v]
            return rank_across(views, q, limit, lambda asked: self._exact(conn, [(v.scope, s) for v, s in asked], q))

        result: list[tuple[ScopeRef, str, float]] = self._read(run)
        return result

    def _in_server(
        self,
        leg: Callable[..., list[tuple[ScopeRef, str, float]]],
        scopes: Sequence[ScopeRef],
        query: Any,
        limit: int,
        filters: Filters,
    ) -> list[tuple[ScopeRef, str, float]]:
        """One leg of ``search="server"`` (:class:`.server_search.ServerSearch`), with the filters' SQL."""
        where, params = self._filter_sql(filters, time.time())
        result: list[tuple[ScopeRef, str, float]] = self._read(lambda c: leg(c, scopes, query, limit, where, params))
        return result

    def _semantic_view(
        self,
        conn: psycopg.Connection[Any],
        scope: ScopeRef,
        q: npt.NDArray[np.float32],
        limit: int,
        filters: Filters,
        now: float,
        seen: tuple[int, int] | None,
    ) -> ScopeView | None:
        """One scope's refreshed vectors and live mask, with the HNSW graph's candidates when it has one
        (``seen`` as for :meth:`_refresh`)."""
        cache = self._cache(scope)
        with cache.lock:
            self._refresh(conn, scope, cache, seen)
            view = cache.view(scope, q, limit, filters, now, (self.vector_index, self.ann_min_facts, self.ann_ef))
        self._saved.save_later(cache)
        if view is None:
            return None
        if filters.narrows:
            where, params = self._filter_sql(filters, now)
            allowed = np.fromiter(
                (
                    r[0]
                    for r in conn.execute(
                        f"SELECT seq FROM asm_facts WHERE scope_kind = %s AND owner = %s AND {where}",
                        (scope.kind, scope.owner, *params),
                    )
                ),
                dtype=np.int64,
            )
            view.mask &= np.isin(view.seqs, allowed, assume_unique=True)
        return view

    @staticmethod
    def _exact(
        conn: psycopg.Connection[Any],
        asked: Sequence[tuple[ScopeRef, npt.NDArray[np.int64]]],
        q: npt.NDArray[np.float32],
    ) -> list[npt.NDArray[np.float32]]:
        """float32 cosines of ``q`` with the facts ``seqs`` of each ``(scope, seqs)`` from their stored vectors
        (the codes rebuild them only to within 4e-5), as SQLite computes them, in one round trip for every
        scope (a ``seq`` names one row of the schema); a fact no longer stored scores -inf."""
        out = [np.full(len(seqs), -np.inf, dtype=np.float32) for _, seqs in asked]
        where = {
            (scope.kind, scope.owner, int(seq)): (k, i)
            for k, (scope, seqs) in enumerate(asked)
            for i, seq in enumerate(seqs)
        }
        if not where:
            return out
        with conn.cursor(binary=True) as cur:
            rows = cur.execute(
                "SELECT scope_kind, owner, seq, embedding FROM asm_facts WHERE seq = ANY(%s)",
                ([key[2] for key in where],),
            ).fetchall()
        rows = [r for r in rows if (r[0], r[1], int(r[2])) in where and len(r[3]) == 4 + 4 * q.shape[0]]
        if rows:
            scores = np.einsum("ij,j->i", _from_pg([r[3] for r in rows]), q)  # no BLAS threads
            for r, score in zip(rows, scores, strict=True):
                k, i = where[(r[0], r[1], int(r[2]))]
                out[k][i] = score
        return out

    def build_ann(self, scope: ScopeRef) -> bool:
        """Build the scope's approximate index now, in this thread (searches go on meanwhile, exactly): its
        HNSW graph (``vector_index='hnsw'``) or its 4-bit first pass (``'int4'``, scopes of 262,144 facts or
        more). Returns False when there is nothing to build (``vector_index='exact'``, a scope too small, or
        ``search='server'``: the server's HNSW index is built when the schema is opened)."""
        if self.search == "server":
            return False
        cache = self._cache(scope)

        def refresh(conn: psycopg.Connection[Any]) -> None:
            with cache.lock:  # after the connection: the order of every path (see _run)
                self._refresh(conn, scope, cache)

        if self.vector_index != "exact":
            self._read(refresh)
        return cache.build_graph(self.vector_index, self.ann_min_facts, self.ann_ef, lambda: None)

    def neighbours(self, scope: ScopeRef, fact_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        return self.neighbours_across({scope: fact_ids})[scope]

    def neighbours_across(
        self, wanted: Mapping[ScopeRef, Sequence[str]]
    ) -> dict[ScopeRef, dict[str, tuple[str | None, str | None]]]:
        """:meth:`neighbours` of every scope in one round trip."""
        out: dict[ScopeRef, dict[str, tuple[str | None, str | None]]] = {scope: {} for scope in wanted}
        ids = list(dict.fromkeys(i for fact_ids in wanted.values() for i in fact_ids))
        if not ids:
            return out
        live = "{a}.status = 'active' AND ({a}.expires_at IS NULL OR {a}.expires_at > %(now)s)"
        same = "{a}.scope_kind = f.scope_kind AND {a}.owner = f.owner AND {a}.session_id = f.session_id"
        sql = (
            f"SELECT f.scope_kind, f.owner, f.id, (SELECT p.id FROM asm_facts p WHERE {same.format(a='p')} AND "
            f"p.seq < f.seq AND {live.format(a='p')} ORDER BY p.seq DESC LIMIT 1), (SELECT n.id FROM asm_facts n "
            f"WHERE {same.format(a='n')} AND n.seq > f.seq AND {live.format(a='n')} ORDER BY n.seq LIMIT 1) "
            "FROM asm_facts f WHERE f.id = ANY(%(ids)s) AND f.session_id IS NOT NULL"
            " AND NOT starts_with(f.session_id, %(run)s)"  # a store run's session: no order to lend credit along
        )
        params = {"now": time.time(), "ids": ids, "run": RUN_SESSION_PREFIX}
        asked = {(scope.kind, scope.owner): (scope, set(fact_ids)) for scope, fact_ids in wanted.items()}
        for kind, owner, fid, prev, nxt in self._read(lambda c: c.execute(sql, params).fetchall()):
            scope, fact_ids = asked.get((kind, owner), (None, ()))
            if scope is not None and fid in fact_ids:
                out[scope][fid] = (prev, nxt)
        return out

    def stats(self, scope: ScopeRef) -> ScopeStats:
        def run(conn: psycopg.Connection[Any]) -> ScopeStats:
            counts = dict.fromkeys(("active", "forgotten", "superseded", "expired"), 0)
            for status, count in conn.execute(
                "SELECT CASE WHEN status = 'active' AND expires_at IS NOT NULL AND expires_at <= %s THEN 'expired' "
                "ELSE status END AS s, count(*) FROM asm_facts WHERE scope_kind = %s AND owner = %s GROUP BY s",
                (time.time(), scope.kind, scope.owner),
            ):
                counts[status] = count
            meta = dict(
                conn.execute(
                    "SELECT key, value FROM asm_meta WHERE scope_kind = %s AND owner = %s", (scope.kind, scope.owner)
                ).fetchall()
            )
            size, last = conn.execute(  # type: ignore[misc]
                "SELECT coalesce(sum(pg_column_size(f.*)), 0), (SELECT last_write FROM asm_scopes "
                "WHERE scope_kind = %s AND owner = %s) FROM asm_facts f WHERE scope_kind = %s AND owner = %s",
                (scope.kind, scope.owner, scope.kind, scope.owner),
            ).fetchone()
            dim = meta.get("embedding_dim")
            return ScopeStats(
                scope, counts, int(size), meta.get("embedding_model"), int(dim) if dim else None, last, SCHEMA_VERSION
            )

        result: ScopeStats = self._read(run)
        return result

    def exists(self, scope: ScopeRef) -> bool:
        """Whether the scope has been created; a scope once seen is remembered (scopes are never dropped),
        so the check every search makes costs a round trip only until then."""
        if scope in self._existing:
            return True
        found = bool(
            self._read(
                lambda c: c.execute(
                    "SELECT 1 FROM asm_scopes WHERE scope_kind = %s AND owner = %s", (scope.kind, scope.owner)
                ).fetchone()
            )
        )
        if found:
            self._existing.add(scope)
        return found

    def scopes(self, kind: ScopeKind | None = None) -> list[ScopeRef]:
        rows = self._read(
            lambda c: c.execute(
                "SELECT scope_kind, owner FROM asm_scopes WHERE %s::text IS NULL OR scope_kind = %s "
                "ORDER BY scope_kind, owner",
                (kind, kind),
            ).fetchall()
        )
        return [ScopeRef(r[0], r[1]) for r in rows]

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
        def select(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
            return _select_rows(conn, scope, table, where, limit, offset, after_seq, query_terms, oldest_first)

        return list(self._read(select))

    @contextlib.contextmanager
    def snapshot(self, scope: ScopeRef) -> Iterator[RowReader]:
        """A ``REPEATABLE READ, READ ONLY`` transaction on one pooled connection, held until exit: its first
        query fixes the snapshot every later read sees (writers are never blocked by it)."""
        try:
            with self._borrowed(self.pool) as conn, conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                conn.execute("SELECT 1")  # the snapshot is taken by the transaction's first query

                def read(table: str, where: Mapping[str, Any] | None = None, **options: Any) -> list[dict[str, Any]]:
                    return _select_rows(conn, scope, table, where, **options)

                yield read
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as exc:
            raise BackendUnavailableError(
                f"PostgreSQL at {redact(self.dsn)} failed during a consistent read of {scope}: {exc}"
            ) from exc

    # ------------------------------------------------------------------ change notification
    @property
    def channel(self) -> str:
        """The schema's notification channel (see :func:`.notify.channel`)."""
        return channel(self.schema)

    def subscribe(
        self, callback: Callable[[ScopeRef, str], None], *, on_listening: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        """Wake-ups for writes to this schema by any process or host; see :func:`.notify.subscribe`. For every
        change to a fact, lossless and resumable, use the store's ``subscribe`` (the change feed)."""
        return subscribe(self.dsn, self.channel, callback, self._listeners, on_listening)

    def close(self) -> None:
        for unsubscribe in list(self._listeners):
            unsubscribe()
        with self._pool_lock:  # a renewal under way installs no new pool after this
            self._closed = True
        self._saved.close()
        self.pool.close()


_COPY_FACTS = (
    f"COPY asm_facts (seq, scope_kind, owner, {', '.join(DRAFT_COLUMNS)}, reinforcement, version, updated_at, "
    "rev, embedding) FROM STDIN"
)
_COPY_FACTS_STEMS = _COPY_FACTS.replace("embedding) FROM", "embedding, stems) FROM")
_COPY_FACTS_BINARY = _COPY_FACTS + " (FORMAT BINARY)"
_COPY_FACT_COLUMNS = ["seq", "scope_kind", "owner", *DRAFT_COLUMNS, "reinforcement", "version", "updated_at", "rev"]
_EMBEDDING_AT = len(_COPY_FACT_COLUMNS)  # where a buffered fact row holds its vector (an array)
_PGCOPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
_PGCOPY_NULL = struct.pack("!i", -1)
_INT32, _INT64, _FLOAT64 = struct.Struct("!i"), struct.Struct("!q"), struct.Struct("!d")
_VECTOR_HEAD = struct.Struct("!hh")
# Each column type's binary COPY form (its type's ``recv`` function reads it), by type name (pgvector's in
# whichever schema it was installed), from the Python value a fact row holds: JSON columns as text, the vector as
# a float32 array (pgvector's form: dimension, 0, big-endian floats).
_BINARY_FORMS: dict[str, Callable[[Any], bytes]] = {
    "text": lambda v: v.encode(),
    "float8": lambda v: _FLOAT64.pack(v),
    "int8": lambda v: _INT64.pack(v),
    "int4": lambda v: _INT32.pack(v),
    "json": lambda v: v.encode(),
    "jsonb": lambda v: b"\x01" + v.encode(),  # jsonb's binary form: version 1, then the text
    "vector": lambda v: _VECTOR_HEAD.pack(len(v), 0) + np.asarray(v, dtype=">f4").tobytes(),
}


def _binary_copy(rows: Sequence[Sequence[Any]], forms: Sequence[Callable[[Any], bytes]]) -> bytes:
    """``rows`` as one binary ``COPY`` stream (header, tuples, trailer), each column in ``forms``' form.
    A vector sent as text costs ~0.2 ms to format (384 floats at 9 digits), more than the rest of its row."""
    out = [_PGCOPY_HEADER]
    count = struct.pack("!h", len(forms))
    for row in rows:
        out.append(count)
        for form, value in zip(forms, row, strict=True):
            if value is None:
                out.append(_PGCOPY_NULL)
            else:
                data = form(value)
                out += (_INT32.pack(len(data)), data)
    out.append(b"\xff\xff")
    return b"".join(out)


_COPY_AUDIT = "COPY asm_audit (scope_kind, owner, fact_id, event, actor, at, detail) FROM STDIN"
_INSERT_AUDIT = (
    "INSERT INTO asm_audit (scope_kind, owner, fact_id, event, actor, at, detail) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s::json)"
)


class _PgTx:
    """One write transaction on one scope's rows (the scope row locked): the
    :class:`~autogen_shared_memory.core.lifecycle.WriteTx` the lifecycle decides on.

    New facts and audit events are buffered and sent with ``COPY`` before any other statement of the
    transaction (and at its end), so every read still sees every earlier write. The lifecycle's lookups run
    on this process's copy of the scope (refreshed under the scope's lock, then kept in step with the
    transaction, as on SQLite): the near-duplicate check of the whole batch in memory, a content hash in
    memory unless it is already stored.
    """

    def __init__(
        self, backend: PostgresBackend, conn: psycopg.Connection[Any], scope: ScopeRef, cache: VectorIndex, rev: int
    ) -> None:
        self.backend, self.conn, self.scope, self.cache = backend, conn, scope, cache
        self.vectors: Any = np.zeros((0, 0), dtype=np.float32)
        self.key = (scope.kind, scope.owner)
        self.now = time.time()
        self.rev = rev + 1  # stamped on every fact row this transaction changes
        self.changed = 0  # fact rows changed
        self.touched = 0  # any row changed
        self.n_delta = 0
        self.reload = False  # rows gone or vectors replaced: every process reloads the scope
        self._refreshed = False
        self.near: NearestExisting | None = None
        self.inserts = BatchInserts()
        self._seqs: list[int] = []  # reserved sequence numbers, largest first
        self._new_facts: list[tuple[Any, ...]] = []
        self._new_audit: list[tuple[Any, ...]] = []
        self._vector_of: dict[int, npt.NDArray[np.float32]] = {}  # seq -> vector, of the facts inserted here

    @property
    def index(self) -> VectorIndex:
        """The scope's vectors and hashes, up to date (refreshed on first use: record-only and status-only
        transactions never load them)."""
        if not self._refreshed:
            self.backend._refresh(self.conn, self.scope, self.cache)
            self._refreshed = True
        return self.cache

    def _flush(self) -> None:
        """Send the buffered facts (``COPY``) and audit events (one pipelined round trip)."""
        if self._new_facts:
            forms = None if self.backend._writes_stems else self.backend._copy_forms(self.conn)
            if forms is not None:
                with self.conn.cursor() as cur, cur.copy(_COPY_FACTS_BINARY) as copy:
                    copy.write(_binary_copy(self._new_facts, forms))
            else:  # a column type without a binary form here (the stems' tsvector): as text
                statement = _COPY_FACTS_STEMS if self.backend._writes_stems else _COPY_FACTS
                with self.conn.cursor() as cur, cur.copy(statement) as copy:
                    for row in self._new_facts:
                        copy.write_row((*row[:_EMBEDDING_AT], _vec(row[_EMBEDDING_AT]), *row[_EMBEDDING_AT + 1 :]))
            self._new_facts.clear()
        if len(self._new_audit) > 16 and not self.conn._pipeline:
            with self.conn.cursor() as cur, cur.copy(_COPY_AUDIT) as copy:
                for row in self._new_audit:
                    copy.write_row(row)
            self._new_audit.clear()
        if self._new_audit:
            with self.conn.cursor() as cur:
                cur.executemany(_INSERT_AUDIT, self._new_audit)
            self._new_audit.clear()

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        self._flush()
        return self.conn.execute(sql, params)

    def _facts(self, where: str, params: Sequence[Any]) -> list[Fact]:
        rows = self._execute(
            f"SELECT {_FACT_COLUMNS} FROM asm_facts WHERE scope_kind = %s AND owner = %s AND ({where}) ORDER BY seq",
            (*self.key, *params),
        ).fetchall()
        return [fact_from_row(self.scope, row, self.now) for row in rows]

    def get(self, fact_ids: Sequence[str]) -> list[Fact]:
        return self._facts("id = ANY(%s)", (list(fact_ids),)) if fact_ids else []

    def live_by_hash(self, content_hash: str) -> list[Fact]:
        if hash_key(content_hash) not in self.index.hashes:  # no fact of the scope has this hash
            return []
        return self._facts(
            "content_hash = %s AND status = 'active' AND (expires_at IS NULL OR expires_at > %s)",
            (content_hash, self.now),
        )

    def live_hashes(self, content_hashes: Collection[str]) -> set[str]:
        return set(content_hashes)  # live_by_hash asks this process's copy of the scope first

    def _exact(self, seqs: npt.NDArray[np.int64], q: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """float32 cosines with stored facts (or ones this transaction is about to store)."""
        out = np.full(len(seqs), -np.inf, dtype=np.float32)
        mine = [i for i, s in enumerate(seqs) if int(s) in self._vector_of]
        if mine:
            matrix = np.stack([self._vector_of[int(seqs[i])] for i in mine])
            out[mine] = np.einsum("ij,j->i", matrix, q)
        rest = np.asarray([i for i in range(len(seqs)) if int(seqs[i]) not in self._vector_of], dtype=np.int64)
        if len(rest):
            out[rest] = self.backend._exact(self.conn, [(self.scope, seqs[rest])], q)[0]
        return out

    def settle(self) -> None:
        """Add this write's inserted facts to the cache (:meth:`insert` defers it): before anything reads
        the cache after an insert, and at the end."""
        if self.inserts.pending:
            self.inserts.settle(self.index, self.vectors)

    def nearest(self, j: int, floor: float, exact_from: float) -> list[tuple[str, float]]:
        if self.near is None or len(self.near.earlier[j]):
            self.settle()  # the lookup reads the cache, and the positions of this write's earlier inserts
        if self.near is None:
            self.near = NearestExisting(
                self._exact, self.index, self.vectors, self.now, floor, exact_from, self.inserts.position
            )
        return [(self.index.ids[pos], cos) for pos, cos in self.near.lookup(j)]

    def _next_seq(self, remaining: int) -> int:
        """A sequence number for a new fact: reserved for the rest of the batch in one round trip (inside
        the scope's lock, so a scope's facts are numbered in the order they are written)."""
        if not self._seqs:
            rows = self.conn.execute(
                "SELECT nextval(%s::regclass) FROM generate_series(1, %s)",
                (f"{self.backend.schema}.asm_facts_seq_seq", max(1, remaining)),
            ).fetchall()
            self._seqs = sorted((int(r[0]) for r in rows), reverse=True)
        return self._seqs.pop()

    def insert(self, draft: Draft, j: int) -> None:
        index = self.index
        vector = np.asarray(self.vectors[j], dtype=np.float32).reshape(-1)
        seq = self._next_seq(len(self.vectors) - j)
        row = (seq, *self.key, *draft_values(draft), 1, 1, self.now, self.rev, vector)
        self._new_facts.append((*row, fact_stems(draft.content)) if self.backend._writes_stems else row)
        self._vector_of[seq] = vector
        self.inserts.add(j, seq, draft.id, draft.status == "active", draft.expires_at)
        index.hashes.add([hash_key(draft.content_hash)])
        self.changed += 1
        self.n_delta += 1

    def update(self, fact_id: str, changes: Mapping[str, Any]) -> None:
        sets = [f"{_q(n)} = %s{_JSON_CASTS.get(n, '')}" for n in changes]
        values = [json.dumps(list(v)) if isinstance(v, tuple) else v for v in changes.values()]
        row = self._execute(
            f"UPDATE asm_facts SET {', '.join(sets)}, version = version + 1, updated_at = %s, rev = %s "
            "WHERE scope_kind = %s AND owner = %s AND id = %s RETURNING seq, status, expires_at",
            (*values, self.now, self.rev, *self.key, fact_id),
        ).fetchone()
        self.changed += 1
        self.settle()  # the fact may be one this write inserted
        if self._refreshed and row is not None:  # keep this transaction's later lookups right
            pos = self.cache.position(int(row[0]))
            if pos is not None:
                self.cache.set_status(pos, row[1], row[2])

    def purgeable(self) -> list[Fact]:
        return self._facts("status <> 'active' OR expires_at IS NOT NULL", ())

    def delete(self, fact_ids: Sequence[str]) -> None:
        self._execute(
            "DELETE FROM asm_facts WHERE scope_kind = %s AND owner = %s AND id = ANY(%s)", (*self.key, list(fact_ids))
        )
        self.changed += len(fact_ids)
        self.n_delta -= len(fact_ids)
        self.reload = True

    def audit(self, fact_id: str, event: str, actor: str, detail: Mapping[str, Any]) -> None:
        self._new_audit.append((*self.key, fact_id, event, actor, self.now, json.dumps(dict(detail), default=str)))

    # the row operations of :class:`~autogen_shared_memory.backends.base.ScopeTx`
    def rows(
        self,
        table: str,
        where: Mapping[str, Any] | None = None,
        *,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        self._flush()
        return _select_rows(self.conn, self.scope, table, where, limit, 0, after_seq, (), True)

    def add_rows(self, table: str, rows: Sequence[Mapping[str, Any]], on_conflict: OnConflict = "fail") -> list[int]:
        self._flush()
        seqs: list[int] = []
        if table == "facts":
            self._seqs.clear()  # numbered by the table from here on, after every reserved number
        for row in rows:
            values = {c: v for c, v in row.items() if c not in ("seq", "rev")}
            casts = _casts(table)
            if table == "facts":
                values["embedding"] = _vec(np.frombuffer(values.pop("embedding"), dtype=np.float32))
                values["rev"] = self.rev
                if self.backend._writes_stems:
                    values["stems"] = fact_stems(values["content"])
                    casts = {**casts, "stems": "::tsvector"}
            elif table in TABLES and (fts := TABLES[table].fts) is not None and fts in values:
                values["tsv"] = tsvector_literal(values[fts])
                casts = {**casts, "tsv": "::tsvector"}
            columns = list(values)
            sql = (
                f"INSERT INTO asm_{_table(table)} (scope_kind, owner, {', '.join(_q(c) for c in columns)}) "
                f"VALUES (%s, %s, {', '.join('%s' + casts.get(c, '') for c in columns)})"
            )
            if on_conflict != "fail" and table != "audit":
                key = {"meta": ("key",), "facts": ("id",)}.get(table) or table_spec(table).key
                updates = [c for c in columns if c not in key]
                action = "NOTHING"
                if on_conflict == "update" and updates and table != "facts":
                    action = f"UPDATE SET {', '.join(f'{_q(c)} = excluded.{_q(c)}' for c in updates)}"
                sql += f" ON CONFLICT (scope_kind, owner, {', '.join(_q(c) for c in key)}) DO {action}"
            returned = self.conn.execute(
                sql + (" RETURNING seq" if table != "meta" else " RETURNING 0"), (*self.key, *values.values())
            ).fetchone()
            if returned is not None:
                seqs.append(int(returned[0]))
                self.touched += 1
                if table == "facts":
                    self.changed += 1
                    self.n_delta += 1
                    self.reload = True  # vectors came in: every process reloads the scope
        return seqs

    def update_rows(self, table: str, where: Mapping[str, Any], values: Mapping[str, Any]) -> int:
        spec = table_spec(table)
        spec.check_mutable()
        clause, params = _where(where, table)
        casts = _casts(table)
        if spec.fts is not None and spec.fts in values:
            values = {**values, "tsv": tsvector_literal(values[spec.fts])}
            casts["tsv"] = "::tsvector"
        sets = ", ".join(f"{_q(c)} = %s{casts.get(c, '')}" for c in values)
        count = self._execute(
            f"UPDATE asm_{table} SET {sets} WHERE scope_kind = %s AND owner = %s AND {clause}",
            (*values.values(), *self.key, *params),
        ).rowcount
        self.touched += count
        return int(count)

    def delete_rows(
        self, table: str, where: Mapping[str, Any] | None = None, before: float | None = None, time_column: str = ""
    ) -> int:
        clause, params = _where(where, table)
        if before is not None:
            clause += f" AND {_q(time_column)} < %s"
            params.append(before)
        if table in TABLES and table_spec(table).append_only:  # the explicit operator purge, in this transaction
            self._execute("SET LOCAL asm.allow_purge = 'on'")
        count = self._execute(
            f"DELETE FROM asm_{_table(table)} WHERE scope_kind = %s AND owner = %s AND {clause}", (*self.key, *params)
        ).rowcount
        self.touched += count
        if table == "facts" and count:
            self.changed += count
            self.n_delta -= count
            self.reload = True
        return int(count)

    def set_vectors(self, fact_ids: Sequence[str], vectors: Vectors) -> None:
        self._flush()
        with self.conn.cursor() as cur:
            cur.executemany(
                "UPDATE asm_facts SET embedding = %s::vector, rev = %s "
                "WHERE scope_kind = %s AND owner = %s AND id = %s",
                [(_vec(v), self.rev, *self.key, i) for i, v in zip(fact_ids, vectors, strict=True)],
            )
        self.changed += len(fact_ids)
        self.reload = True  # vectors replaced: every process reloads the scope

    def finish(self, event: str) -> None:
        """Send what is buffered, move the scope's revision on and notify listeners, when anything changed
        (the audit events, the scope's row and the notification in one pipelined round trip)."""
        self.settle()
        if self._new_facts or len(self._new_audit) > 16:
            self._flush()  # COPY: not in a pipeline
        with self.conn.pipeline():
            self._flush()
            if self.changed:
                self.conn.execute(
                    "UPDATE asm_scopes SET n_facts = n_facts + %s, last_write = %s, rev = %s, epoch = epoch + %s "
                    "WHERE scope_kind = %s AND owner = %s",
                    (self.n_delta, self.now, self.rev, int(self.reload), *self.key),
                )
            if self.changed or self.touched:
                notify(self.conn, self.backend.channel, self.scope, event)


def _table(name: str) -> str:
    """A table name a statement may touch (never built from anything else)."""
    if name not in STORAGE_TABLES and name not in TABLES:
        raise ValueError(f"no table {name!r}")
    return name


def _casts(table: str) -> dict[str, str]:
    """The SQL casts of the columns of ``table`` that are not plain scalars."""
    if table == "facts":
        return {**_JSON_CASTS, "embedding": "::vector"}
    if table == "audit":
        return {"detail": "::json"}
    if table == "meta":
        return {}
    return dict.fromkeys(table_spec(table).json_columns, "::json")


def _where(where: Mapping[str, Any] | None, table: str) -> tuple[str, list[Any]]:
    """``where`` as SQL: equality, NULL for None; a ``json`` column compares its text, as SQLite does (``json``
    has no equality operator)."""
    items = (where or {}).items()
    as_text = [c for c, cast in _casts(table).items() if cast == "::json"]
    columns = [f"{_q(c)}::text" if c in as_text else _q(c) for c, _ in items]
    clauses = [f"{c} = %s" if v is not None else f"{c} IS NULL" for c, (_, v) in zip(columns, items, strict=True)]
    return " AND ".join(clauses) or "TRUE", [v for _, v in items if v is not None]


def _select_rows(
    conn: psycopg.Connection[Any],
    scope: ScopeRef,
    table: str,
    where: Mapping[str, Any] | None,
    limit: int | None = None,
    offset: int = 0,
    after_seq: int | None = None,
    query_terms: Sequence[str] = (),
    oldest_first: bool = True,
) -> list[dict[str, Any]]:
    """The rows of :meth:`PostgresBackend.rows` (JSON as text, vectors as float32 bytes)."""
    if query_terms:
        fts_column(table)  # a record table with a full-text index
    clause, params = _where(where, table)
    clauses = ["scope_kind = %s", "owner = %s", clause]
    params = [scope.kind, scope.owner, *params]
    if table == "meta":
        columns, order = "key, value", "key"
    else:
        if table == "facts":
            columns = f"{_FACT_COLUMNS}, embedding::text"
        elif table == "audit":
            columns = "seq, fact_id, event, actor, at, detail::text"
        else:
            spec = table_spec(table)
            columns = ", ".join(
                ["seq", *(f'"{c}"::text AS "{c}"' if c in spec.json_columns else f'"{c}"' for c in spec.columns)]
            )
        order = "seq ASC" if oldest_first else "seq DESC"
        if after_seq is not None:
            clauses.append("seq > %s")
            params.append(after_seq)
    source = f"asm_{_table(table)}"
    if query_terms:
        query = tsquery_literal(query_terms)
        if not query:
            return []
        source = f"{source}, (SELECT %s::tsquery) AS q(query)"
        params = [query, *params]
        clauses.append("tsv @@ q.query")
        order = "ts_rank(tsv, q.query) DESC, seq"
    cur = conn.execute(
        f"SELECT {columns} FROM {source} WHERE {' AND '.join(clauses)} ORDER BY {order} LIMIT %s OFFSET %s",
        (*params, limit, offset),
    )
    assert cur.description is not None
    names = [d.name.split("::")[0] for d in cur.description]
    found = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    if table == "facts":
        for row in found:
            row["embedding"] = _parse_vec(row["embedding"])
    return found


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
