"""Search in the server: the semantic leg on pgvector HNSW indexes, the lexical leg on PostgreSQL full text.

``PostgresBackend(dsn, search="server")`` answers both legs with SQL instead of keeping each searched
scope's vectors (int8 codes) and postings in the process, so a searching process holds no per-scope search
state: its memory does not grow with the scopes it searches. The store fuses the two candidate lists in
Python as for in-process search (same filters, policy and hits). What it costs (docs/postgres.md, "Search in
the server"): the HNSW indexes are approximate and every insert into a schema that has them pays for them,
whichever mode the writing process searches in; the lexical ranking is not FTS5's BM25.

* Semantic: one query per scope, ``ORDER BY embedding <=> query LIMIT k``. A scope of ``ann_min_facts``
  facts or more that is a big enough share of the table is answered by the HNSW index of its dimension
  (``hnsw.iterative_scan = strict_order``, so the status rule and filters still get ``k`` rows); any other
  scope, or one the index answered with fewer than ``k`` rows, by an exact scan of its rows (the index spans
  every scope of the schema). The cosines of the returned rows are computed here from their stored float32
  vectors, as the in-process search computes them.
* Lexical: each fact's ``stems`` (a ``tsvector``) holds the stems of its words at their positions
  (:func:`~...search.text.tokens` and :func:`~...search.text.stem`: the terms the in-process postings hold),
  GIN-indexed. Query terms are chosen as in process (rarest first within the postings budget), from the
  planner's statistics of the commonest stems (counting a common stem's facts would read a heap row each).
  One statement then reads the facts holding a chosen term, counts each term's facts over the searched
  scopes (its IDF, FTS5's formula, any status) and scores each fact passing the filters by the sum over the
  terms of IDF times ``ts_rank(stems, term, 1)`` (the term's frequency in the fact, normalised by the log of
  the fact's length): BM25's shape, not its numbers.

The indexes exist once a backend in server mode opened the schema (:func:`enable`): a GIN index on
``asm_facts.stems`` (its presence tells every writer to fill ``stems``), one HNSW index per vector dimension,
and a partial index of the facts whose ``stems`` are missing (written by a process that opened the schema
before server search was enabled), which a search fills before it runs.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import psycopg

from ...core.types import EmbeddingModelMismatchError, ScopeRef
from ...search.lexical import choose_terms
from ...search.postings import query_stems
from ...search.text import stem, tokens
from .errors import BackendUnavailableError
from .fulltext import MAX_LEXEME_BYTES, MAX_POSITIONS, quoted, tsvector_of_terms

logger = logging.getLogger("autogen_shared_memory")

SearchMode = Literal["process", "server"]
SEARCH_MODES: tuple[SearchMode, ...] = ("process", "server")
STEMS_INDEX = "asm_facts_stems"  # GIN on asm_facts.stems; its presence means "writers fill stems"
MISSING_INDEX = "asm_facts_stems_missing"  # facts whose stems are still to be filled
BACKFILL_BATCH = 5000
SERVER_MIN_FACTS = 1000  # smaller scopes are scanned exactly: ~5 ms
SERVER_EF = 256  # hnsw.ef_search: top-10 overlap with the exact search 0.94 at 100k facts (128: 0.86; 512: 0.98)
STATS_SECONDS = 300.0  # how long the planner's common stems are kept before they are read again
MAX_SCAN_TUPLES = 20_000  # pgvector's hnsw.max_scan_tuples: where an iterative index scan gives up
BUILD_MEMORY = "1GB"  # maintenance_work_mem of an index build's session: an HNSW graph built in memory is ~10x faster


def check_mode(search: object) -> SearchMode:
    """``search`` if it names a mode, else ValueError."""
    if search not in SEARCH_MODES:
        raise ValueError(f"search must be 'process' or 'server', got {search!r}")
    return search


def fact_stems(text: str) -> str:
    """A fact's ``stems`` literal: the stems of its words at their positions (the in-process postings' terms;
    Snowball stems "s" to "", which is no lexeme). Every writer computes it for every fact once the schema
    searches in the server, so a fact none of PostgreSQL's limits can bind (at most 4,000 characters: fewer
    words than positions, well under 1 MB; no word of more than 511 characters or 256 times) skips
    :func:`~.fulltext.tsvector_of_terms`'s checks (3x slower)."""
    stems = [s for s in map(stem, tokens(text)) if s]
    if len(text) > 4000:
        return tsvector_of_terms(stems)
    at: dict[str, list[int]] = {}
    for i, term in enumerate(stems, 1):
        at.setdefault(term, []).append(i)
    if any(len(p) > MAX_POSITIONS for p in at.values()) or any(len(t) > MAX_LEXEME_BYTES // 4 for t in at):
        return tsvector_of_terms(stems)
    return " ".join(f"{quoted(term)}:{','.join(map(str, p))}" for term, p in at.items())


def enabled(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the schema has server search's indexes (then every writer fills ``asm_facts.stems``)."""
    row = conn.execute(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (f"{schema}.{STEMS_INDEX}",)
    ).fetchone()
    return bool(row and row[0])


def enable(conn: psycopg.Connection[Any], schema: str) -> None:
    """Give the schema server search's indexes, once (a schema that has them is only checked: no DDL, so a
    role that may only read and write the tables opens it). ``conn`` is in autocommit mode. Facts already
    stored get their ``stems`` first, in batches; then the GIN index is built (from then on writers fill
    ``stems`` themselves), then an HNSW index per vector dimension of the schema. Indexes are built
    ``CONCURRENTLY``: writers go on meanwhile (how long it takes: docs/postgres.md)."""
    key = f"asm-search-{schema}"
    # Polled, not waited for: a session waiting for the lock inside a statement would hold a snapshot that
    # another process's CREATE INDEX CONCURRENTLY waits for (a deadlock).
    while not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()[0]:  # type: ignore[index]
        time.sleep(0.2)
    try:
        _enable(conn, schema)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise BackendUnavailableError(
            f"the PostgreSQL role may not build the indexes search='server' needs in schema {schema} "
            f"({exc.diag.message_primary}): open it once with search='server' and a role that may (its owner)"
        ) from exc
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))


def _enable(conn: psycopg.Connection[Any], schema: str) -> None:
    """:func:`enable`'s work, under its lock."""
    if not enabled(conn, schema):
        _build(conn, schema, MISSING_INDEX, "(scope_kind, owner, seq) WHERE stems IS NULL")
        last = 0
        while rows := conn.execute(
            f"SELECT seq, content FROM {schema}.asm_facts WHERE seq > %s AND stems IS NULL ORDER BY seq LIMIT %s",
            (last, BACKFILL_BATCH),
        ).fetchall():
            _store_stems(conn, schema, rows)
            last = rows[-1][0]
        _build(conn, schema, STEMS_INDEX, "USING gin (stems)")
        conn.execute(f"ANALYZE {schema}.asm_facts")  # the common stems' statistics choose the terms to score
    dims = conn.execute(
        f"SELECT DISTINCT value::int FROM {schema}.asm_meta WHERE key = 'embedding_dim' AND value ~ '^[0-9]+$'"
    ).fetchall()
    for (dim,) in dims:
        if 1 <= dim <= 2000:  # pgvector's HNSW limit for vector; bigger vectors are scanned exactly
            _build(
                conn,
                schema,
                _hnsw_name(dim),
                f"USING hnsw ((embedding::vector({dim})) vector_cosine_ops) WHERE vector_dims(embedding) = {dim}",
            )


def _hnsw_name(dim: int) -> str:
    return f"asm_facts_hnsw_{dim}"


def _build(conn: psycopg.Connection[Any], schema: str, name: str, definition: str) -> None:
    """Create index ``name`` on the facts unless a valid one exists (one an interrupted build left invalid is
    dropped first)."""
    row = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (f"{schema}.{name}",))
    valid = row.fetchone()
    if valid is not None and valid[0]:
        return
    if valid is not None:
        conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema}.{name}")
    started = time.perf_counter()
    conn.execute(f"SET maintenance_work_mem = '{BUILD_MEMORY}'")
    try:
        conn.execute(f"CREATE INDEX CONCURRENTLY {name} ON {schema}.asm_facts {definition}")
    finally:
        conn.execute("RESET maintenance_work_mem")
    logger.info("index %s.%s built in %.1f s", schema, name, time.perf_counter() - started)


def _store_stems(conn: psycopg.Connection[Any], schema: str, rows: Sequence[tuple[int, str]]) -> None:
    conn.execute(
        f"UPDATE {schema}.asm_facts f SET stems = v.stems::tsvector "
        "FROM unnest(%s::bigint[], %s::text[]) AS v(seq, stems) WHERE f.seq = v.seq AND f.stems IS NULL",
        ([int(r[0]) for r in rows], [fact_stems(r[1]) for r in rows]),
    )


class _Scope(NamedTuple):
    ref: ScopeRef
    n: int  # facts, any status
    dim: int  # of its vectors
    missing: bool  # some of its facts have no stems yet


class ServerSearch:
    """The two legs of :class:`~.backend.PostgresBackend` with ``search="server"``; holds nothing per scope
    (the dimensions whose HNSW index is known to exist, only).

    Args:
        schema: the backend's schema.
        ann_min_facts: a scope with fewer facts is scanned exactly instead of through the HNSW index (so is a
            scope whose share of the table is too small for the index's scan to find enough of its rows).
        common_ratio, budget: the lexical leg's term choice (see :func:`~...search.lexical.choose_terms`).
    """

    def __init__(self, schema: str, ann_min_facts: int, common_ratio: float, budget: int) -> None:
        self.schema = schema
        self.ann_min_facts = ann_min_facts
        self.common_ratio = common_ratio
        self.budget = budget
        self._indexed_dims: set[int] = set()
        self._common: tuple[float, dict[str, float]] = (-math.inf, {})  # when read, and the common stems

    # ------------------------------------------------------------------ both legs
    @staticmethod
    def _scopes(conn: psycopg.Connection[Any], scopes: Sequence[ScopeRef]) -> tuple[list[_Scope], float]:
        """The scopes that hold facts, in the order asked, and the planner's estimate of all scopes' facts (one
        round trip)."""
        if not scopes:
            return [], 0.0
        keys = ", ".join(["(%s, %s)"] * len(scopes))
        rows = conn.execute(
            "SELECT scope_kind, owner, n_facts, (SELECT reltuples FROM pg_class WHERE oid = 'asm_facts'::regclass), "
            "(SELECT vector_dims(embedding) FROM asm_facts f WHERE f.scope_kind = s.scope_kind AND f.owner = s.owner "
            "LIMIT 1), EXISTS (SELECT 1 FROM asm_facts f WHERE f.scope_kind = s.scope_kind AND f.owner = s.owner "
            f"AND f.stems IS NULL) FROM asm_scopes s WHERE (scope_kind, owner) IN ({keys})",
            [v for s in scopes for v in (s.kind, s.owner)],
        ).fetchall()
        found = {
            ScopeRef(r[0], r[1]): _Scope(ScopeRef(r[0], r[1]), int(r[2]), int(r[4]), bool(r[5])) for r in rows if r[4]
        }
        return [found[s] for s in scopes if s in found], max((float(r[3]) for r in rows), default=0.0)

    # ------------------------------------------------------------------ semantic
    def semantic(
        self,
        conn: psycopg.Connection[Any],
        scopes: Sequence[ScopeRef],
        q: npt.NDArray[np.float32],
        limit: int,
        where: str,
        params: Sequence[Any],
    ) -> list[tuple[ScopeRef, str, float]]:
        """``(scope, id, cosine)`` of the ``limit`` facts of all ``scopes`` passing ``where`` (the filters'
        SQL over ``asm_facts``) nearest to ``q``, best first."""
        dim = int(q.shape[0])
        literal = "[" + ",".join(map(repr, q.astype(np.float32).tolist())) + "]"
        hits: list[tuple[ScopeRef, str, float]] = []
        found, everything = self._scopes(conn, scopes)
        for scope, n, stored, _ in found:
            if stored != dim:
                raise EmbeddingModelMismatchError(
                    f"query vector has {dim} dimensions, {scope} holds {stored}-d vectors"
                )
            rows: list[Any] = []
            # The index holds every scope's vectors and its scan gives up after MAX_SCAN_TUPLES rows: a scope
            # that is a small share of the table is scanned instead (about as fast, and exact).
            share = n / max(everything, n, 1)
            if n >= self.ann_min_facts and share * MAX_SCAN_TUPLES >= 4 * limit and self._has_hnsw(conn, dim):
                rows = self._nearest(conn, scope, dim, literal, limit, where, params, indexed=True)
            if len(rows) < limit:  # a small scope, or the index's scan gave up before it found limit rows
                rows = self._nearest(conn, scope, dim, literal, limit, where, params, indexed=False)
            if rows:
                cos = _vectors([r[2] for r in rows], dim) @ q
                hits.extend((scope, r[1], float(c)) for r, c in zip(rows, cos, strict=True))
        hits.sort(key=lambda h: -h[2])
        return hits[:limit]

    def _has_hnsw(self, conn: psycopg.Connection[Any], dim: int) -> bool:
        """Whether the HNSW index of ``dim``-d vectors exists (built now when the schema has none: a new
        deployment's first big search, or vectors of a new dimension)."""
        if dim in self._indexed_dims:
            return True
        name = f"{self.schema}.{_hnsw_name(dim)}"
        valid = "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)"
        row = conn.execute(valid, (name,)).fetchone()
        if row is None or not row[0]:
            try:
                enable(conn, self.schema)
            except BackendUnavailableError as exc:  # this role may not build it: scan exactly
                logger.warning("no HNSW index of %d-d vectors and this role may not build it: %s", dim, exc)
                return False
            row = conn.execute(valid, (name,)).fetchone()
        if row is not None and row[0]:
            self._indexed_dims.add(dim)
            return True
        return False

    @staticmethod
    def _nearest(
        conn: psycopg.Connection[Any],
        scope: ScopeRef,
        dim: int,
        literal: str,
        limit: int,
        where: str,
        params: Sequence[Any],
        *,
        indexed: bool,
    ) -> list[Any]:
        """``(seq, id, embedding)`` of the scope's ``limit`` nearest rows passing ``where``: through the HNSW
        index (its expression and predicate), or by a scan of the scope (an expression the index does not
        match, so the planner takes the scope's btree)."""
        if indexed:
            order = f"embedding::vector({dim}) <=> %s::vector({dim})"
            clause = f"vector_dims(embedding) = {dim} AND "
        else:
            order, clause = "embedding <=> %s::vector", ""
        with conn.cursor(binary=True) as cur:
            return cur.execute(
                f"SELECT seq, id, embedding FROM asm_facts WHERE scope_kind = %s AND owner = %s AND {clause}"
                f"({where}) ORDER BY {order} LIMIT %s",
                (scope.kind, scope.owner, *params, literal, limit),
            ).fetchall()

    # ------------------------------------------------------------------ lexical
    def lexical(
        self,
        conn: psycopg.Connection[Any],
        scopes: Sequence[ScopeRef],
        terms: Sequence[str],
        limit: int,
        where: str,
        params: Sequence[Any],
    ) -> list[tuple[ScopeRef, str, float]]:
        """``(scope, id, score)`` of up to ``limit`` facts per scope holding a query term and passing ``where``,
        all scopes' hits together, best first."""
        # a stem PostgreSQL cannot hold (over 2,046 bytes) is in no fact's stems either
        stems = [s for s in query_stems(terms) if s and len(s.encode()) <= MAX_LEXEME_BYTES]
        if not stems:
            return []
        found = self._scopes(conn, scopes)[0]
        for one in found:
            if one.missing:
                self._fill_missing(conn, one.ref)
        found = [s for s in found if s.n > 0]
        n_all = sum(s.n for s in found)
        if not found:
            return []
        # The terms scored: chosen as in process, rarest first within the postings budget, from the planner's
        # statistics (the share of facts holding each of the commonest stems; a stem they do not list is rare):
        # counting a common stem's postings would read a heap row per posting.
        common = self._common_stems(conn)
        estimate = {t: int(common.get(t, 0.0) * n_all) for t in stems}
        kept = choose_terms(
            stems, {t: t for t in stems}, n_all, estimate, common_ratio=self.common_ratio, budget=self.budget
        )
        # One statement: the facts of every searched scope holding a kept stem (any status: the IDF counts them
        # all, over the searched scopes together), then those passing the filters, scored and ranked per scope.
        keys = ", ".join(["(%s, %s)"] * len(found))
        counts = ", ".join(f"count(*) FILTER (WHERE stems @@ %s::tsquery) OVER () AS df{i}" for i in range(len(kept)))
        score = " + ".join(
            f"greatest(ln((%s - df{i} + 0.5) / (df{i} + 0.5)), 1e-6) * ts_rank(stems, %s::tsquery, 1)"
            for i in range(len(kept))
        )
        rows = conn.execute(
            f"WITH m AS (SELECT scope_kind, owner, id, seq, stems, ({where}) AS ok FROM asm_facts "
            f"WHERE (scope_kind, owner) IN ({keys}) AND stems @@ %s::tsquery), "
            f"d AS (SELECT *, {counts} FROM m), "
            f"s AS (SELECT scope_kind, owner, id, seq, {score} AS r FROM d WHERE ok) "
            "SELECT scope_kind, owner, id, r FROM (SELECT *, row_number() OVER (PARTITION BY scope_kind, owner "
            "ORDER BY r DESC, seq) AS k FROM s) x WHERE k <= %s ORDER BY r DESC, seq",
            (
                *params,
                *(v for one in found for v in (one.ref.kind, one.ref.owner)),
                " | ".join(map(quoted, kept)),
                *map(quoted, kept),
                *(v for t in kept for v in (float(n_all), quoted(t))),
                limit,
            ),
        ).fetchall()
        return [(ScopeRef(r[0], r[1]), r[2], float(r[3])) for r in rows]

    def _common_stems(self, conn: psycopg.Connection[Any]) -> dict[str, float]:
        """The share of facts holding each stem PostgreSQL's statistics list as common (``ANALYZE`` keeps up to
        ten times the statistics target of them), read again every :data:`STATS_SECONDS`."""
        if time.monotonic() - self._common[0] > STATS_SECONDS:
            row = conn.execute(
                "SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats "
                "WHERE schemaname = %s AND tablename = 'asm_facts' AND attname = 'stems'",
                (self.schema,),
            ).fetchone()
            found = dict(zip(row[0], row[1], strict=False)) if row is not None and row[0] is not None else {}
            self._common = (time.monotonic(), found)
        return self._common[1]

    def _fill_missing(self, conn: psycopg.Connection[Any], scope: ScopeRef) -> None:
        """Give the scope's facts that have no ``stems`` theirs (written by a process that did not know the
        schema searches in the server)."""
        while rows := conn.execute(
            "SELECT seq, content FROM asm_facts WHERE scope_kind = %s AND owner = %s AND stems IS NULL "
            "ORDER BY seq LIMIT %s",
            (scope.kind, scope.owner, BACKFILL_BATCH),
        ).fetchall():
            _store_stems(conn, self.schema, rows)


def _vectors(blobs: Sequence[bytes], dim: int) -> npt.NDArray[np.float32]:
    """pgvector's binary form (int16 dimension, int16 unused, big-endian float32s) as a float32 matrix."""
    raw = np.frombuffer(b"".join(blobs), dtype=">f4").reshape(len(blobs), dim + 1)
    return raw[:, 1:].astype(np.float32)
