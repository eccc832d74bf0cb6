"""The server backend: every scope of a deployment in one PostgreSQL database (pgvector + full text).

The same contract as the SQLite backend, mapped to rows: every table carries ``(scope_kind, owner)``
(``owner`` is ``''`` for global) and every key, index and query is prefixed by it, so the scopes stay as
isolated as separate files are. A row per scope in ``asm_scopes`` is locked (``SELECT ... FOR UPDATE``)
by every read-then-write, which serialises writers of one scope across hosts exactly like
``BEGIN IMMEDIATE`` does on a file. Vectors are pgvector columns searched by cosine distance (HNSW);
lexical search is a ``tsvector`` column (GIN) queried with ``plainto_tsquery`` per term, so user text
can never be a syntax error. Writes ``NOTIFY`` the schema's channel so other hosts learn of them without polling.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...core.records import TABLES, table_spec
from ...core.types import (
    Draft,
    EmbeddingModelMismatchError,
    Fact,
    Filters,
    ScopeKind,
    ScopeRef,
    ScopeStats,
    kind_of_fact_id,
)
from ...embedding import Vectors
from ..base import (
    DRAFT_COLUMNS,
    STORAGE_TABLES,
    Backend,
    OnConflict,
    ScopeTx,
    T,
    as_of_clause,
    draft_values,
    fact_from_row,
)

try:
    import psycopg
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # pragma: no cover - optional dependency
    raise ImportError(
        "the PostgreSQL backend needs psycopg 3 and psycopg-pool: pip install 'autogen-shared-memory[postgres]'"
    ) from exc

from .errors import BackendUnavailableError, redact
from .notify import channel, notify, subscribe
from .schema import SCHEMA_VERSION, ensure_extension, migrate

logger = logging.getLogger("autogen_shared_memory")

_FACT_COLUMNS = (
    "seq, id, content, created_by, created_at, confidence, tags::text, category, metadata::text, session_id, "
    "expires_at, supersedes::text, superseded_by, status, tombstone_by, tombstone_at, tombstone_reason, "
    "reinforcement, content_hash, version, updated_at, stated_by::text"
)
_JSON_COLUMNS = frozenset({"tags", "metadata", "supersedes", "stated_by"})


def _vec(vector: Any) -> str:
    # 9 significant digits round-trip a float32 exactly
    return "[" + ",".join(f"{x:.9g}" for x in np.asarray(vector, dtype=np.float32).reshape(-1)) + "]"


def _parse_vec(text: str | None) -> bytes | None:
    if text is None:
        return None
    return np.asarray(json.loads(text), dtype=np.float32).tobytes()


class PostgresBackend(Backend):
    """Facts and records of every scope in one PostgreSQL database (needs the pgvector extension).

    Args:
        dsn: a libpq connection string or URI.
        schema: the PostgreSQL schema holding the tables (one deployment per schema).
        min_size, max_size: connection pool bounds.
        retries: how often an operation interrupted by a dropped connection is retried (each attempt is a
            whole transaction, so nothing is ever half-written).
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "autogen_shared_memory",
        min_size: int = 1,
        max_size: int = 8,
        retries: int = 2,
        connect_timeout: float = 10.0,
    ) -> None:
        if not isinstance(schema, str) or not schema.replace("_", "").isalnum() or not schema[0].isalpha():
            raise ValueError(f"schema must be a simple identifier (letters, digits, _), got {schema!r}")
        self.dsn = dsn
        self.schema = schema
        self.retries = retries
        self._dims: set[int] = set()
        self._listeners: list[tuple[threading.Event, threading.Thread]] = []
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=int(connect_timeout)) as conn:
                ensure_extension(conn, dsn)
                migrate(conn, self.schema, dsn)
        except psycopg.OperationalError as exc:
            raise BackendUnavailableError(f"cannot connect to PostgreSQL at {redact(dsn)}: {exc}".strip()) from exc
        self.pool: ConnectionPool[Any] = ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            open=True,
            configure=self._configure,
            kwargs={"connect_timeout": int(connect_timeout)},
        )

    def __repr__(self) -> str:
        return f"PostgresBackend({redact(self.dsn)!r}, schema={self.schema!r})"

    # ------------------------------------------------------------------ setup
    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"SET search_path TO {self.schema}, public")
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        conn.commit()

    def _ensure_vector_index(self, conn: psycopg.Connection[Any], dim: int) -> None:
        """An HNSW cosine index for vectors of this dimension (created once, on first use)."""
        if dim in self._dims:
            return
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS asm_facts_hnsw_{dim} ON asm_facts USING hnsw "
            f"((embedding::vector({dim})) vector_cosine_ops) WHERE vector_dims(embedding) = {dim}"
        )
        self._dims.add(dim)

    # ------------------------------------------------------------------ connections and retries
    def _run(self, fn: Callable[[psycopg.Connection[Any]], Any], *, write: bool) -> Any:
        """Run ``fn`` in one transaction; retry it whole when the connection drops (never half-written)."""
        attempt = 0
        while True:
            try:
                with self.pool.connection() as conn, conn.transaction():
                    return fn(conn)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                attempt += 1
                if attempt > self.retries or self.pool.closed:
                    raise BackendUnavailableError(
                        f"PostgreSQL at {redact(self.dsn)} failed during a {'write' if write else 'read'} "
                        f"(nothing was half-written): {exc}"
                    ) from exc
                logger.warning("retrying after a dropped PostgreSQL connection: %s", exc)
                self.pool.check()
                time.sleep(0.05 * attempt)

    @staticmethod
    def _lock_scope(conn: psycopg.Connection[Any], scope: ScopeRef) -> None:
        conn.execute(
            "INSERT INTO asm_scopes (scope_kind, owner, created_at) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (scope.kind, scope.owner, time.time()),
        )
        conn.execute(
            "SELECT 1 FROM asm_scopes WHERE scope_kind = %s AND owner = %s FOR UPDATE", (scope.kind, scope.owner)
        )

    @staticmethod
    def _audit(
        conn: psycopg.Connection[Any], scope: ScopeRef, fact_id: str, event: str, actor: str, at: float, **detail: Any
    ) -> None:
        conn.execute(
            "INSERT INTO asm_audit (scope_kind, owner, fact_id, event, actor, at, detail) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb)",
            (scope.kind, scope.owner, fact_id, event, actor, at, json.dumps(detail, default=str)),
        )

    # ------------------------------------------------------------------ writes
    def transact(self, scope: ScopeRef, fn: Callable[[ScopeTx], T], event: str = "write") -> T:
        def run(conn: psycopg.Connection[Any]) -> T:
            self._lock_scope(conn, scope)
            tx = _PgTx(self, conn, scope)
            result = fn(tx)
            tx.finish(event)
            return result

        result: T = self._run(run, write=True)
        return result

    # ------------------------------------------------------------------ reads
    def _read(self, fn: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        return self._run(fn, write=False)

    def get(self, scope: ScopeRef, fact_ids: Sequence[str]) -> list[Fact]:
        if not fact_ids:
            return []
        rows = self._read(
            lambda c: c.execute(
                f"SELECT {_FACT_COLUMNS} FROM asm_facts WHERE scope_kind = %s AND owner = %s AND id = ANY(%s)",
                (scope.kind, scope.owner, list(fact_ids)),
            ).fetchall()
        )
        now = time.time()
        by_id = {r[1]: fact_from_row(scope, r, now) for r in rows}
        return [by_id[i] for i in fact_ids if i in by_id]

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
            clauses.append(as_of_clause("", "%s"))
            params.extend([filters.as_of] * 3)
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
        if not terms:
            return []
        where, params = self._filter_sql(filters, time.time())
        query = " || ".join(["plainto_tsquery('english', %s)"] * len(terms))
        sql = (
            f"SELECT id, ts_rank(tsv, q.query) AS score FROM asm_facts, ({'SELECT ' + query}) AS q(query) "
            f"WHERE scope_kind = %s AND owner = %s AND tsv @@ q.query AND {where} ORDER BY score DESC, seq LIMIT %s"
        )

        def run(conn: psycopg.Connection[Any]) -> list[tuple[ScopeRef, str, float]]:
            hits: list[tuple[ScopeRef, str, float]] = []
            for scope in scopes:
                rows = conn.execute(sql, (*terms, scope.kind, scope.owner, *params, limit)).fetchall()
                hits.extend((scope, r[0], float(r[1])) for r in rows)
            return hits

        return sorted(self._read(run), key=lambda h: -h[2])

    def semantic(
        self, scopes: Sequence[ScopeRef], vector: Vectors, limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        hits = [(scope, fid, cos) for scope in scopes for fid, cos in self._semantic(scope, vector, limit, filters)]
        return sorted(hits, key=lambda h: -h[2])[:limit]

    def _semantic(self, scope: ScopeRef, vector: Vectors, limit: int, filters: Filters) -> list[tuple[str, float]]:
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        dim = int(q.shape[0])
        where, params = self._filter_sql(filters, time.time())
        literal = _vec(q)

        def run(conn: psycopg.Connection[Any]) -> list[tuple[str, float]]:
            stored = conn.execute(
                "SELECT value FROM asm_meta WHERE scope_kind = %s AND owner = %s AND key = 'embedding_dim'",
                (scope.kind, scope.owner),
            ).fetchone()
            if stored is not None and int(stored[0]) != dim:
                raise EmbeddingModelMismatchError(f"query vector has {dim} dimensions, {scope} holds {stored[0]}-d")
            rows = conn.execute(
                f"SELECT id, 1 - (embedding::vector({dim}) <=> %s::vector({dim})) FROM asm_facts "
                f"WHERE scope_kind = %s AND owner = %s AND vector_dims(embedding) = %s AND {where} "
                f"ORDER BY embedding::vector({dim}) <=> %s::vector({dim}) LIMIT %s",
                (literal, scope.kind, scope.owner, dim, *params, literal, limit),
            ).fetchall()
            return [(r[0], float(r[1])) for r in rows]

        return list(self._read(run))

    def neighbours(self, scope: ScopeRef, fact_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        if not fact_ids:
            return {}
        live = "{a}.status = 'active' AND ({a}.expires_at IS NULL OR {a}.expires_at > %(now)s)"
        same = "{a}.scope_kind = f.scope_kind AND {a}.owner = f.owner AND {a}.session_id = f.session_id"
        sql = (
            f"SELECT f.id, (SELECT p.id FROM asm_facts p WHERE {same.format(a='p')} AND p.seq < f.seq AND "
            f"{live.format(a='p')} ORDER BY p.seq DESC LIMIT 1), (SELECT n.id FROM asm_facts n WHERE "
            f"{same.format(a='n')} AND n.seq > f.seq AND {live.format(a='n')} ORDER BY n.seq LIMIT 1) FROM asm_facts f "
            "WHERE f.scope_kind = %(kind)s AND f.owner = %(owner)s AND f.id = ANY(%(ids)s) AND f.session_id IS NOT NULL"
        )
        params = {"now": time.time(), "kind": scope.kind, "owner": scope.owner, "ids": list(fact_ids)}
        rows = self._read(lambda c: c.execute(sql, params).fetchall())
        return {r[0]: (r[1], r[2]) for r in rows}

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
        return bool(
            self._read(
                lambda c: c.execute(
                    "SELECT 1 FROM asm_scopes WHERE scope_kind = %s AND owner = %s", (scope.kind, scope.owner)
                ).fetchone()
            )
        )

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
        return list(
            self._read(
                lambda conn: _select_rows(
                    conn, scope, table, where, limit, offset, after_seq, query_terms, oldest_first
                )
            )
        )

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
        for stop, thread in list(self._listeners):
            stop.set()
            thread.join(timeout=5)
        self._listeners.clear()
        self.pool.close()


class _PgTx:
    """One write transaction on one scope's rows (the scope row locked): the
    :class:`~autogen_shared_memory.core.lifecycle.WriteTx` the lifecycle decides on."""

    CANDIDATES = 8

    def __init__(self, backend: PostgresBackend, conn: psycopg.Connection[Any], scope: ScopeRef) -> None:
        self.backend, self.conn, self.scope = backend, conn, scope
        self.vectors: Any = np.zeros((0, 0), dtype=np.float32)
        self.key = (scope.kind, scope.owner)
        self.now = time.time()
        self.changed = 0  # fact rows changed
        self.touched = 0  # any row changed
        self.n_delta = 0

    def _facts(self, where: str, params: Sequence[Any]) -> list[Fact]:
        rows = self.conn.execute(
            f"SELECT {_FACT_COLUMNS} FROM asm_facts WHERE scope_kind = %s AND owner = %s AND ({where}) ORDER BY seq",
            (*self.key, *params),
        ).fetchall()
        return [fact_from_row(self.scope, row, self.now) for row in rows]

    def get(self, fact_ids: Sequence[str]) -> list[Fact]:
        return self._facts("id = ANY(%s)", (list(fact_ids),)) if fact_ids else []

    def live_by_hash(self, content_hash: str) -> list[Fact]:
        return self._facts(
            "content_hash = %s AND status = 'active' AND (expires_at IS NULL OR expires_at > %s)",
            (content_hash, self.now),
        )

    def nearest(self, j: int, floor: float, exact_from: float) -> list[tuple[str, float]]:
        if floor > 1.0:
            return []
        dim = int(self.vectors.shape[1])
        literal = _vec(self.vectors[j])
        rows = self.conn.execute(
            f"SELECT id, 1 - (embedding::vector({dim}) <=> %s::vector({dim})) FROM asm_facts "
            "WHERE scope_kind = %s AND owner = %s AND status = 'active' AND vector_dims(embedding) = %s "
            f"AND (expires_at IS NULL OR expires_at > %s) ORDER BY embedding::vector({dim}) <=> %s::vector({dim}) "
            "LIMIT %s",
            (literal, *self.key, dim, self.now, literal, self.CANDIDATES),
        ).fetchall()
        return [(fid, float(cos)) for fid, cos in rows if cos >= floor]

    def insert(self, draft: Draft, j: int) -> None:
        marks = ", ".join("%s::jsonb" if c in _JSON_COLUMNS else "%s" for c in DRAFT_COLUMNS)
        self.conn.execute(
            f"INSERT INTO asm_facts (scope_kind, owner, {', '.join(DRAFT_COLUMNS)}, reinforcement, version, "
            f"updated_at, embedding) VALUES (%s, %s, {marks}, 1, 1, %s, %s::vector)",
            (*self.key, *draft_values(draft), self.now, _vec(self.vectors[j])),
        )
        self.backend._ensure_vector_index(self.conn, int(self.vectors.shape[1]))
        self.changed += 1
        self.n_delta += 1

    def update(self, fact_id: str, changes: Mapping[str, Any]) -> None:
        sets = [f"{_q(n)} = %s{'::jsonb' if n in _JSON_COLUMNS else ''}" for n in changes]
        values = [json.dumps(list(v)) if isinstance(v, tuple) else v for v in changes.values()]
        self.conn.execute(
            f"UPDATE asm_facts SET {', '.join(sets)}, version = version + 1, updated_at = %s "
            "WHERE scope_kind = %s AND owner = %s AND id = %s",
            (*values, self.now, *self.key, fact_id),
        )
        self.changed += 1

    def purgeable(self) -> list[Fact]:
        return self._facts("status <> 'active' OR expires_at IS NOT NULL", ())

    def delete(self, fact_ids: Sequence[str]) -> None:
        self.conn.execute(
            "DELETE FROM asm_facts WHERE scope_kind = %s AND owner = %s AND id = ANY(%s)", (*self.key, list(fact_ids))
        )
        self.changed += len(fact_ids)
        self.n_delta -= len(fact_ids)

    def audit(self, fact_id: str, event: str, actor: str, detail: Mapping[str, Any]) -> None:
        self.conn.execute(
            "INSERT INTO asm_audit (scope_kind, owner, fact_id, event, actor, at, detail) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb)",
            (*self.key, fact_id, event, actor, self.now, json.dumps(dict(detail), default=str)),
        )

    # the row operations of :class:`~autogen_shared_memory.backends.base.ScopeTx`
    def rows(self, table: str, where: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        return _select_rows(self.conn, self.scope, table, where, None, 0, None, (), True)

    def add_rows(self, table: str, rows: Sequence[Mapping[str, Any]], on_conflict: OnConflict = "fail") -> list[int]:
        seqs: list[int] = []
        for row in rows:
            values = {c: v for c, v in row.items() if c != "seq"}
            casts = _casts(table)
            if table == "facts":
                vector = np.frombuffer(values.pop("embedding"), dtype=np.float32)
                values["embedding"] = _vec(vector)
                self.backend._ensure_vector_index(self.conn, int(vector.shape[0]))
            elif table == "meta" and values.get("key") == "embedding_dim":
                self.backend._ensure_vector_index(self.conn, int(values["value"]))
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
        return seqs

    def update_rows(self, table: str, where: Mapping[str, Any], values: Mapping[str, Any]) -> int:
        spec = table_spec(table)
        spec.check_mutable()
        clause, params = _where(where)
        sets = ", ".join(f"{_q(c)} = %s{_casts(table).get(c, '')}" for c in values)
        count = self.conn.execute(
            f"UPDATE asm_{table} SET {sets} WHERE scope_kind = %s AND owner = %s AND {clause}",
            (*values.values(), *self.key, *params),
        ).rowcount
        self.touched += count
        return int(count)

    def delete_rows(
        self, table: str, where: Mapping[str, Any] | None = None, before: float | None = None, time_column: str = ""
    ) -> int:
        clause, params = _where(where)
        if before is not None:
            clause += f" AND {_q(time_column)} < %s"
            params.append(before)
        if table in TABLES and table_spec(table).append_only:  # the explicit operator purge, in this transaction
            self.conn.execute("SET LOCAL asm.allow_purge = 'on'")
        count = self.conn.execute(
            f"DELETE FROM asm_{_table(table)} WHERE scope_kind = %s AND owner = %s AND {clause}", (*self.key, *params)
        ).rowcount
        self.touched += count
        return int(count)

    def set_vectors(self, fact_ids: Sequence[str], vectors: Vectors) -> None:
        for fact_id, vector in zip(fact_ids, vectors, strict=True):
            self.conn.execute(
                "UPDATE asm_facts SET embedding = %s::vector WHERE scope_kind = %s AND owner = %s AND id = %s",
                (_vec(vector), *self.key, fact_id),
            )
            self.backend._ensure_vector_index(self.conn, int(np.asarray(vector).reshape(-1).shape[0]))
        self.changed += len(fact_ids)

    def finish(self, event: str) -> None:
        """Count the scope's facts and notify listeners, when anything changed."""
        if self.changed:
            self.conn.execute(
                "UPDATE asm_scopes SET n_facts = n_facts + %s, last_write = %s WHERE scope_kind = %s AND owner = %s",
                (self.n_delta, self.now, *self.key),
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
        return {**dict.fromkeys(_JSON_COLUMNS, "::jsonb"), "embedding": "::vector"}
    if table == "audit":
        return {"detail": "::jsonb"}
    if table == "meta":
        return {}
    return dict.fromkeys(table_spec(table).json_columns, "::jsonb")


def _where(where: Mapping[str, Any] | None) -> tuple[str, list[Any]]:
    items = (where or {}).items()
    clauses = [f"{_q(c)} = %s" if v is not None else f"{_q(c)} IS NULL" for c, v in items]
    return " AND ".join(clauses) or "TRUE", [v for _, v in items if v is not None]


def _select_rows(
    conn: psycopg.Connection[Any],
    scope: ScopeRef,
    table: str,
    where: Mapping[str, Any] | None,
    limit: int | None,
    offset: int,
    after_seq: int | None,
    query_terms: Sequence[str],
    oldest_first: bool,
) -> list[dict[str, Any]]:
    """The rows of :meth:`PostgresBackend.rows` (JSON as text, vectors as float32 bytes)."""
    clause, params = _where(where)
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
        query = " || ".join(["plainto_tsquery('english', %s)"] * len(query_terms))
        source = f"{source}, (SELECT {query}) AS q(query)"
        params = [*query_terms, *params]
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
