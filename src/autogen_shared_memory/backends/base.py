"""The backend contract: the few operations a storage engine must provide, per scope.

Everything else (validation, access policy, embedding, fusion across scopes, capsules, async) lives once
in :class:`~autogen_shared_memory.store.SharedMemoryStore`. A backend only stores facts with their vectors
atomically, applies the dedup/supersede rules inside one write transaction, and answers ranked lexical
and semantic candidate lists. SQLite is the embedded implementation; a server database is a second one.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.types import (
    AuditEvent,
    Draft,
    EmbeddingModelMismatchError,
    Fact,
    Filters,
    Receipt,
    ScopeKind,
    ScopeRef,
    ScopeStats,
    Status,
    kind_of_fact_id,
)
from ..embedding import Vectors


@dataclass(frozen=True)
class ModelInfo:
    """The embedding model a scope's vectors come from (recorded in its meta table)."""

    model_id: str
    dimension: int


@dataclass(frozen=True)
class StatusChange:
    """Set a fact's status (forget), recording who, when and why in its tombstone and audit trail."""

    fact_id: str
    status: Status
    actor: str
    at: float
    reason: str | None = None


class Backend(ABC):
    """Storage for facts, one isolated namespace per :class:`ScopeRef`."""

    # ---------------------------------------------------------------- writes
    @abstractmethod
    def write(
        self,
        scope: ScopeRef,
        drafts: Sequence[Draft],
        vectors: Vectors,
        model: ModelInfo,
        near_duplicate_threshold: float,
        similar_threshold: float,
    ) -> list[Receipt]:
        """Store ``drafts`` with their ``vectors`` in one transaction and return one receipt per draft.

        Open the scope's write transaction (creating the scope, recording ``model`` or refusing another
        one with :class:`EmbeddingModelMismatchError`), offer it as a
        :class:`~autogen_shared_memory.core.lifecycle.WriteTx` and return
        ``lifecycle.write(tx, scope, drafts, near_duplicate_threshold, similar_threshold)``: the lifecycle
        decides what is inserted, reinforced and superseded. All or nothing: an error leaves the scope
        unchanged.
        """

    @abstractmethod
    def set_status(self, scope: ScopeRef, change: StatusChange) -> Fact:
        """Run ``lifecycle.set_status`` in a write transaction and return the updated fact
        (FactNotFoundError if absent)."""

    @abstractmethod
    def purge(self, scope: ScopeRef, before: float, actor: str) -> list[str]:
        """Run ``lifecycle.purge(tx, before, actor)`` in a write transaction (no-op for a scope that does not
        exist) and return the deleted ids."""

    # ----------------------------------------------------------------- reads
    @abstractmethod
    def get(self, scope: ScopeRef, fact_ids: Sequence[str]) -> list[Fact]:
        """The facts with these ids that exist in the scope, in the order asked."""

    def find(self, fact_id: str) -> Fact | None:
        """The fact with this id in whichever scope holds it (any status), or None.

        Derived: asks every scope of the id's kind (:func:`~autogen_shared_memory.core.types.kind_of_fact_id`).
        A backend that can look an id up directly (an index) overrides it, so that an invented id costs one
        lookup rather than a visit to every scope."""
        for ref in self.scopes(kind_of_fact_id(fact_id)):
            found = self.get(ref, [fact_id])
            if found:
                return found[0]
        return None

    @abstractmethod
    def select_ids(self, scope: ScopeRef, filters: Filters, limit: int) -> list[str]:
        """Ids of the facts matching ``filters``, oldest first."""

    @abstractmethod
    def lexical(
        self, scopes: Sequence[ScopeRef], terms: Sequence[str], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        """``(scope, id, relevance)`` for the OR of ``terms`` (plain words): up to ``limit`` per scope, ranked
        together, best first. Relevance must be comparable across the scopes, because ``scope="all"``
        searches several at once (SQLite: BM25 with the IDF of the searched files together; PostgreSQL:
        ``ts_rank``, which has no collection statistics).
        """

    @abstractmethod
    def semantic(
        self, scopes: Sequence[ScopeRef], vector: Vectors, limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        """``(scope, id, cosine)``: the ``limit`` facts of all ``scopes`` most similar to ``vector``, best first
        (one model embeds every scope, so cosines compare across them)."""

    @abstractmethod
    def neighbours(self, scope: ScopeRef, fact_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        """For each fact, the active facts written just before and after it in the same session (by write
        order), for neighbour-context recall."""

    @abstractmethod
    def history(self, scope: ScopeRef, fact_id: str) -> list[AuditEvent]:
        """The audit trail of one fact, oldest first (it survives purge)."""

    @abstractmethod
    def stats(self, scope: ScopeRef) -> ScopeStats:
        """Counts per status, size, embedding model and last write of a scope."""

    @abstractmethod
    def exists(self, scope: ScopeRef) -> bool:
        """Whether the scope has been created (cheap: called on every search)."""

    @abstractmethod
    def scopes(self, kind: ScopeKind | None = None) -> list[ScopeRef]:
        """The scopes that exist (have been written to), optionally of one kind."""

    # ------------------------------------------------------------ scope meta
    @abstractmethod
    def get_meta(self, scope: ScopeRef, key: str) -> str | None:
        """A scope setting (for example ``private`` or a group's member list), None when unset."""

    @abstractmethod
    def list_meta(self, scope: ScopeRef, prefix: str) -> dict[str, str]:
        """All scope settings whose key starts with ``prefix``."""

    @abstractmethod
    def set_meta(self, scope: ScopeRef, key: str, value: str | None) -> None:
        """Set (or with None, clear) a scope setting."""

    @abstractmethod
    def check_model(self, scope: ScopeRef, model: ModelInfo) -> None:
        """Raise EmbeddingModelMismatchError if the scope's vectors come from another model."""

    # -------------------------------------------------------------- re-embed
    @abstractmethod
    def iter_contents(self, scope: ScopeRef, batch_size: int) -> Iterator[list[tuple[str, str]]]:
        """All ``(id, content)`` pairs of a scope in batches (any status), for re-embedding."""

    @abstractmethod
    def replace_vectors(
        self, scope: ScopeRef, ids: Sequence[str], vectors: Vectors, model: ModelInfo, final: bool, actor: str
    ) -> None:
        """Store new vectors for ``ids`` (audited as ``actor``); when ``final``, record the scope's ``model``."""

    # --------------------------------------------------------------- records
    # Record tables are described once in :data:`autogen_shared_memory.core.records.TABLES`.
    @abstractmethod
    def append_records(self, scope: ScopeRef, table: str, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """Insert rows in one transaction; return their ``seq`` numbers (strictly increasing)."""

    @abstractmethod
    def upsert_records(self, scope: ScopeRef, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert rows, or update the row with the same key (never for append-only tables)."""

    @abstractmethod
    def update_record(
        self,
        scope: ScopeRef,
        table: str,
        key: Mapping[str, Any],
        changes: Callable[[dict[str, Any]], Mapping[str, Any]],
    ) -> dict[str, Any] | None:
        """Read-modify-write one row atomically: ``changes(current_row)`` returns the columns to set
        (it may raise to abort). Returns the new row, or None if no row has that key."""

    @abstractmethod
    def read_records(
        self,
        scope: ScopeRef,
        table: str,
        where: Mapping[str, Any] | None = None,
        *,
        limit: int = 100,
        offset: int = 0,
        after_seq: int | None = None,
        query_terms: Sequence[str] = (),
        oldest_first: bool = False,
    ) -> list[dict[str, Any]]:
        """Rows (with ``seq``) matching equality filters: newest first, oldest first, or ranked by a
        full-text match of ``query_terms`` on the table's indexed column."""

    @abstractmethod
    def delete_records(
        self,
        scope: ScopeRef,
        table: str,
        where: Mapping[str, Any] | None = None,
        *,
        before: float | None = None,
        time_column: str = "created_at",
        force: bool = False,
    ) -> int:
        """Delete matching rows (older than ``before``); append-only tables only with ``force``."""

    # --------------------------------------------------------------- transfer
    @abstractmethod
    def export_scope(self, scope: ScopeRef) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every row of a scope as ``(table, row)``: ``meta``, ``facts`` (with the vector as bytes),
        ``audit``, then each record table. Internal counters (``seq``, ``rev``) are left out."""

    @abstractmethod
    def import_scope(self, scope: ScopeRef, items: Sequence[tuple[str, dict[str, Any]]]) -> int:
        """Insert exported rows in one transaction, skipping rows whose key already exists (so an import
        can be repeated); returns how many rows were inserted."""

    def close(self) -> None:
        """Release connections and caches."""


def reembed_scope(
    backend: Backend,
    scope: ScopeRef,
    embed: Callable[[Sequence[str]], Vectors],
    model: ModelInfo,
    batch_size: int = 256,
    progress: Callable[[int], None] | None = None,
    actor: str = "system",
) -> int:
    """Re-embed every fact of a scope with ``embed``; the model switch is recorded only at the end.

    Embedding happens outside any write transaction; each batch of vectors is then written in a short one.
    """
    done = 0
    batches = list(backend.iter_contents(scope, batch_size))
    for i, batch in enumerate(batches):
        ids = [fid for fid, _ in batch]
        vectors = embed([content for _, content in batch]) if batch else np.zeros((0, model.dimension))
        backend.replace_vectors(
            scope, ids, np.asarray(vectors, np.float32), model, final=i == len(batches) - 1, actor=actor
        )
        done += len(ids)
        if progress is not None:
            progress(len(ids))
    if not batches:
        backend.replace_vectors(scope, [], np.zeros((0, model.dimension), np.float32), model, final=True, actor=actor)
    return done


# The columns of a new fact that come from its draft, in the order of :func:`draft_values` (JSON as text).
DRAFT_COLUMNS = (
    "id",
    "content",
    "created_by",
    "created_at",
    "confidence",
    "tags",
    "category",
    "metadata",
    "session_id",
    "expires_at",
    "supersedes",
    "content_hash",
    "stated_by",
    "status",
)


def draft_values(draft: Draft) -> tuple[Any, ...]:
    """The values of :data:`DRAFT_COLUMNS` for a new fact (its author is the first of ``stated_by``; its
    status ``active``, or ``pending`` for a write held for review); the backend adds ``reinforcement=1``,
    ``version=1``, ``updated_at`` and the vector."""
    return (
        draft.id,
        draft.content,
        draft.created_by,
        draft.created_at,
        draft.confidence,
        json.dumps(list(draft.tags)),
        draft.category,
        json.dumps(draft.metadata),
        draft.session_id,
        draft.expires_at,
        json.dumps(list(draft.supersedes)),
        draft.content_hash,
        json.dumps([draft.created_by]),
        draft.status,
    )


def as_of_clause(prefix: str, mark: str) -> str:
    """:func:`~autogen_shared_memory.core.lifecycle.valid_at` as an SQL condition on the fact columns (``prefix``
    names their table, ``mark`` is the driver's placeholder); its three parameters are the time, thrice."""
    p = prefix
    return (
        f"{p}created_at <= {mark} AND ({p}status = 'active' OR ({p}status IN ('superseded', 'forgotten') "
        f"AND {p}tombstone_at > {mark})) AND ({p}expires_at IS NULL OR {p}expires_at > {mark})"
    )


def compare_model(scope: ScopeRef, meta: Mapping[str, str], model: ModelInfo) -> None:
    """Raise EmbeddingModelMismatchError if a scope's recorded model (``meta``) is not ``model``."""
    stored, dim = meta.get("embedding_model"), meta.get("embedding_dim")
    if stored is None:
        return
    if stored != model.model_id or (dim is not None and int(dim) != model.dimension):
        raise EmbeddingModelMismatchError(
            f"{scope} holds vectors from embedding model {stored!r} ({dim}-d) but this store embeds with "
            f"{model.model_id!r} ({model.dimension}-d); refusing to mix them. Open it with the original "
            f"model, or call store.reembed() to re-embed every fact with the new one."
        )


def fact_from_row(scope: ScopeRef, row: Sequence[Any], now: float) -> Fact:
    """A Fact from a row of the fact columns in their canonical order (``seq, id, content, created_by,
    created_at, confidence, tags, category, metadata, session_id, expires_at, supersedes, superseded_by,
    status, tombstone_by, tombstone_at, tombstone_reason, reinforcement, content_hash, version, updated_at,
    stated_by``; JSON fields as text)."""
    (
        _,
        fid,
        content,
        created_by,
        created_at,
        confidence,
        tags,
        category,
        metadata,
        session_id,
        expires_at,
        supersedes,
        superseded_by,
        status,
        t_by,
        t_at,
        t_reason,
        reinforcement,
        chash,
        version,
        updated_at,
        stated_by,
    ) = row
    if status == "active" and expires_at is not None and expires_at <= now:
        status = "expired"
    return Fact(
        id=fid,
        scope=scope,
        content=content,
        created_by=created_by,
        created_at=created_at,
        confidence=confidence,
        tags=tuple(json.loads(tags or "[]")),
        category=category,
        metadata=json.loads(metadata or "{}"),
        session_id=session_id,
        expires_at=expires_at,
        supersedes=tuple(json.loads(supersedes or "[]")),
        superseded_by=superseded_by,
        status=status,
        tombstone_by=t_by,
        tombstone_at=t_at,
        tombstone_reason=t_reason,
        reinforcement=reinforcement,
        content_hash=chash,
        version=version,
        updated_at=updated_at,
        stated_by=tuple(json.loads(stated_by or "[]") if isinstance(stated_by, str) else stated_by or ()),
    )
