"""The shared case log: one append-only history per group, with per-agent checkpoints.

It is not a fact store: entries are never reinforced, superseded in place or forgotten. The database
itself refuses UPDATE and DELETE on it. A correction is a new entry that names the entries it
supersedes; readers choose the full history or the current view (superseded entries folded away).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..core.records import lookup_key, storable_text
from ..core.types import Filters, ScopeRef, validate_owner_id
from ..errors import CheckpointError, InvalidInputError
from ..facts import _off_loop, as_engine
from ..search import engine

if TYPE_CHECKING:
    from ..facts import FactStore

MAX_SUMMARY_CHARS = 512
MAX_BATCH = 20


@dataclass(frozen=True)
class CaseEntry:
    id: str
    version: int  # the entry's position in the log: strictly increasing
    session_id: str | None
    author: str
    summary: str
    supersedes: tuple[str, ...]
    created_at: float


@dataclass(frozen=True)
class AppendResult:
    ids: tuple[str, ...]
    context_version: int  # the log's version after this append (the last entry's version)


@dataclass(frozen=True)
class CaseHit:
    entry: CaseEntry
    score: float
    lexical_rank: int | None
    semantic_rank: int | None

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def content(self) -> str:
        return self.entry.summary


def _entry(row: Mapping[str, Any]) -> CaseEntry:
    return CaseEntry(
        id=row["id"],
        version=int(row["seq"]),
        session_id=row.get("session_id"),
        author=row["author"],
        summary=row["summary"],
        supersedes=tuple(json.loads(row.get("supersedes") or "[]")),
        created_at=row["created_at"],
    )


class CaseLog:
    """The case log of ``group_id`` as seen by ``agent_id`` (a group member), or by trusted code when
    ``agent_id`` is None (entries and checkpoints are then attributed to the store's ``operator_id``).

    Made by a handle's :meth:`~..handles.MemoryHandle.case_log`.
    """

    def __init__(self, store: FactStore, group_id: str, agent_id: str | None = None) -> None:
        self.store = as_engine(store)
        self.group_id = validate_owner_id(group_id, "group_id")
        self.agent_id = None if agent_id is None else validate_owner_id(agent_id, "agent_id")
        self.author = self.agent_id if self.agent_id is not None else store.operator_id
        self.scope = ScopeRef("group", group_id)

    def _check(self, action: str) -> None:
        if action == "read":
            self.store.access.check_read(self.agent_id, self.scope)
        else:
            self.store.access.check_write(self.agent_id, self.scope, "append to the case log of")

    # ------------------------------------------------------------------ writing
    def append(self, entries: str | Sequence[str | Mapping[str, Any]]) -> AppendResult:
        """Append 1 to 20 entries atomically, authored by this log's agent (the operator id for trusted code).

        Args:
            entries: one summary, or a list of summaries or of mappings with ``summary`` and ``supersedes``
                (ids of earlier entries this one corrects).

        Returns:
            The new entries' ids and the log's version after the append.

        Raises:
            MemoryAccessDenied: the agent is not a member of the group (nothing is written).
            CheckpointError: ``supersedes`` names an entry not in this log (nothing is written).
            InvalidInputError: a bad entry (nothing is written).
        """
        self._check("write")
        items = [entries] if isinstance(entries, str) else list(entries)
        if not 1 <= len(items) <= MAX_BATCH:
            raise InvalidInputError(f"append takes 1 to {MAX_BATCH} entries at once, got {len(items)}")
        drafts: list[tuple[str, tuple[str, ...]]] = []
        for item in items:
            spec = {"summary": item} if isinstance(item, str) else dict(item)
            unknown = set(spec) - {"summary", "supersedes"}
            if unknown:
                raise InvalidInputError(f"unknown case log entry fields {sorted(unknown)}")
            summary = spec.get("summary")
            if not isinstance(summary, str) or not summary.strip():
                raise InvalidInputError("a case log summary must be a non-empty string")
            if storable_text(summary) != summary:  # the log is append-only: a NUL would stay for good
                raise InvalidInputError("a case log summary must not contain NUL or lone surrogate characters")
            if len(summary) > MAX_SUMMARY_CHARS:
                raise InvalidInputError(
                    f"a case log summary is at most {MAX_SUMMARY_CHARS} characters, got {len(summary)}"
                )
            supersedes = tuple(spec.get("supersedes") or ())
            drafts.append((summary, supersedes))
        referenced = {old for _, sup in drafts for old in sup}
        if referenced:  # entries are never deleted, so checking outside the transaction is safe
            known = {e.id for e in self._rows_by_id(referenced)}
            missing = referenced - known
            if missing:
                raise CheckpointError(f"cannot supersede {sorted(missing)}: not in the case log of {self.group_id}")
        vectors = self.store.embedder.embed([summary for summary, _ in drafts])  # before any lock
        now = time.time()
        rows: list[dict[str, Any]] = [
            {
                "id": f"c_{time.time_ns() // 1_000_000:012x}{secrets.token_hex(4)}",
                "session_id": self.store.session_id,
                "author": self.author,
                "summary": summary,
                "supersedes": json.dumps(list(supersedes)),
                "created_at": now,
                "embedding": np.ascontiguousarray(vector, dtype=np.float32).tobytes(),
            }
            for (summary, supersedes), vector in zip(drafts, vectors, strict=True)
        ]
        seqs = self.store.backend.append_records(self.scope, "case_log", rows)
        return AppendResult(tuple(str(r["id"]) for r in rows), max(seqs))

    # ------------------------------------------------------------------ reading
    def _rows_by_id(self, ids: set[str]) -> list[CaseEntry]:
        found: list[CaseEntry] = []
        for entry_id in ids:
            key = lookup_key(entry_id, "entry id")
            rows = self.store.backend.read_records(self.scope, "case_log", {"id": key}, limit=1) if key else []
            found.extend(_entry(r) for r in rows)
        return found

    def get(self, entry_id: str) -> CaseEntry:
        """One entry by id.

        Args:
            entry_id: the entry.

        Returns:
            The entry.

        Raises:
            MemoryAccessDenied: the agent may not read the group.
            CheckpointError: no such entry in this log.
        """
        self._check("read")
        found = self._rows_by_id({entry_id})
        if not found:
            raise CheckpointError(f"no entry {entry_id!r} in the case log of {self.group_id}")
        return found[0]

    def entries(self, after: str | None = None, *, current: bool = False, limit: int = 10_000) -> list[CaseEntry]:
        """Entries oldest first, after the entry ``after`` (a checkpoint) if given.

        Args:
            after: only the entries after this one.
            current: fold superseded entries away (the reconciled view); the default is the full history.
            limit: at most this many (1 to 1,000,000).

        Returns:
            The entries.

        Raises:
            MemoryAccessDenied: the agent may not read the group.
            CheckpointError: ``after`` is not in this log.
            InvalidInputError: a bad limit.
        """
        self._check("read")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1_000_000:
            raise InvalidInputError(f"limit must be an integer from 1 to 1000000, got {limit!r:.40}")
        after_seq = self.get(after).version if after is not None else None
        rows = self.store.backend.read_records(
            self.scope, "case_log", limit=limit, after_seq=after_seq, oldest_first=True
        )
        entries = [_entry(r) for r in rows]
        if current:  # a later entry may supersede an earlier one: look at the whole log
            everything = self.store.backend.read_records(self.scope, "case_log", limit=1_000_000)
            superseded = {old for r in everything for old in json.loads(r.get("supersedes") or "[]")}
            entries = [e for e in entries if e.id not in superseded]
        return entries

    @property
    def version(self) -> int:
        """The log's current version (the last entry's), 0 when empty."""
        self._check("read")
        rows = self.store.backend.read_records(self.scope, "case_log", limit=1)
        return int(rows[0]["seq"]) if rows else 0

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, entry_id: str | None = None) -> CaseEntry | None:
        """Record that this agent consumed the log up to an entry.

        Args:
            entry_id: the entry (default: the latest).

        Returns:
            The entry checkpointed, or ``None`` when the log is empty.

        Raises:
            MemoryAccessDenied: the agent may not read the group.
            CheckpointError: no such entry in this log.
        """
        self._check("read")
        if entry_id is None:
            rows = self.store.backend.read_records(self.scope, "case_log", limit=1)
            if not rows:
                return None
            entry = _entry(rows[0])
        else:
            entry = self.get(entry_id)
        self.store.backend.upsert_records(
            self.scope,
            "case_checkpoints",
            [
                {
                    "agent_id": self.author,
                    "entry_id": entry.id,
                    "version": entry.version,
                    "updated_at": time.time(),
                }
            ],
        )
        return entry

    def last_checkpoint(self) -> str | None:
        """This agent's last checkpoint.

        Returns:
            The id of the entry, or ``None`` before the first checkpoint.
        """
        rows = self.store.backend.read_records(self.scope, "case_checkpoints", {"agent_id": self.author}, limit=1)
        return str(rows[0]["entry_id"]) if rows else None

    def resume(self, *, current: bool = False) -> list[CaseEntry]:
        """The entries this agent has not consumed yet (after its last checkpoint).

        Args:
            current: fold superseded entries away.

        Returns:
            The entries, oldest first.

        Raises:
            MemoryAccessDenied: the agent may not read the group.
        """
        return self.entries(after=self.last_checkpoint(), current=current)

    # ------------------------------------------------------------------ recall
    def search(self, query: str, top_k: int = 5, *, include_superseded: bool = False) -> list[CaseHit]:
        """Hybrid recall over the log's summaries: the fact search's engine (full text and cosine side by
        side, fused by RRF) over this log's entries.

        Args:
            query: what to look for (a blank query finds nothing).
            top_k: at most this many hits.
            include_superseded: also entries a later entry corrected.

        Returns:
            The hits, best first.

        Raises:
            MemoryAccessDenied: the agent may not read the group.
        """
        self._check("read")
        if not isinstance(query, str) or not query.strip():
            return []
        store = self.store
        rows = store.backend.read_records(self.scope, "case_log", limit=1_000_000, oldest_first=True)
        legs = _CaseLegs(store, self.scope, rows, include_superseded)
        settings = dataclasses.replace(store.recall, scope_weights={}, context_weights=None)
        ranked = engine.search(legs, [self.scope], query, store.embedder.embed, settings, top_k, Filters())
        return [CaseHit(_entry(legs.by_id[r.key[1]]), r.score, r.lexical_rank, r.semantic_rank) for r in ranked]

    aappend = _off_loop(append)
    aget = _off_loop(get)
    aentries = _off_loop(entries)
    acheckpoint = _off_loop(checkpoint)
    alast_checkpoint = _off_loop(last_checkpoint)
    aresume = _off_loop(resume)
    asearch = _off_loop(search)


class _CaseLegs:
    """The case log as the search engine's two legs: FTS over the summaries, cosine over their vectors."""

    def __init__(
        self, store: FactStore, scope: ScopeRef, rows: Sequence[dict[str, Any]], include_superseded: bool
    ) -> None:
        self.store, self.scope = store, scope
        self.by_id = {r["id"]: r for r in rows}
        hidden = set() if include_superseded else {old for r in rows for old in json.loads(r.get("supersedes") or "[]")}
        self.hidden = hidden
        dim = store.model.dimension
        self.usable = [
            r for r in rows if r.get("embedding") and len(r["embedding"]) == 4 * dim and r["id"] not in hidden
        ]
        self.dim = dim

    def lexical(
        self, scopes: Sequence[ScopeRef], terms: Sequence[str], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        if not terms:
            return []
        found = self.store.backend.read_records(self.scope, "case_log", limit=limit, query_terms=terms)
        ids = [r["id"] for r in found if r["id"] not in self.hidden]
        return [(self.scope, i, float(len(ids) - n)) for n, i in enumerate(ids)]

    def semantic(
        self, scopes: Sequence[ScopeRef], vector: npt.NDArray[np.float32], limit: int, filters: Filters
    ) -> list[tuple[ScopeRef, str, float]]:
        if not self.usable:
            return []
        matrix = np.frombuffer(b"".join(r["embedding"] for r in self.usable), dtype=np.float32).reshape(-1, self.dim)
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        order = np.argsort(-scores, kind="stable")[:limit]
        return [(self.scope, self.usable[i]["id"], float(scores[i])) for i in order]

    def neighbours_across(
        self, wanted: Mapping[ScopeRef, Sequence[str]]
    ) -> dict[ScopeRef, dict[str, tuple[str | None, str | None]]]:
        return {}  # entries have no sessions (and the case log's search asks for no neighbour context)
