"""An in-process backend written from the contract's docstrings alone (base.py, core/, search/): a third
backend beside SQLite and PostgreSQL, for tests of code that uses a store, and an example of the contract.

Each scope is a dict of tables (``meta``, ``facts``, ``audit``, the record tables), each table a dict from
its key to a row (a dict of plain SQL scalars, ``seq`` included), in insertion order. Rows are never
mutated in place: a write transaction copies a table the first time it changes it and commits by swapping
the scope's tables in one assignment, so readers see the last committed state without a lock and a
raising ``fn`` leaves nothing behind. A lock per scope serialises writers (within this process: an
in-process backend has no other processes to serialise with).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ..backends.base import (
    DRAFT_COLUMNS,
    FACT_COLUMN_NAMES,
    STORAGE_TABLES,
    Backend,
    OnConflict,
    RowReader,
    ScopeTx,
    draft_values,
    fact_from_row,
)
from ..core.records import TABLES, fts_column, table_spec
from ..core.types import (
    RUN_SESSION_PREFIX,
    Draft,
    EmbeddingModelMismatchError,
    Fact,
    Filters,
    ScopeKind,
    ScopeRef,
    ScopeStats,
)
from ..embedding import Vectors
from ..search.lexical import idf
from ..search.text import fold, fts5_terms, stem

T = TypeVar("T")
Row = dict[str, Any]
Table = dict[Any, Row]
SCHEMA_VERSION = 1
K1, B = 1.2, 0.75  # FTS5's bm25() defaults
_TOKENS = re.compile(r"[^\W_]+", re.UNICODE)  # the words search.text.stems_of takes


def _key_of(table: str, row: Mapping[str, Any]) -> Any:
    if table == "meta":
        return row["key"]
    if table == "facts":
        return row["id"]
    if table == "audit":
        return None  # no key: always inserted under its seq
    return tuple(row.get(c) for c in table_spec(table).key)


def _columns(table: str) -> tuple[str, ...]:
    if table == "meta":
        return ("key", "value")
    if table == "facts":
        return (*FACT_COLUMN_NAMES[1:], "embedding")
    if table == "audit":
        return ("fact_id", "event", "actor", "at", "detail")
    return tuple(table_spec(table).columns)


def _matches(row: Mapping[str, Any], where: Mapping[str, Any] | None) -> bool:
    return not where or all(row.get(c) == v for c, v in where.items())


@lru_cache(maxsize=65536)  # every lexical search tokenises the facts of its scopes
def _tokens(text: str) -> tuple[str, ...]:
    return tuple(stem(w) for w in _TOKENS.findall(fold(text)))


def _vector(row: Mapping[str, Any]) -> npt.NDArray[np.float32]:
    return np.frombuffer(row["embedding"], dtype=np.float32)


def _fact(scope: ScopeRef, row: Mapping[str, Any], now: float) -> Fact:
    return fact_from_row(scope, [row.get(c) for c in FACT_COLUMN_NAMES], now)


def _live(row: Mapping[str, Any], now: float) -> bool:
    return row["status"] == "active" and (row["expires_at"] is None or row["expires_at"] > now)


def _passes(row: Mapping[str, Any], filters: Filters, now: float, tables: Mapping[str, Any]) -> bool:
    """The filters, as :class:`Filters` and :func:`base.as_of_clause` describe them."""
    if filters.as_of is not None:
        t = filters.as_of
        events = [(a["event"], a["at"]) for a in tables["audit"].values() if a["fact_id"] == row["id"]]
        if any(e == "rejected" or (e == "approved" and at > t) for e, at in events):  # held for review then
            return False
        if not (
            row["created_at"] <= t
            and (
                row["status"] == "active"
                or (row["status"] in ("superseded", "forgotten") and (row["tombstone_at"] or 0) > t)
            )
            and (row["expires_at"] is None or row["expires_at"] > t)
        ):
            return False
    elif not filters.include_inactive and not _live(row, now):
        return False
    if filters.tags and not set(filters.tags) <= set(json.loads(row["tags"] or "[]")):
        return False
    if filters.created_by and row["created_by"] not in filters.created_by:
        return False
    if filters.category is not None and row["category"] != filters.category:
        return False
    if filters.since is not None and row["created_at"] < filters.since:
        return False
    if filters.until is not None and row["created_at"] >= filters.until:
        return False
    return filters.min_confidence is None or row["confidence"] >= filters.min_confidence


def _phrases(terms: Sequence[str]) -> list[tuple[str, ...]]:
    """Each term as FTS5 reads a quoted string: its tokens' stems, a phrase when there are several."""
    return list(dict.fromkeys(p for p in (_tokens(t) for t in terms) if p))


def _occurrences(doc: tuple[str, ...], phrase: tuple[str, ...]) -> int:
    if len(phrase) == 1:
        return doc.count(phrase[0])
    return sum(1 for i in range(len(doc) - len(phrase) + 1) if doc[i : i + len(phrase)] == phrase)


def _bm25(docs: Sequence[tuple[str, ...]], phrases: Sequence[tuple[str, ...]]) -> list[float]:
    """FTS5's bm25 of each document (stems) for the OR of ``phrases``, as a relevance: higher is better."""
    n = len(docs)
    if not n:
        return []
    avgdl = sum(len(d) for d in docs) / n or 1.0
    tfs = [[_occurrences(d, p) for p in phrases] for d in docs]
    weights = [idf(n, sum(1 for tf in tfs if tf[k])) for k in range(len(phrases))]
    return [
        sum(w * f * (K1 + 1) / (f + K1 * (1 - B + B * len(d) / avgdl)) for w, f in zip(weights, tf, strict=True) if f)
        for d, tf in zip(docs, tfs, strict=True)
    ]


@dataclass
class _Scope:
    tables: dict[str, Table]
    counters: dict[str, int]
    last_write: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def _empty_tables() -> dict[str, Table]:
    return {name: {} for name in (*STORAGE_TABLES, *TABLES)}


class MemoryDatabase:
    """The shared state several :class:`InMemoryBackend` instances may open (``same_as`` in the tests)."""

    def __init__(self) -> None:
        self.scopes: dict[ScopeRef, _Scope] = {}
        self.created: set[ScopeRef] = set()  # committed at least once
        self.lock = threading.Lock()

    def scope(self, ref: ScopeRef) -> _Scope:
        with self.lock:
            found = self.scopes.get(ref)
            if found is None:
                found = self.scopes[ref] = _Scope(_empty_tables(), {})
            return found


class _Tx:
    """One write transaction: copy-on-write of the scope's tables, committed by the backend."""

    def __init__(self, scope: ScopeRef, state: _Scope) -> None:
        self.scope = scope
        self.now = time.time()
        self.vectors: Vectors = np.zeros((0, 0), np.float32)
        self.tables = dict(state.tables)
        self.counters = dict(state.counters)
        self.copied: set[str] = set()

    # ---------------------------------------------------------------- internals
    def _write(self, table: str) -> Table:
        if table not in self.tables:
            raise ValueError(f"unknown table {table!r}")
        if table not in self.copied:
            self.tables[table] = dict(self.tables[table])
            self.copied.add(table)
        return self.tables[table]

    def _next_seq(self, table: str) -> int:
        self.counters[table] = self.counters.get(table, 0) + 1
        return self.counters[table]

    # ---------------------------------------------------------------- WriteTx
    def get(self, fact_ids: Sequence[str]) -> list[Fact]:
        facts = self.tables["facts"]
        return [_fact(self.scope, facts[i], self.now) for i in dict.fromkeys(fact_ids) if i in facts]

    def live_by_hash(self, content_hash: str) -> list[Fact]:
        return [
            _fact(self.scope, r, self.now)
            for r in self.tables["facts"].values()
            if r["content_hash"] == content_hash and _live(r, self.now)
        ]

    def live_hashes(self, content_hashes: Collection[str]) -> set[str]:
        return {r["content_hash"] for r in self.tables["facts"].values() if _live(r, self.now)} & set(content_hashes)

    def nearest(self, j: int, floor: float, exact_from: float) -> list[tuple[str, float]]:
        rows = [r for r in self.tables["facts"].values() if _live(r, self.now)]
        if not rows:
            return []
        cos = np.stack([_vector(r) for r in rows]) @ np.asarray(self.vectors[j], np.float32)
        found = [(r["id"], float(c)) for r, c in zip(rows, cos, strict=True) if c >= floor]
        return sorted(found, key=lambda t: -t[1])[:8]

    def insert(self, draft: Draft, j: int) -> None:
        row: Row = dict(zip(DRAFT_COLUMNS, draft_values(draft), strict=True))
        row.update(
            superseded_by=None,
            tombstone_by=None,
            tombstone_at=None,
            tombstone_reason=None,
            reinforcement=1,
            version=1,
            updated_at=self.now,
            embedding=np.asarray(self.vectors[j], np.float32).tobytes(),
            seq=self._next_seq("facts"),
        )
        self._write("facts")[draft.id] = row

    def update(self, fact_id: str, changes: Mapping[str, Any]) -> None:
        facts = self._write("facts")
        row = dict(facts[fact_id])
        for column, value in changes.items():
            row[column] = json.dumps(list(value)) if isinstance(value, (tuple, list)) else value
        row["version"] += 1
        row["updated_at"] = self.now
        facts[fact_id] = row

    def purgeable(self) -> list[Fact]:
        return [
            _fact(self.scope, r, self.now)
            for r in self.tables["facts"].values()
            if r["status"] != "active" or r["expires_at"] is not None
        ]

    def delete(self, fact_ids: Sequence[str]) -> None:
        facts = self._write("facts")
        for fid in fact_ids:
            facts.pop(fid, None)

    def audit(self, fact_id: str, event: str, actor: str, detail: Mapping[str, Any]) -> None:
        row = {"fact_id": fact_id, "event": event, "actor": actor, "at": self.now}
        self.add_rows("audit", [{**row, "detail": json.dumps(detail, default=str)}])

    # ---------------------------------------------------------------- ScopeTx
    def rows(
        self,
        table: str,
        where: Mapping[str, Any] | None = None,
        *,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        if table not in self.tables:
            raise ValueError(f"unknown table {table!r}")
        found = [dict(r) for r in self.tables[table].values() if _matches(r, where)]
        if after_seq is not None:
            found = [r for r in found if r["seq"] > after_seq]
        return found if limit is None else found[:limit]

    def add_rows(self, table: str, rows: Sequence[Mapping[str, Any]], on_conflict: OnConflict = "fail") -> list[int]:
        target = self._write(table)
        columns = _columns(table)
        spec = TABLES.get(table)
        out: list[int] = []
        for given in rows:
            row: Row = {c: given.get(c) for c in columns}
            if spec is not None:
                missing = [c for c in spec.not_null if row.get(c) is None]
                if missing:
                    raise ValueError(f"{table}: {missing} must not be NULL")
            key = _key_of(table, row)
            existing = target.get(key) if key is not None else None
            if existing is not None:
                if table == "facts" or on_conflict == "skip":
                    continue
                if on_conflict == "fail":
                    raise ValueError(f"{table}: a row with key {key!r} exists")
                target[key] = {**existing, **{c: v for c, v in row.items() if c in given}}
                out.append(existing.get("seq", 0))
                continue
            if table == "meta":
                target[key] = row
                out.append(0)
                continue
            row["seq"] = self._next_seq(table)
            target[row["seq"] if key is None else key] = row
            out.append(row["seq"])
        return out

    def update_rows(self, table: str, where: Mapping[str, Any], values: Mapping[str, Any]) -> int:
        table_spec(table).check_mutable()
        target = self._write(table)
        hits = [k for k, r in target.items() if _matches(r, where)]
        for k in hits:
            target[k] = {**target[k], **values}
        return len(hits)

    def delete_rows(
        self, table: str, where: Mapping[str, Any] | None = None, before: float | None = None, time_column: str = ""
    ) -> int:
        target = self._write(table)
        hits = [
            k
            for k, r in target.items()
            if _matches(r, where) and (before is None or (r.get(time_column) is not None and r[time_column] < before))
        ]
        for k in hits:
            del target[k]
        return len(hits)

    def set_vectors(self, fact_ids: Sequence[str], vectors: Vectors) -> None:
        facts = self._write("facts")
        array = np.asarray(vectors, np.float32)
        for fid, vec in zip(fact_ids, array, strict=True):
            if fid in facts:
                facts[fid] = {**facts[fid], "embedding": vec.tobytes()}


class InMemoryBackend(Backend):
    """Facts and records in dicts, vectors in numpy: nothing outlives the process."""

    def __init__(self, database: MemoryDatabase | None = None) -> None:
        self.database = database if database is not None else MemoryDatabase()

    # ---------------------------------------------------------------- the write path
    def transact(self, scope: ScopeRef, fn: Callable[[ScopeTx], T], event: str = "write") -> T:
        state = self.database.scope(scope)
        with state.lock:
            tx = _Tx(scope, state)
            result = fn(tx)
            if "facts" in tx.copied:
                state.last_write = tx.now
            state.tables, state.counters = tx.tables, tx.counters
            with self.database.lock:
                self.database.created.add(scope)
            return result

    # ---------------------------------------------------------------- reads
    def _tables(self, scope: ScopeRef) -> dict[str, Table] | None:
        if scope not in self.database.created:
            return None
        return self.database.scopes[scope].tables

    def get(self, scope: ScopeRef, fact_ids: Sequence[str]) -> list[Fact]:
        tables = self._tables(scope)
        if tables is None:
            return []
        facts, now = tables["facts"], time.time()
        return [_fact(scope, facts[i], now) for i in fact_ids if i in facts]

    def select_ids(self, scope: ScopeRef, filters: Filters, limit: int) -> list[str]:
        tables = self._tables(scope)
        if tables is None:
            return []
        now = time.time()
        return [r["id"] for r in tables["facts"].values() if _passes(r, filters, now, tables)][:limit]

    def lexical(
        self, scopes: Sequence[ScopeRef], terms: Sequence[str], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        phrases = _phrases(terms)
        if not phrases:
            return []
        now = time.time()
        collection: list[tuple[ScopeRef, Row, tuple[str, ...]]] = []
        for ref in dict.fromkeys(scopes):
            tables = self._tables(ref)
            if tables is not None:
                collection += [(ref, r, _tokens(r["content"] or "")) for r in tables["facts"].values()]
        scores = _bm25([doc for _, _, doc in collection], phrases)
        per_scope: dict[ScopeRef, list[tuple[ScopeRef, str, float]]] = {}
        for (ref, row, _), score in zip(collection, scores, strict=True):
            if score > 0 and _passes(row, filters, now, self._tables(ref) or {}):
                per_scope.setdefault(ref, []).append((ref, row["id"], score))
        hits = [h for found in per_scope.values() for h in sorted(found, key=lambda h: -h[2])[:limit]]
        return sorted(hits, key=lambda h: -h[2])

    def semantic(
        self, scopes: Sequence[ScopeRef], vector: Vectors, limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        now = time.time()
        keys: list[tuple[ScopeRef, str]] = []
        vectors: list[npt.NDArray[np.float32]] = []
        for ref in dict.fromkeys(scopes):
            tables = self._tables(ref)
            if tables is None:
                continue
            for row in tables["facts"].values():
                if _passes(row, filters, now, tables):
                    keys.append((ref, row["id"]))
                    vectors.append(_vector(row))
        if not keys:
            return []
        q = np.asarray(vector, np.float32).reshape(-1)
        if any(v.shape != q.shape for v in vectors):
            raise EmbeddingModelMismatchError(f"query vector has {q.shape[0]} dimensions, the scopes' differ")
        cos = np.stack(vectors) @ q
        order = np.argsort(-cos, kind="stable")[:limit]
        return [(keys[i][0], keys[i][1], float(cos[i])) for i in order]

    def neighbours(self, scope: ScopeRef, fact_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        tables = self._tables(scope)
        if tables is None:
            return {}
        now = time.time()
        facts = tables["facts"]
        out: dict[str, tuple[str | None, str | None]] = {}
        for fid in fact_ids:
            row = facts.get(fid)
            if row is None or row["session_id"] is None or row["session_id"].startswith(RUN_SESSION_PREFIX):
                continue
            session = [r for r in facts.values() if r["session_id"] == row["session_id"]]
            before = [r["id"] for r in session if r["seq"] < row["seq"] and _live(r, now)]
            after = [r["id"] for r in session if r["seq"] > row["seq"] and _live(r, now)]
            out[fid] = (before[-1] if before else None, after[0] if after else None)
        return out

    def stats(self, scope: ScopeRef) -> ScopeStats:
        tables = self._tables(scope)
        counts = dict.fromkeys(("active", "forgotten", "superseded", "expired"), 0)
        if tables is None:
            return ScopeStats(scope, counts, 0, None, None, None, 0)
        now = time.time()
        for row in tables["facts"].values():
            status = _fact(scope, row, now).status
            counts[status] = counts.get(status, 0) + 1
        size = sum(len(json.dumps(r, default=lambda b: b.hex())) for t in tables.values() for r in t.values())
        meta = tables["meta"]
        dim = meta.get("embedding_dim", {}).get("value")
        return ScopeStats(
            scope,
            counts,
            size,
            meta.get("embedding_model", {}).get("value"),
            int(dim) if dim is not None else None,
            self.database.scopes[scope].last_write,
            SCHEMA_VERSION,
        )

    def scopes(self, kind: ScopeKind | None = None) -> list[ScopeRef]:
        with self.database.lock:
            refs = list(self.database.created)
        return sorted(r for r in refs if kind is None or r.kind == kind)

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
        return _select(self._tables(scope), table, where, limit, offset, after_seq, query_terms, oldest_first)

    @contextmanager
    def snapshot(self, scope: ScopeRef) -> Iterator[RowReader]:
        tables: dict[str, Table] | None = None
        if scope in self.scopes(scope.kind):
            state = self.database.scope(scope)
            with state.lock:  # the committed tables: a write replaces a table it changes, never edits it
                tables = dict(state.tables)

        def read(table: str, where: Mapping[str, Any] | None = None, **options: Any) -> list[dict[str, Any]]:
            return _select(tables, table, where, **options)

        yield read


def _select(
    tables: Mapping[str, Table] | None,
    table: str,
    where: Mapping[str, Any] | None,
    limit: int | None = None,
    offset: int = 0,
    after_seq: int | None = None,
    query_terms: Sequence[str] = (),
    oldest_first: bool = True,
) -> list[dict[str, Any]]:
    """What :meth:`InMemoryBackend.rows` reads, from a scope's ``tables`` (None: a scope that does not exist)."""
    if table not in (*STORAGE_TABLES, *TABLES):
        raise ValueError(f"unknown table {table!r}")
    if tables is None:
        return []
    found = [
        dict(r)
        for r in tables[table].values()
        if _matches(r, where) and (after_seq is None or table == "meta" or r["seq"] > after_seq)
    ]
    if table == "meta":
        found.sort(key=lambda r: r["key"])
    else:
        found.sort(key=lambda r: r["seq"], reverse=not oldest_first)
    if query_terms:
        column = fts_column(table)
        # records: FTS5's own terms, as SQLite's record tables (and PostgreSQL's, schema 8) match them
        phrases = list(dict.fromkeys(p for p in (tuple(fts5_terms(t)) for t in query_terms) if p))
        scores = _bm25([tuple(fts5_terms(r.get(column) or "")) for r in found], phrases)
        ranked = sorted(zip(scores, range(len(found)), strict=True), key=lambda t: (-t[0], t[1]))
        found = [found[i] for score, i in ranked if score > 0]
    end = None if limit is None else offset + limit
    return found[offset:end]
