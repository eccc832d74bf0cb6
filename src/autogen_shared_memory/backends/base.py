"""The backend contract: the few operations a storage engine must provide, per scope.

A backend implements :class:`Backend`'s ten abstract methods — one write transaction (:meth:`Backend.transact`,
offering a :class:`ScopeTx`) and nine reads (one of them :meth:`Backend.snapshot`, a consistent read of a
scope) — and everything else (writing facts through the lifecycle, status changes, purge, meta, re-embedding,
record tables, export and import) is derived here once. The tables a backend keeps and the names it must use
are written below (:data:`STORAGE_TABLES`, :data:`~autogen_shared_memory.core.records.TABLES`). Validation,
access policy, embedding, fusion across scopes, capsules and async live above, in
:class:`~autogen_shared_memory.facts.FactStore`. SQLite is the embedded implementation; PostgreSQL the server
one.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import numpy as np

from ..core import lifecycle
from ..core.lifecycle import WriteTx
from ..core.policy import MEMBER_PREFIX, PRIVATE_KEY
from ..core.records import TABLES, table_spec
from ..core.types import (
    MAX_METADATA_BYTES,
    MAX_TAGS,
    AuditEvent,
    Draft,
    EmbeddingModelMismatchError,
    Fact,
    FactNotFoundError,
    Filters,
    Receipt,
    ScopeKind,
    ScopeRef,
    ScopeStats,
    SharedMemoryError,
    Status,
    kind_of_fact_id,
)
from ..embedding import Vectors


@dataclass(frozen=True)
class ModelInfo:
    """The embedding model a scope's vectors come from (recorded in its meta table)."""

    model_id: str
    dimension: int


HealthStatus = Literal["ok", "skip", "warn", "fail"]


@dataclass
class HealthCheck:
    """One result of :meth:`Backend.health` (and of the CLI's ``doctor``): what was checked, how it went, and,
    for a problem, what to do about it."""

    name: str
    """What was checked (``backend``, ``store directory``, ``wal``, ``schema``, ``model match``, ...)."""
    status: HealthStatus
    """``ok``; ``skip`` (not checked, and why is the detail); ``warn`` (works, but see the fix); ``fail``."""
    detail: str
    fix: str = ""
    """What to do about a ``warn`` or ``fail`` (empty otherwise)."""


@dataclass(frozen=True)
class StatusChange:
    """Set a fact's status (forget), recording who, when and why in its tombstone and audit trail."""

    fact_id: str
    status: Status
    actor: str
    at: float
    reason: str | None = None


# The tables of a scope a backend keeps, besides the record tables of :data:`core.records.TABLES`.
# ``rows``/``add_rows`` read and write them by these column names (every value a plain SQL scalar):
#
# * ``meta`` (``key``, ``value``: text, key ``key``; no ``seq``): the scope's settings. Keys the package uses:
#   ``scope_kind``/``scope_owner`` (the scope itself, written by a backend that must read a scope's identity
#   back from its storage, as SQLite does from a file; optional for others; :meth:`Backend.export_scope`
#   yields them, :mod:`~autogen_shared_memory.transfer` drops them, :meth:`Backend.import_scope` skips them),
#   ``embedding_model``/``embedding_dim`` (the model of its vectors, see :func:`claim_model`), ``private`` (an
#   agent scope closed to trusted reads),
#   ``member:<agent id>`` (a group's members), ``profile:*`` / ``directory:*`` (the shared profile and agent
#   directory views).
# * ``facts``: the columns of :data:`FACT_COLUMN_NAMES` (tuples and dicts as JSON text) plus ``embedding``,
#   the vector as float32 bytes; ``seq`` is the write order (an integer the backend assigns on insert, larger
#   than every ``seq`` in the table then; gaps allowed, shared across scopes on PostgreSQL). "Oldest first"
#   means by ``seq`` everywhere, never by ``created_at`` (an imported fact can be older than the facts written
#   before it).
# * ``audit`` (``seq``, ``fact_id``, ``event``, ``actor``, ``at``, ``detail`` as JSON text): append-only; it
#   survives purge. Events: ``created``, ``reinforced``, ``superseded``, ``forgotten``, ``rejected`` (a held
#   fact forgotten), ``approved``, ``purged``, ``reembedded`` (written by :mod:`core.lifecycle` and
#   :func:`reembed_scope`).
# * Each record table of :data:`core.records.TABLES`: its columns plus ``seq``, keyed by ``TableSpec.key``.
#
# Vectors are L2-normalised (the :class:`~autogen_shared_memory.embedding.Embedder` contract), so a cosine is
# the float32 dot product of the stored vector and the query. Times that decide a status (``expired``, the
# default status filter) are ``time.time()`` of the calling process at the call, never a database server's
# clock (the tests move ``time.time``).
STORAGE_COLUMNS: dict[str, dict[str, type]] = {
    # The columns of the storage tables as rows carry them (the types an export writes; JSON as text), the one
    # list the backends' fact queries, :func:`fact_from_row` and an import's checks derive from. ``facts`` rows
    # also carry ``embedding`` (bytes). The migrations keep their own literal DDL: a released schema never
    # changes.
    "meta": {"key": str, "value": str},
    "facts": {
        "seq": int,
        "id": str,
        "content": str,
        "created_by": str,
        "created_at": float,
        "confidence": float,
        "tags": str,
        "category": str,
        "metadata": str,
        "session_id": str,
        "expires_at": float,
        "supersedes": str,
        "superseded_by": str,
        "status": str,
        "tombstone_by": str,
        "tombstone_at": float,
        "tombstone_reason": str,
        "reinforcement": int,
        "content_hash": str,
        "version": int,
        "updated_at": float,
        "stated_by": str,
    },
    "audit": {"seq": int, "fact_id": str, "event": str, "actor": str, "at": float, "detail": str},
}
STORAGE_TABLES = tuple(STORAGE_COLUMNS)
FACT_COLUMN_NAMES = tuple(STORAGE_COLUMNS["facts"])
FACT_JSON_COLUMNS: dict[str, type] = {"tags": list, "metadata": dict, "supersedes": list, "stated_by": list}
"""The fact columns kept as JSON text, and what each holds (a fact's tuples and its metadata dict)."""
MODEL_KEYS = ("embedding_model", "embedding_dim")
CLOSING_EVENTS = ("forgotten", "rejected", "superseded")  # the audit events that close a fact
OnConflict = Literal["fail", "skip", "update"]
T = TypeVar("T")
RowReader = Callable[..., list[dict[str, Any]]]  # :meth:`Backend.rows` without its scope (see snapshot)


class ScopeTx(WriteTx, Protocol):
    """One write transaction on one scope, as :meth:`Backend.transact` offers it: the lifecycle's
    :class:`~autogen_shared_memory.core.lifecycle.WriteTx` plus the row operations every derived write uses.

    Tables are named as in :data:`STORAGE_TABLES` and :data:`core.records.TABLES`; any other name raises
    ValueError. ``where`` maps columns to values (equality, ``None`` matches NULL, an empty or None ``where``
    matches every row); rows are dicts of column names.
    """

    vectors: Vectors
    """The vectors of this write (row ``j`` belongs to draft ``j``); set before the lifecycle runs (an empty
    ``(0, 0)`` array in transactions that insert no fact)."""

    def rows(
        self,
        table: str,
        where: Mapping[str, Any] | None = None,
        *,
        after_seq: int | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Rows of any table matching ``where``, oldest first (by ``seq``), with every column (``seq`` too,
        except for ``meta``), read under the transaction's lock (a read-modify-write sees the latest committed
        row) and seeing this transaction's own changes; with ``after_seq``, only rows after that ``seq``
        (not for ``meta``), and at most ``limit`` of them."""

    def add_rows(self, table: str, rows: Sequence[Mapping[str, Any]], on_conflict: OnConflict = "fail") -> list[int]:
        """Insert rows into any table; return the ``seq`` of each inserted row (``meta`` has none: 0).

        Columns a row leaves out are NULL; a ``seq`` in a row is ignored (the backend assigns it, as for every
        insert). A NULL in a column of ``TableSpec.not_null`` raises, as the database's constraint would. On a
        key conflict: ``fail`` raises (the backend's integrity error: no caller catches a particular type),
        ``skip`` leaves the existing row (and returns no seq for it), ``update`` overwrites the non-key columns
        the row gives and keeps the row's ``seq`` (what it returns for such a row is unspecified: no caller
        reads it). A ``facts`` row is a whole exported fact (``embedding`` as bytes) and is skipped if its id
        exists, whatever ``on_conflict``; ``audit`` rows have no key (always inserted)."""

    def update_rows(self, table: str, where: Mapping[str, Any], values: Mapping[str, Any]) -> int:
        """Set ``values`` on the rows of a mutable record table matching ``where``; return how many. An
        append-only table refuses (``TableSpec.check_mutable``: ValueError naming "append-only")."""

    def delete_rows(
        self, table: str, where: Mapping[str, Any] | None = None, before: float | None = None, time_column: str = ""
    ) -> int:
        """Delete rows of ``meta`` or a record table matching ``where`` (and ``time_column < before``),
        append-only tables included (the caller has checked the operator's ``force``); return how many."""

    def set_vectors(self, fact_ids: Sequence[str], vectors: Vectors) -> None:
        """Replace the vectors of these facts (re-embedding; ids no longer present are ignored); searches
        after the commit use the new ones. Nothing else of the fact changes (not ``version``, not
        ``updated_at``)."""


class ChangeWatcher(Protocol):
    """What :meth:`Backend.change_watcher` returns: which scopes may have changed since the last look."""

    def changed(self) -> set[ScopeRef]:
        """The scopes that may have changed since the previous call (every scope that exists, on the first).

        It may report a scope that did not change (a read of it then finds nothing new), never leave out one
        that did: a change committed before the call starts is in this call's answer or an earlier one. It
        raises what listing the store raises (the feed retries the round).
        """
        ...


class Backend(ABC):
    """Storage for facts and records, one isolated namespace per :class:`ScopeRef`.

    A backend implements the ten abstract methods: one write path (:meth:`transact`) and nine reads.
    Everything else here is derived from them once; a backend may override a derived method when it can
    do better (an index for :meth:`find`, a cheaper :meth:`exists`), never to change what it does.

    Conventions every backend keeps:

    * A scope exists once anything has been written to it; reads of a scope that does not exist return
      nothing (no error, and they never create it).
    * Fact ids name their scope's kind (:func:`~autogen_shared_memory.core.types.kind_of_fact_id`); times
      are Unix seconds as floats; a fact's status is stored as written and reported ``expired`` when active
      and past ``expires_at`` (:func:`fact_from_row` does that).
    * Every write to a scope is serialised with every other write to it, across threads, processes and
      hosts (as far as the storage is shared: an in-process backend serialises threads), and is all or
      nothing.
    * The status rule of :class:`~autogen_shared_memory.core.types.Filters` (see there) is applied by every
      read that takes ``filters``, the same way.
    """

    # ---------------------------------------------------------------- the write path
    @abstractmethod
    def transact(self, scope: ScopeRef, fn: Callable[[ScopeTx], T], event: str = "write") -> T:
        """Run ``fn`` inside the scope's write transaction (creating the scope) and return its result.

        Hold the scope's write lock from the first read to the commit (SQLite ``BEGIN IMMEDIATE``,
        PostgreSQL a locked row per scope); commit when ``fn`` returns, roll back if it raises. ``fn`` only
        touches the transaction, so the backend may run it again after a transient failure (a dropped
        connection) as long as each attempt is a whole transaction. Facts written inside are visible to the
        transaction's own reads. ``tx.now`` is ``time.time()`` when the transaction starts: every fact and
        audit row it writes carries that time. ``event`` names the change for notifications to other
        processes (``write``, ``forgotten``, ``purge``, ``reembed``, ``meta``, ``import``, ``append:<table>``,
        ``records:<table>``); a backend without other processes may ignore it. Whether a first transaction
        that rolls back leaves its scope existing (and empty) is the backend's choice: SQLite creates the
        scope's file before ``fn`` runs.
        """

    # ---------------------------------------------------------------- reads
    @abstractmethod
    def get(self, scope: ScopeRef, fact_ids: Sequence[str]) -> list[Fact]:
        """The facts with these ids that exist in the scope (any status), in the order asked."""

    @abstractmethod
    def select_ids(self, scope: ScopeRef, filters: Filters, limit: int) -> list[str]:
        """Ids of the facts matching ``filters`` (:class:`~autogen_shared_memory.core.types.Filters`), oldest
        first (by ``seq``), at most ``limit``."""

    @abstractmethod
    def lexical(
        self, scopes: Sequence[ScopeRef], terms: Sequence[str], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        """``(scope, id, relevance)`` for the OR of ``terms`` (plain words): up to ``limit`` per scope, ranked
        together, best first (higher relevance is better; only facts containing a term are hits). Relevance
        must be comparable across the scopes, because ``scope="all"`` searches several at once.

        What is indexed is a fact's ``content`` only (not its tags or category), tokenised and stemmed as
        :mod:`~autogen_shared_memory.search.text` does (FTS5's ``porter unicode61 remove_diacritics 2``: a
        term matches a fact holding a word with the same :func:`~autogen_shared_memory.search.text.stem`; a
        term the tokeniser cuts in several, such as ``snake_case``, counts as its words).
        Collection statistics (document frequencies, average length) may count every fact, whatever its
        status; the hits are those passing ``filters``. Both built-in backends keep each scope's postings
        in memory and rank with :func:`~autogen_shared_memory.search.postings.rank` (FTS5's BM25 with the
        IDF of the searched scopes together, within the postings budget); another backend should do the same,
        so that moving a deployment does not change what it recalls.
        """

    @abstractmethod
    def semantic(
        self, scopes: Sequence[ScopeRef], vector: Vectors, limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        """``(scope, id, cosine)``: the ``limit`` facts of all ``scopes`` passing ``filters`` most similar to
        ``vector``, best first (one model embeds every scope, so cosines compare across them; vectors are
        L2-normalised, so the cosine is the dot product). No floor: the caller drops low cosines. A
        ``vector`` whose dimension is not a scope's raises EmbeddingModelMismatchError."""

    @abstractmethod
    def neighbours(self, scope: ScopeRef, fact_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        """For each fact, the active (unexpired) facts written just before and after it in the same session
        (by ``seq``), for neighbour-context recall: ``{id: (previous id or None, next id or None)}``. The fact
        itself may have any status; ids that do not exist, have no ``session_id`` or a store run's (one that
        starts with :data:`~autogen_shared_memory.core.types.RUN_SESSION_PREFIX`: the writer named no
        session) are left out."""

    @abstractmethod
    def stats(self, scope: ScopeRef) -> ScopeStats:
        """Counts per status, size, embedding model and last write of a scope (the fields of
        :class:`~autogen_shared_memory.core.types.ScopeStats`, documented there); a scope that does not exist
        reports zero counts and ``None``/0 elsewhere."""

    @abstractmethod
    def scopes(self, kind: ScopeKind | None = None) -> list[ScopeRef]:
        """The scopes that exist (have been written to), optionally of one kind, in no particular order."""

    @abstractmethod
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
        """Rows of one table of the scope (see :data:`STORAGE_TABLES` and the record tables), with ``seq``
        (except ``meta``, ordered by key, which ignores ``after_seq``): matching ``where`` (as in
        :class:`ScopeTx`) and ``seq > after_seq``, oldest or newest first by ``seq``, or, with
        ``query_terms``, only the rows whose ``TableSpec.fts`` column holds one of the terms (their OR,
        tokenised and stemmed as in :meth:`lexical`), best match first (``oldest_first`` is then ignored).
        ``offset`` and ``limit`` (None: all) apply after the ordering. ``facts`` rows hold the columns of
        :data:`FACT_COLUMN_NAMES` plus ``embedding``; no backend-internal column appears."""

    @abstractmethod
    def snapshot(self, scope: ScopeRef) -> AbstractContextManager[RowReader]:
        """One consistent read of a scope (what an export reads it with): a context manager whose value reads
        rows as :meth:`rows` does (the same arguments, without ``scope``), every call until the context exits
        seeing the scope as it was at one moment, the moment the context is entered: every write committed
        to the scope before it, no part of any write committed after it.

        Writes to the scope go on meanwhile, by any thread or process, this one included, and are not
        blocked by it; its reads never wait for a writer. It may be held across many calls and between them
        (an export streams a scope out batch by batch while its caller writes the lines) and is released on
        exit, also when the exit is an exception or a generator closed early. A scope that does not exist
        reads as empty. How: SQLite, a deferred ``BEGIN`` on a connection of its own with a first read inside
        it (WAL keeps that read's snapshot until the ``COMMIT`` on exit); PostgreSQL, a ``REPEATABLE READ,
        READ ONLY`` transaction on a connection held until exit; an in-process backend, the scope's committed
        tables taken under its lock (kept unchanged by copy-on-write writes, or copied).
        """

    def close(self) -> None:
        """Release connections and caches."""

    def release_thread(self) -> None:
        """Release what the backend keeps for the calling thread, which is about to end (a backend that
        keeps a connection per thread closes it; others need do nothing)."""

    def health(self, model: ModelInfo | None = None) -> list[HealthCheck]:
        """Read-only checks of the storage, for ``doctor``: it changes no data, and reads what it must.

        The first check is the storage itself (reachable, or its directory usable); a backend adds what it can
        tell about its scopes (their files, schema versions, integrity). The default lists every scope and
        reads its stats: one ``backend`` check (``ok``, with the number of scopes) and a failed ``model
        match`` for each scope whose vectors come from another model than ``model``.

        Args:
            model: the configured embedding model, to compare each scope's with (None: not compared).

        Returns:
            The checks, in the order to show them.

        Raises:
            SharedMemoryError, OSError: the storage cannot be reached at all (the caller reports it as a failed
                check with what to do in its own terms, such as which option named the store).
        """
        stats = [self.stats(ref) for ref in self.scopes()]
        checks = [HealthCheck("backend", "ok", f"{len(stats)} scopes")]
        for s in stats:
            if model is not None and s.embedding_model not in (None, model.model_id):
                checks.append(
                    HealthCheck(
                        "model match",
                        "fail",
                        f"{s.scope}: vectors from {s.embedding_model}",
                        "pass --model DIR with that model, or run `autogen-shared-memory reembed`",
                    )
                )
        return checks

    def scope_location(self, scope: ScopeRef) -> str | None:
        """Where a scope is kept, for people to find it (the CLI's ``scopes --json`` shows it).

        Args:
            scope: the scope (it need not exist).

        Returns:
            SQLite: the name of its file in the store's directory. None (the default): it has no place of its own.
        """
        return None

    def stray_locations(self, listed: Collection[ScopeRef]) -> list[str]:
        """Places of the storage named like a scope's that hold no scope of ``listed``, so that reads skip them
        (the CLI warns about them and ``doctor`` says why).

        Args:
            listed: the scopes :meth:`scopes` listed (the caller has them already: listing again may be costly).

        Returns:
            SQLite: the paths of the files named like scope files (:func:`~.sqlite.files.is_scope_file_name`)
            that are not the file of a listed scope (not SQLite, someone else's database, a damaged copy).
            The default: none.
        """
        return []

    def is_storage_path(self, path: Path) -> bool:
        """Whether a file written at ``path`` would be taken for part of this backend's storage, or stop it
        from working (an export must never be written there).

        Args:
            path: a file name the caller is about to write.

        Returns:
            True for such a name; the default, for storage that keeps no files of its own, is False. SQLite: a
            name in the store's directory that a scope's file (or its WAL, shared-memory or journal file) has
            or may be given.
        """
        return False

    def change_watcher(self) -> ChangeWatcher | None:
        """A cheap way for the change feed (:mod:`~autogen_shared_memory.feed`) to tell which scopes may have
        changed, which it polls every ``poll_interval`` instead of reading every scope.

        Each call returns a new watcher with its own memory of the last look; the feed calls it once per
        subscription and uses the watcher from that subscription's thread only (it need not be thread-safe).
        A backend that wakes subscribers itself (PostgreSQL's ``subscribe``, LISTEN/NOTIFY) needs none.
        SQLite's compares each scope file's and its WAL's inode, size and modification time with the last
        look (:class:`~autogen_shared_memory.backends.sqlite.watch.ScopeFiles`), opening no file but new ones.

        Returns:
            The watcher, or None (the default): the feed then reads every scope every ``poll_interval``.
        """
        return None

    # ---------------------------------------------------------------- derived: facts
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
        """Store ``drafts`` with their ``vectors`` in one transaction and return one receipt per draft: the
        lifecycle decides what is inserted, reinforced and superseded. The scope records ``model`` or
        refuses another one (:class:`EmbeddingModelMismatchError`). ``check(tx)`` runs first, under the
        transaction's lock (a limit counted there holds against concurrent writers); raising aborts. All or
        nothing."""
        array = np.asarray(vectors, dtype=np.float32)

        def run(tx: ScopeTx) -> list[Receipt]:
            if check is not None:
                check(tx)
            claim_model(tx, scope, model)
            tx.vectors = array
            return lifecycle.write(tx, scope, drafts, near_duplicate_threshold, similar_threshold)

        return self.transact(scope, run)

    def set_status(self, scope: ScopeRef, change: StatusChange) -> Fact:
        """Apply ``lifecycle.set_status`` and return the updated fact (FactNotFoundError if absent)."""
        if not self.exists(scope):
            raise FactNotFoundError(f"no fact {change.fact_id!r} in {scope}")

        def run(tx: ScopeTx) -> Fact:
            lifecycle.set_status(tx, scope, change.fact_id, change.status, change.actor, change.at, change.reason)
            return tx.get([change.fact_id])[0]  # read in the transaction: a purge may delete it right after

        return self.transact(scope, run, change.status)

    def withdraw(self, scope: ScopeRef, change: StatusChange) -> bool:
        """Apply ``lifecycle.withdraw`` (``change.actor`` takes back its statement of the fact); whether it
        changed anything."""
        if not self.exists(scope):
            return False
        return self.transact(
            scope,
            lambda tx: lifecycle.withdraw(tx, scope, change.fact_id, change.actor, change.at, change.reason),
            "withdrawn",
        )

    def approve(
        self, scope: ScopeRef, change: StatusChange, vector: Vectors, model: ModelInfo, near_duplicate_threshold: float
    ) -> Fact:
        """Apply ``lifecycle.approve`` to a fact held for review, ``vector`` being its vector (a one-row
        matrix) for the near-duplicate check; return the fact that now holds what it says (the held one, or
        the live fact it restated)."""
        if not self.exists(scope):
            raise FactNotFoundError(f"no fact {change.fact_id!r} in {scope}")
        array = np.asarray(vector, dtype=np.float32)

        def run(tx: ScopeTx) -> Fact:
            claim_model(tx, scope, model)
            tx.vectors = array
            holder = lifecycle.approve(
                tx, scope, change.fact_id, change.actor, change.at, change.reason, near_duplicate_threshold
            )
            return tx.get([holder])[0]  # read in the transaction: a purge may delete it right after

        return self.transact(scope, run, "active")

    def purge(self, scope: ScopeRef, before: float, actor: str) -> list[str]:
        """Apply ``lifecycle.purge`` (nothing for a scope that does not exist); return the deleted ids."""
        if not self.exists(scope):
            return []
        return self.transact(scope, lambda tx: lifecycle.purge(tx, before, actor), "purge")

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

    def get_across(self, wanted: Mapping[ScopeRef, Sequence[str]]) -> dict[ScopeRef, list[Fact]]:
        """:meth:`get` of several scopes at once (a search of ``scope="all"`` reads its results' facts so).

        Args:
            wanted: the ids to read, by scope.

        Returns:
            Each scope's facts, as :meth:`get` returns them.
        """
        return {scope: self.get(scope, ids) for scope, ids in wanted.items()}

    def neighbours_across(
        self, wanted: Mapping[ScopeRef, Sequence[str]]
    ) -> dict[ScopeRef, dict[str, tuple[str | None, str | None]]]:
        """:meth:`neighbours` of several scopes at once (a search's neighbour context asks so).

        Args:
            wanted: the ids to look up, by scope.

        Returns:
            Each scope's answer, as :meth:`neighbours` gives it.
        """
        return {scope: self.neighbours(scope, ids) for scope, ids in wanted.items()}

    def exists(self, scope: ScopeRef) -> bool:
        """Whether the scope has been created (called on every search: backends make it cheap)."""
        return scope in self.scopes(scope.kind)

    def history(self, scope: ScopeRef, fact_id: str) -> list[AuditEvent]:
        """The audit trail of one fact, oldest first (it survives purge)."""
        return [
            AuditEvent(r["fact_id"], r["event"], r["actor"], r["at"], json.loads(r["detail"] or "{}"), r["seq"])
            for r in self.rows(scope, "audit", {"fact_id": fact_id})
        ]

    # ---------------------------------------------------------------- derived: meta and model
    def list_meta(self, scope: ScopeRef, prefix: str) -> dict[str, str]:
        """All scope settings whose key starts with ``prefix``."""
        return {r["key"]: r["value"] for r in self.rows(scope, "meta") if r["key"].startswith(prefix)}

    def get_meta(self, scope: ScopeRef, key: str) -> str | None:
        """A scope setting, None when unset."""
        found = self.rows(scope, "meta", {"key": key})
        return str(found[0]["value"]) if found else None

    def set_meta(self, scope: ScopeRef, key: str, value: str | None) -> None:
        """Set (or with None, clear) a scope setting."""

        def run(tx: ScopeTx) -> None:
            if value is None:
                tx.delete_rows("meta", {"key": key})
            else:
                tx.add_rows("meta", [{"key": key, "value": value}], on_conflict="update")

        self.transact(scope, run, "meta")

    def check_model(self, scope: ScopeRef, model: ModelInfo) -> None:
        """Raise EmbeddingModelMismatchError if the scope's vectors come from another model."""
        compare_model(scope, self.list_meta(scope, "embedding_"), model)

    # ---------------------------------------------------------------- derived: re-embedding
    def iter_contents(
        self, scope: ScopeRef, batch_size: int, after_seq: int = 0
    ) -> Iterator[list[tuple[int, str, str]]]:
        """All ``(seq, id, content)`` of a scope's facts after ``after_seq`` in batches (any status), for
        re-embedding."""
        last = after_seq
        while True:
            batch = page_after(self, self.rows(scope, "facts", after_seq=last, limit=batch_size), last)
            if not batch:
                return
            last = batch[-1]["seq"]
            yield [(r["seq"], r["id"], r["content"]) for r in batch]

    def replace_vectors(
        self,
        scope: ScopeRef,
        ids: Sequence[str],
        vectors: Vectors,
        model: ModelInfo,
        last_seq: int,
        actor: str,
        audit_seq: int = 0,
    ) -> int | None:
        """Store new vectors for ``ids`` (each audited as ``actor``) and record ``model`` as the scope's, in one
        transaction; return how many facts got one (facts purged since audit event ``audit_seq`` are left
        out: they are gone). None, with nothing written, if a fact not in ``ids`` was written since the
        caller listed them, with the old model (:func:`written_since`; ``last_seq``: the highest ``seq``
        listed)."""
        if not self.exists(scope):
            return 0
        listed = set(ids)

        def run(tx: ScopeTx) -> int | None:
            if written_since(tx.rows, listed, last_seq):
                return None
            gone = {e["fact_id"] for e in tx.rows("audit", {"event": "purged"}, after_seq=audit_seq)}
            keep = [i for i, fact_id in enumerate(ids) if fact_id not in gone]
            kept = [ids[i] for i in keep]
            tx.set_vectors(kept, vectors[keep] if len(keep) < len(ids) else vectors)
            for fact_id in kept:
                tx.audit(fact_id, "reembedded", actor, {"model": model.model_id})
            tx.add_rows("meta", model_rows(model), on_conflict="update")
            return len(kept)

        return self.transact(scope, run, "reembed")

    # ---------------------------------------------------------------- derived: records
    # Record tables are described once in :data:`autogen_shared_memory.core.records.TABLES`.
    def append_records(self, scope: ScopeRef, table: str, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """Insert rows in one transaction; return their ``seq`` numbers (strictly increasing)."""
        spec = table_spec(table)
        if not rows:
            return []
        clean = [{c: v for c, v in row.items() if c in spec.columns} for row in rows]
        return self.transact(scope, lambda tx: tx.add_rows(table, clean), f"append:{table}")

    def upsert_records(self, scope: ScopeRef, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert rows, or update the row with the same key (never for append-only tables)."""
        spec = table_spec(table)
        spec.check_mutable()
        if rows:
            clean = [{c: v for c, v in row.items() if c in spec.columns} for row in rows]
            self.transact(scope, lambda tx: tx.add_rows(table, clean, on_conflict="update"), f"records:{table}")

    def update_record(
        self,
        scope: ScopeRef,
        table: str,
        key: Mapping[str, Any],
        changes: Callable[[dict[str, Any]], Mapping[str, Any]],
    ) -> dict[str, Any] | None:
        """Read-modify-write one row atomically: ``changes(current_row)`` returns the columns to set
        (it may raise to abort). Returns the new row, or None if no row has that key."""
        spec = table_spec(table)
        spec.check_mutable()
        if not self.exists(scope):
            return None

        def run(tx: ScopeTx) -> dict[str, Any] | None:
            found = tx.rows(table, key)
            if not found:
                return None
            current = found[0]
            new = {c: v for c, v in changes(dict(current)).items() if c in spec.columns and c not in spec.key}
            if new:
                tx.update_rows(table, key, new)
            return {**current, **new}

        return self.transact(scope, run, f"records:{table}")

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
        table_spec(table)  # a record table
        return self.rows(
            scope,
            table,
            where,
            limit=limit,
            offset=offset,
            after_seq=after_seq,
            query_terms=query_terms,
            oldest_first=oldest_first,
        )

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
        spec = table_spec(table)
        spec.check_delete(force, before, time_column)
        if not self.exists(scope):
            return 0
        return self.transact(scope, lambda tx: tx.delete_rows(table, where, before, time_column), f"records:{table}")

    # ---------------------------------------------------------------- derived: transfer
    def export_scope(self, scope: ScopeRef) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every row of a scope as ``(table, row)``: ``meta``, ``facts`` (with the vector as bytes),
        ``audit``, then each record table, all read from one :meth:`snapshot` (an export taken while others
        write is the scope as it was at one moment: no audit row of a fact the export lacks, no fact whose
        status disagrees with its trail). Internal counters (``seq``) are left out."""
        if not self.exists(scope):
            return
        with self.snapshot(scope) as rows:
            for table in (*STORAGE_TABLES, *TABLES):
                last = 0
                while True:
                    batch = rows(table, limit=None if table == "meta" else 1000, after_seq=last)
                    if table != "meta":
                        page_after(self, batch, last)
                    for row in batch:
                        yield table, {c: v for c, v in row.items() if c != "seq"}
                    if table == "meta" or len(batch) < 1000:
                        break
                    last = batch[-1]["seq"]

    def import_scope(
        self, scope: ScopeRef, items: Sequence[tuple[str, dict[str, Any]]], policy: bool = False
    ) -> ScopeImport:
        """Apply exported rows in one transaction so that an import can be repeated, and an export taken
        later brings what happened since; returns what it did (:class:`ScopeImport`).

        * A row whose key exists is not inserted again; an audit event is inserted as many times as the
          export holds it (events of one transaction share their time: only the detail tells them apart).
        * A fact this scope purged (its ``purged`` event is here) is never inserted again: an old export
          does not bring back what was erased.
        * A fact that exists here changes only through the audit events the export brings that this scope
          lacks (each one inserted, so the change is in the trail and the change feed), replayed as the
          write that made them did it (:func:`replay_event`): a ``reinforced`` event counts a restatement
          and adds its author (the fact's own author's restatement also its tags, confidence, expiry,
          category and metadata keys), ``approved`` releases a fact held here, ``forgotten`` / ``rejected``
          / ``superseded`` close it as the event says, ``withdrawn`` takes an author's statement back
          (:func:`settle_statements`). The columns of the export's copy of such a fact are never applied:
          a file cannot approve, close, co-author or tag a fact without the event that did it. A closed
          fact is never reopened. An export row whose id is another fact here (other content, author or
          creation time) raises ValueError, nothing written.
        * Group membership (``member:*``) and privacy (``private``) rows this scope lacks are access
          policy: inserted only with ``policy`` (else ValueError naming the row, nothing written), and each
          is listed in ``changes``.
        * A scope's own identity (``scope_kind``/``scope_owner``) is never imported, and a recorded embedding
          model that differs from the import's is refused."""

        def run(tx: ScopeTx) -> ScopeImport:
            done = ScopeImport()
            seen: dict[tuple[Any, ...], int] = {}
            exported = {str(row["id"]): row for table, row in items if table == "facts"}
            here = {f.id: f for f in tx.get(sorted(exported))} if exported else {}
            for fid, fact in here.items():
                other = same_fact(fact, exported[fid])
                if other:
                    raise ValueError(f"{scope}: the export's fact {fid!r} is another fact here ({other})")
            erased = {str(r["fact_id"]) for r in tx.rows("audit", {"event": "purged"})} & set(exported)
            erased -= set(here)  # held here (restated here, purged elsewhere, that purge's event imported
            # since): changed by its events as usual
            brought: list[dict[str, Any]] = []  # the audit events this import inserted, in the file's order
            for table, row in items:
                if table == "meta":
                    if row["key"] in ("scope_kind", "scope_owner"):
                        continue
                    if row["key"] in MODEL_KEYS:
                        current = tx.rows("meta", {"key": row["key"]})
                        if current and current[0]["value"] != row["value"]:
                            raise EmbeddingModelMismatchError(
                                f"{scope} holds {row['key']} {current[0]['value']!r}, the import has "
                                f"{row['value']!r}: import into a store that uses the same model, then reembed() "
                                "if needed"
                            )
                    grants = is_policy_key(row["key"]) and not tx.rows("meta", {"key": row["key"]})
                    if grants and not policy:
                        raise ValueError(
                            f"{scope}: the export sets {row['key']!r} (access policy), which an import only "
                            "applies when asked to (policy=True, --with-policy)"
                        )
                    added = len(tx.add_rows("meta", [row], on_conflict="skip"))
                    done.inserted += added
                    if grants and added:
                        done.changes.append(f"{scope}: policy set: {policy_change(row['key'])}")
                elif table == "audit":
                    same = {c: row[c] for c in ("fact_id", "event", "actor", "at")}
                    detail = _detail(row.get("detail"))
                    key = (*same.values(), json.dumps(detail, sort_keys=True, default=str))
                    seen[key] = seen.get(key, 0) + 1
                    present = sum(_detail(r.get("detail")) == detail for r in tx.rows("audit", same))
                    if present < seen[key]:
                        done.inserted += len(tx.add_rows("audit", [{**same, "detail": row.get("detail")}]))
                        brought.append({**same, "detail": detail})
                elif table == "facts":
                    fid = str(row["id"])
                    if fid in erased:
                        done.purged += 1
                    elif fid not in here:
                        done.inserted += len(tx.add_rows(table, [row], on_conflict="skip"))
                else:
                    spec = table_spec(table)
                    row = {c: v for c, v in row.items() if c in spec.columns}
                    added = len(tx.add_rows(table, [row], on_conflict="skip"))
                    done.inserted += added
                    if not added and not spec.append_only and "updated_at" in spec.columns:
                        done.updated += newer_record(tx, table, spec.key, row)
            # Facts that were here before this import (or only their trail: closed by the events of an export
            # that no longer holds them) change as the events it brought say; a fact it inserted holds them.
            updated: set[str] = set()
            withdrawn: set[str] = set()
            for event in brought:
                fid = str(event["fact_id"])
                if fid in exported and fid not in here:
                    continue
                if event["event"] == "withdrawn":
                    withdrawn.add(fid)
                    continue
                change = replay_event(tx, event)
                if change is None:
                    continue
                done.changes.append(f"{scope}: fact {fid} {change}")
                if change.startswith("closed"):
                    done.closed += 1
                else:
                    updated.add(fid)
            for fid in sorted(withdrawn):
                change = settle_statements(tx, fid)
                if change is not None:
                    done.changes.append(f"{scope}: fact {fid} {change}")
                    if change.startswith("closed"):
                        done.closed += 1
                    else:
                        updated.add(fid)
            done.updated += len(updated)
            return done

        return self.transact(scope, run, "import")


@dataclass
class ScopeImport:
    """What :meth:`Backend.import_scope` did to one scope: rows inserted, facts closed, facts (and mutable
    records) updated, facts left out because the scope purged them, and one line per change to something
    that was here before (a fact's status, authors or counts; a membership or privacy setting)."""

    inserted: int = 0
    closed: int = 0
    updated: int = 0
    purged: int = 0
    changes: list[str] = field(default_factory=list)


def is_policy_key(key: str) -> bool:
    """Whether a ``meta`` key is access policy: a group's member, an agent scope's privacy."""
    return key.startswith(MEMBER_PREFIX) or key == PRIVATE_KEY


def policy_change(key: str) -> str:
    """The setting a policy ``meta`` key makes, in words."""
    if key == PRIVATE_KEY:
        return "private (closed to other agents' reads)"
    return f"member {key[len(MEMBER_PREFIX) :]!r}"


def same_fact(fact: Fact, row: Mapping[str, Any]) -> str:
    """Why an export's fact ``row`` with ``fact``'s id is another fact (its content, author or creation time
    differ: none of them ever changes), or "" when it is the same one."""
    for column in ("content", "created_by", "created_at"):
        if row.get(column) != getattr(fact, column):
            return f"its {column} differs"
    return ""


def _detail(value: Any) -> Any:
    """An audit event's detail as a value (stored as JSON text, or as a value by a backend's driver)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return {} if value is None else value


def closed_row(fact_id: str, event: Mapping[str, Any]) -> dict[str, Any]:
    """The closed state a ``forgotten``, ``rejected`` or ``superseded`` audit event gives its fact (as the
    write left it)."""
    detail = event["detail"] if isinstance(event["detail"], dict) else {}
    successor = detail.get("superseded_by")
    reason = detail.get("reason")
    return {
        "id": fact_id,
        "status": "superseded" if event["event"] == "superseded" else "forgotten",
        "superseded_by": successor if event["event"] == "superseded" else None,
        "tombstone_by": event["actor"],
        "tombstone_at": event["at"],
        "tombstone_reason": f"superseded by {successor}"
        if event["event"] == "superseded"
        else reason
        if isinstance(reason, str)
        else None,
    }


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def replay_event(tx: ScopeTx, event: Mapping[str, Any]) -> str | None:
    """Apply to the fact it names an audit event an import brought (``detail`` as a value), as the write that
    made it changed the fact there; what changed, in words, or None (nothing: no such fact, an event that
    changes no fact, or one whose change this fact cannot take, as a closed fact that is never reopened).

    * ``reinforced``: one more restatement (``reinforcement`` + 1), its author added to ``stated_by``; when
      the author is the fact's own, also the restatement's tags (up to :data:`~..core.types.MAX_TAGS`), a
      higher confidence, its expiry (none, or a later one), a category the fact lacks and metadata keys it
      lacks, as :mod:`~autogen_shared_memory.core.lifecycle` refreshes an author's own fact. An active fact
      only.
    * ``approved``: a fact held for review becomes active, or, when the approval merged it into another
      fact (``merged_into``), is closed as that approval closed it.
    * ``forgotten``, ``rejected``, ``superseded``: an open fact (active, expired or held) is closed with the
      event's actor, time and reason (:func:`closed_row`).
    * ``withdrawn``: nothing here; :func:`settle_statements` applies it.
    """
    found = tx.get([str(event["fact_id"])])
    if not found:
        return None
    fact = found[0]
    kind, actor = event["event"], str(event["actor"])
    detail = event["detail"] if isinstance(event["detail"], dict) else {}
    if kind in CLOSING_EVENTS:
        if fact.status not in ("active", "expired", "pending"):
            return None
        closed = closed_row(fact.id, event)
        tx.update(fact.id, {c: v for c, v in closed.items() if c != "id"})
        return f"closed ({closed['status']} by {actor})"
    if kind == "approved":
        if fact.status != "pending":
            return None
        joined = detail.get("merged_into")
        if isinstance(joined, str):
            tx.update(
                fact.id,
                {
                    "status": "forgotten",
                    "tombstone_by": actor,
                    "tombstone_at": event["at"],
                    "tombstone_reason": f"approved as a restatement of {joined}",
                },
            )
            return f"closed (approved by {actor} as a restatement of {joined})"
        tx.update(fact.id, {"status": "active"})
        return f"approved by {actor}"
    if kind != "reinforced" or fact.status not in ("active", "expired"):
        return None
    changes: dict[str, Any] = {"reinforcement": fact.reinforcement + 1}
    if actor not in fact.stated_by:
        changes["stated_by"] = (*fact.stated_by, actor)
    if actor == fact.created_by:  # the author said it again: its own fact is refreshed
        confidence = _number(detail.get("confidence"))
        if confidence is not None and 0.0 <= confidence <= 1.0:
            changes["confidence"] = max(fact.confidence, confidence)
        tags = detail.get("tags")
        if isinstance(tags, list):
            added = tuple(dict.fromkeys(t for t in tags if isinstance(t, str) and t not in fact.tags))
            changes["tags"] = fact.tags + added[: max(0, MAX_TAGS - len(fact.tags))]
        if fact.expires_at is not None:
            later = _number(detail.get("expires_at"))
            changes["expires_at"] = None if later is None else max(fact.expires_at, later)
        if fact.category is None and isinstance(detail.get("category"), str):
            changes["category"] = detail["category"]
        metadata = detail.get("metadata")
        if isinstance(metadata, dict):
            merged = {**metadata, **fact.metadata}
            if len(merged) > len(fact.metadata) and len(json.dumps(merged).encode()) <= MAX_METADATA_BYTES:
                changes["metadata"] = json.dumps(merged)
    tx.update(fact.id, changes)
    return f"restated by {actor}"


def settle_statements(tx: ScopeTx, fact_id: str) -> str | None:
    """After an import brought a ``withdrawn`` event of a fact: the agents whose last word on the active fact
    is a ``withdrawn`` event (later than their last ``created`` or ``reinforced`` one, in either store) leave
    its ``stated_by``, as :func:`~autogen_shared_memory.core.lifecycle.withdraw` left them where it ran; with
    no one left, the fact is closed as that withdrawal closed it, with a ``forgotten`` event (the change
    feed and ``history`` show it). What changed, in words, or None."""
    found = tx.get([fact_id])
    if not found or found[0].status != "active":
        return None
    said: dict[str, float] = {}
    taken_back: dict[str, float] = {}
    for event in tx.rows("audit", {"fact_id": fact_id}):
        if event["event"] in ("created", "reinforced"):
            said[event["actor"]] = max(said.get(event["actor"], 0.0), float(event["at"]))
        elif event["event"] == "withdrawn":
            taken_back[event["actor"]] = max(taken_back.get(event["actor"], 0.0), float(event["at"]))
    keep = tuple(a for a in found[0].stated_by if taken_back.get(a, -1.0) < said.get(a, 0.0))
    if keep == found[0].stated_by:
        return None
    left = sorted(set(found[0].stated_by) - set(keep))
    if keep:
        tx.update(fact_id, {"stated_by": keep})
        return f"withdrawn by {', '.join(left)}"
    last = max(taken_back.items(), key=lambda item: item[1])
    reason = "every author withdrew it"
    tx.update(
        fact_id,
        {"status": "forgotten", "tombstone_by": last[0], "tombstone_at": last[1], "tombstone_reason": reason},
    )
    tx.audit(fact_id, "forgotten", last[0], {"reason": reason})
    return f"closed (forgotten: {reason})"


def newer_record(tx: ScopeTx, table: str, key: Sequence[str], row: Mapping[str, Any]) -> bool:
    """Take the export's copy of a mutable record (a task, a profile entry, a directory entry, a state) when
    it was updated later than the one here; whether it was."""
    where = {c: row[c] for c in key if c in row}
    here = tx.rows(table, where) if len(where) == len(key) else []
    later = row.get("updated_at")
    if len(here) != 1 or not isinstance(later, (int, float)) or later <= (here[0].get("updated_at") or 0.0):
        return False
    tx.update_rows(table, where, {c: v for c, v in row.items() if c not in key})
    return True


def model_rows(model: ModelInfo) -> list[dict[str, Any]]:
    """The ``meta`` rows that record a scope's embedding model."""
    return [
        {"key": "embedding_model", "value": model.model_id},
        {"key": "embedding_dim", "value": str(model.dimension)},
    ]


def claim_model(tx: ScopeTx, scope: ScopeRef, model: ModelInfo) -> None:
    """Inside a write: record ``model`` as the scope's, or raise if its vectors come from another one."""
    meta = {r["key"]: r["value"] for r in tx.rows("meta") if r["key"] in MODEL_KEYS}
    if meta:
        compare_model(scope, meta, model)
    else:
        tx.add_rows("meta", model_rows(model), on_conflict="update")


REEMBED_ROUNDS = 20  # rounds a re-embed makes after the facts written meanwhile before it gives up


def page_after(backend: object, rows: list[dict[str, Any]], after: int) -> list[dict[str, Any]]:
    """``rows``, one page of a backend's ``rows(..., after_seq=after)``, checked: a backend that returned a
    row at or before ``after`` would have its caller page forever, so it is refused instead.

    Args:
        backend: the backend that returned the page (named in the error).
        rows: the page, in ``seq`` order.
        after: the ``after_seq`` it was asked for.

    Returns:
        ``rows``.

    Raises:
        SharedMemoryError: a row of the page is not after ``after`` (the backend breaks its contract).
    """
    if rows and int(rows[0]["seq"]) <= after:
        raise SharedMemoryError(
            f"{type(backend).__name__}.rows(after_seq={after}) returned a row with seq {rows[0]['seq']}: "
            "the Backend contract is rows after it only"
        )
    return rows


def written_since(
    rows: Callable[..., list[dict[str, Any]]], listed: Collection[str], last_seq: int
) -> list[dict[str, Any]]:
    """The fact rows (``rows``: a transaction's or a scope's :meth:`~ScopeTx.rows`) not in ``listed`` whose
    ``seq`` is above the highest one a listed fact still has: the facts written since ``listed`` was read
    (``last_seq``, its highest ``seq``). Not simply those after ``last_seq``: a backend may give a new row
    the ``seq`` of a purged one (SQLite reuses the highest rowid), and a new row's ``seq`` is above every
    row present when it was written, so above the listed ones still there. The window back from
    ``last_seq`` widens until it holds one of them (or the whole table)."""
    width = 64
    while True:
        start = max(0, last_seq - width)
        window = rows("facts", after_seq=start)
        present = [int(r["seq"]) for r in window if r["id"] in listed]
        if present or start == 0:
            floor = max(present, default=0)
            return [r for r in window if int(r["seq"]) > floor and r["id"] not in listed]
        width *= 8


def reembed_scope(
    backend: Backend,
    scope: ScopeRef,
    embed: Callable[[Sequence[str]], Vectors],
    model: ModelInfo,
    batch_size: int = 256,
    progress: Callable[[int], None] | None = None,
    actor: str = "system",
) -> int:
    """Re-embed every fact of a scope with ``embed`` and make ``model`` the scope's, in one write.

    Embedding runs batch by batch outside any write transaction; the vectors, their audit events and the
    model are then written in one transaction (:meth:`Backend.replace_vectors`). So a search never meets two
    models' vectors in one scope, and a re-embed stopped part-way has changed nothing: run it again. Facts
    written meanwhile, with the old model, are embedded too before the switch (at most
    :data:`REEMBED_ROUNDS` rounds, then a :class:`SharedMemoryError` says to run it when writes pause).
    """
    ids: list[str] = []
    vectors: list[Vectors] = []
    last = 0
    trail = backend.rows(scope, "audit", oldest_first=False, limit=1)
    audit_seq = int(trail[0]["seq"]) if trail else 0  # facts purged after this are not re-embedded
    batches: Iterable[list[tuple[int, str, str]]] = backend.iter_contents(scope, batch_size)
    for _ in range(REEMBED_ROUNDS):
        for batch in batches:
            vectors.append(np.asarray(embed([content for _, _, content in batch]), np.float32))
            ids.extend(fid for _, fid, _ in batch)
            last = max(last, batch[-1][0])
            if progress is not None:
                progress(len(batch))
        matrix = np.concatenate(vectors) if vectors else np.zeros((0, model.dimension), np.float32)
        done = backend.replace_vectors(scope, ids, matrix, model, last, actor, audit_seq)
        if done is not None:
            return done
        late = [(r["seq"], r["id"], r["content"]) for r in written_since(partial(backend.rows, scope), set(ids), last)]
        batches = [late[i : i + batch_size] for i in range(0, len(late), batch_size)]
    raise SharedMemoryError(
        f"re-embedding {scope}: facts kept being written with the old model; run reembed() when writes pause"
    )


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
    ``version=1``, ``updated_at`` (the transaction's ``now``), the vector and ``seq``; the other columns
    (``superseded_by``, ``tombstone_*``) start NULL."""
    return (
        draft.id,
        draft.content,
        draft.created_by,
        draft.created_at,
        draft.confidence,
        json.dumps(list(draft.tags)) if draft.tags else "[]",  # (most drafts: json.dumps costs ~2 us a call)
        draft.category,
        json.dumps(draft.metadata) if draft.metadata else "{}",
        draft.session_id,
        draft.expires_at,
        json.dumps(list(draft.supersedes)) if draft.supersedes else "[]",
        draft.content_hash,
        json.dumps([draft.created_by]),
        draft.status,
    )


def as_of_clause(prefix: str, mark: str, approvals: str) -> str:
    """:func:`~autogen_shared_memory.core.lifecycle.valid_at` as an SQL condition on the fact columns (``prefix``
    names their table, ``mark`` is the driver's placeholder), for a fact that was not held for review then:
    ``approvals`` selects the fact's audit events (as ``a``): an ``approved`` one after the time means the fact
    was pending then, a ``rejected`` one that it was pending until it was closed. Its four parameters are the
    time, four times."""
    p = prefix
    return (
        f"{p}created_at <= {mark} AND ({p}status = 'active' OR ({p}status IN ('superseded', 'forgotten') "
        f"AND {p}tombstone_at > {mark})) AND ({p}expires_at IS NULL OR {p}expires_at > {mark}) "
        f"AND NOT EXISTS ({approvals} AND (a.event = 'rejected' OR (a.event = 'approved' AND a.at > {mark})))"
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
    """A Fact from a row of :data:`FACT_COLUMN_NAMES`, in that order, each column read by its name (JSON columns
    as text; an active fact past ``expires_at`` reported ``expired``).

    Raises:
        ValueError: the row has another number of columns.
    """
    values = dict(zip(FACT_COLUMN_NAMES, row, strict=True))
    del values["seq"]
    for column, holds in FACT_JSON_COLUMNS.items():
        value = values[column]
        if value is None or isinstance(value, str):
            value = json.loads(value or ("{}" if holds is dict else "[]"))
        values[column] = value if holds is dict else tuple(value or ())
    if values["status"] == "active" and values["expires_at"] is not None and values["expires_at"] <= now:
        values["status"] = "expired"
    return Fact(scope=scope, **values)
