"""Every call the inspector makes into a store, in one module: the pages and routes never touch the store.

The inspector is trusted code (the operator's view of every scope), except where a page asks for an agent's
view (a search as a chosen agent, with that agent's access policy applied). Reading never writes: on SQLite
the scope files are opened read-only (the SQLite backend's ``read_only`` option); an operator action (approve or reject
a held write) opens the store read-write for the length of that action only (:attr:`Inspector.writer`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..backends.base import FACT_COLUMN_NAMES, Backend, fact_from_row
from ..core.records import ConversationRecord, ToolCallRecord
from ..core.types import STATUSES, AuditEvent, Change, Fact, Filters, Hit, ScopeRef, ScopeStats
from ..errors import InvalidInputError, NotAStoreError
from ..feed import Subscription
from ..settings import WritePolicy
from ..store import SharedMemoryStore
from ..views.agents import AgentInfo, Task
from ..views.caselog import CaseEntry

PER_PAGE = 50
MAX_PER_PAGE = 500
CHUNK = 500  # facts read per backend call when a filter is applied here rather than in the query


@dataclass(frozen=True)
class ScopeRow:
    """One scope as the overview shows it."""

    scope: ScopeRef
    stats: ScopeStats
    members: tuple[str, ...]  # a group's members (empty for other kinds)
    private: bool  # an agent scope closed to cross-agent reads

    @property
    def total(self) -> int:
        return sum(self.stats.counts.values())


@dataclass(frozen=True)
class FactPage:
    """One page of the facts table."""

    facts: list[Fact]
    page: int
    per_page: int
    total: int | None  # None when counting would mean reading every matching fact
    has_next: bool


@dataclass(frozen=True)
class Activity:
    """What the overview charts: facts created per scope over time, and writes per agent."""

    created: dict[ScopeRef, list[float]]  # the creation times of each scope's facts, sorted
    writes: Counter[str]  # facts created (and restated) per actor, every scope together


@dataclass(frozen=True)
class FactView:
    """Everything the fact page shows of one fact."""

    fact: Fact
    history: list[AuditEvent]
    chain: list[Fact | str]  # the whole supersede chain, oldest first; purged links as bare ids
    similar: list[tuple[Fact, float]]  # other facts of its scope, nearest first, with their cosine


def fact_json(fact: Fact) -> dict[str, Any]:
    """A fact as the JSON pages show it (its scope as ``kind:owner``)."""
    data = dataclasses.asdict(fact)
    data["scope"] = str(fact.scope)
    return data


def hit_json(hit: Hit) -> dict[str, Any]:
    """A search hit with its reasons."""
    return {
        "fact": fact_json(hit.fact),
        "score": hit.score,
        "lexical_rank": hit.lexical_rank,
        "semantic_rank": hit.semantic_rank,
        "cosine": hit.cosine,
        "context_of": hit.context_of,
        "scope": str(hit.fact.scope),
    }


class Inspector:
    """The inspector's access to one store.

    Args:
        store: the store pages read (on SQLite, opened read-only).
        writer: opens the store read-write for one operator action and closes it after (a context manager
            factory); None: the store is read-only and every action is refused.
    """

    def __init__(
        self,
        store: SharedMemoryStore,
        writer: Callable[[], AbstractContextManager[SharedMemoryStore]] | None = None,
    ) -> None:
        self.store = store
        self.writer = writer
        self._activity: dict[ScopeRef, tuple[float | None, list[float], Counter[str]]] = {}

    @property
    def operator_id(self) -> str:
        return self.store.policy.operator_id

    @property
    def backend_name(self) -> str:
        return "PostgreSQL" if self.store.root is None else f"SQLite files in {self.store.root}"

    # ------------------------------------------------------------------ overview
    def scopes(self) -> list[ScopeRef]:
        """Every scope of the store, global first, then groups, then agents, each by owner."""
        order = {"global": 0, "group": 1, "agent": 2}
        return sorted(self.store.backend.scopes(), key=lambda r: (order[r.kind], r.owner))

    def overview(self) -> list[ScopeRow]:
        """Every scope with its counts, size, model, last write and members."""
        rows = []
        for ref in self.scopes():
            stats = self.store.backend.stats(ref)
            members = tuple(sorted(self.store.operator.members(ref.owner))) if ref.kind == "group" else ()
            private = ref.kind == "agent" and self.store.engine.access.is_private(ref.owner)
            rows.append(ScopeRow(ref, stats, members, private))
        return rows

    def activity(self, rows: Sequence[ScopeRow]) -> Activity:
        """Creation times per scope and writes per agent, from each scope's audit trail (read again only for
        a scope written since the last look)."""
        created: dict[ScopeRef, list[float]] = {}
        writes: Counter[str] = Counter()
        for row in rows:
            cached = self._activity.get(row.scope)
            if cached is None or cached[0] != row.stats.last_write:
                times: list[float] = []
                actors: Counter[str] = Counter()
                for event in self.store.backend.rows(row.scope, "audit"):
                    if event["event"] == "created":
                        times.append(float(event["at"]))
                    if event["event"] in ("created", "reinforced"):
                        actors[event["actor"]] += 1
                cached = (row.stats.last_write, sorted(times), actors)
                self._activity[row.scope] = cached
            created[row.scope] = cached[1]
            writes.update(cached[2])
        return Activity(created, writes)

    def agents_and_groups(self) -> tuple[list[str], list[str]]:
        """The agent ids (with a scope, in a group or in the directory) and group ids, sorted, for pickers."""
        refs = self.store.backend.scopes()
        groups = sorted(r.owner for r in refs if r.kind == "group")
        agents = {r.owner for r in refs if r.kind == "agent"}
        for group in groups:
            agents.update(self.store.operator.members(group))
        agents.update(a.agent_id for a in self.directory())
        return sorted(agents), groups

    # ------------------------------------------------------------------ facts
    def list_facts(
        self,
        scope: ScopeRef,
        *,
        status: str | None = None,
        author: str | None = None,
        tag: str | None = None,
        since: float | None = None,
        until: float | None = None,
        page: int = 1,
        per_page: int = PER_PAGE,
    ) -> FactPage:
        """One page of a scope's facts, newest first, filtered.

        Args:
            scope: the scope.
            status: ``active``, ``pending``, ``forgotten``, ``superseded``, ``expired`` or None (any).
            author: only facts written by this agent (``created_by``).
            tag: only facts with this tag.
            since, until: only facts created in ``[since, until)``.
            page: the page, from 1.
            per_page: facts per page, 1 to 500.

        Returns:
            The page.

        Raises:
            InvalidInputError: an unknown status, or a page or page size out of range.
        """
        if status is not None and status not in STATUSES:
            raise InvalidInputError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        if not 1 <= per_page <= MAX_PER_PAGE or not 1 <= page <= 10**9:
            raise InvalidInputError(f"page must be >= 1 and per_page from 1 to {MAX_PER_PAGE}")
        backend = self.store.backend
        start = (page - 1) * per_page
        narrowed = tag is not None or since is not None or until is not None
        filters = Filters(
            tags=(tag,) if tag else (),
            created_by=(author,) if author else (),
            since=since,
            until=until,
            include_inactive=status != "active",
        )
        now = time.time()
        if not narrowed and status not in ("active", "expired"):  # a stored status, or none: one query a page
            where = {k: v for k, v in (("status", status), ("created_by", author)) if v is not None}
            rows = backend.rows(scope, "facts", where, limit=per_page + 1, offset=start, oldest_first=False)
            facts = [fact_from_row(scope, [r[c] for c in FACT_COLUMN_NAMES], now) for r in rows[:per_page]]
            return FactPage(facts, page, per_page, None, len(rows) > per_page)
        if not narrowed and status == "active":  # stored "active", less the expired: growing chunks, newest first
            where = {"status": "active", **({"created_by": author} if author else {})}
            found: list[Fact] = []
            offset, chunk = 0, max(CHUNK, start + per_page + 1)
            while len(found) <= start + per_page:
                rows = backend.rows(scope, "facts", where, limit=chunk, offset=offset, oldest_first=False)
                batch = [fact_from_row(scope, [r[c] for c in FACT_COLUMN_NAMES], now) for r in rows]
                found.extend(f for f in batch if f.status == status)
                if len(rows) < chunk:
                    break
                offset, chunk = offset + chunk, chunk * 2
            return FactPage(found[start : start + per_page], page, per_page, None, len(found) > start + per_page)
        if status in (None, "active"):  # the query applies every filter: the ids are exactly the matches
            ids = backend.select_ids(scope, filters, 1 << 62)[::-1]
            chosen = ids[start : start + per_page]
            return FactPage(backend.get(scope, chosen), page, per_page, len(ids), len(ids) > start + per_page)
        # expired, or narrowed and any status but active: the matching facts outside the active (unexpired)
        # ones, read in chunks, newest first, their status checked here
        live = set(backend.select_ids(scope, dataclasses.replace(filters, include_inactive=False), 1 << 62))
        others = [i for i in backend.select_ids(scope, filters, 1 << 62)[::-1] if i not in live]
        matched: list[Fact] = []
        for i in range(0, len(others), CHUNK):
            matched.extend(f for f in backend.get(scope, others[i : i + CHUNK]) if f.status == status)
            if len(matched) > start + per_page:
                break
        return FactPage(matched[start : start + per_page], page, per_page, None, len(matched) > start + per_page)

    def fact(self, fact_id: str, similar: int = 5) -> FactView:
        """A fact with its audit trail, its whole supersede chain and its nearest facts in its scope.

        Raises:
            FactNotFoundError: no such fact.
            InvalidInputError: not a fact id.
        """
        operator = self.store.operator
        fact = operator.get(fact_id)
        history = operator.history(fact_id)
        chain = operator.supersede_chain(fact_id)
        return FactView(fact, history, chain, self._similar(fact, similar))

    def _similar(self, fact: Fact, limit: int) -> list[tuple[Fact, float]]:
        """The facts of its scope nearest to it, by its stored vector (nothing is embedded)."""
        rows = self.store.backend.rows(fact.scope, "facts", {"id": fact.id}, limit=1)
        if not rows or not rows[0].get("embedding"):
            return []
        vector = np.frombuffer(rows[0]["embedding"], dtype=np.float32)
        near = self.store.backend.semantic([fact.scope], vector, limit + 1, Filters(include_inactive=True))
        cosines = {fid: cos for _, fid, cos in near if fid != fact.id}
        found = self.store.backend.get(fact.scope, list(cosines))[:limit]
        return [(f, cosines[f.id]) for f in found]

    # ------------------------------------------------------------------ search
    def search(
        self,
        query: str,
        *,
        agent_id: str | None,
        group_id: str | None = None,
        as_of: float | None = None,
        top_k: int = 10,
    ) -> list[Hit]:
        """The store's own search: as ``agent_id`` (in ``group_id``), with its access policy, over its agent
        scope, its group and global; or, with ``agent_id=None`` written out (the page's "operator" choice), as
        the operator over every scope. The agent is bound without being enrolled in the group (looking never
        changes membership).

        Args:
            query: what to look for.
            agent_id: the agent to search as, or None for the operator (no default: never trusted by omission).
            group_id: the agent's group.
            as_of: what was believed at that time.
            top_k: at most this many hits.

        Returns:
            The hits, best first, with their reasons.

        Raises:
            MemoryAccessDenied: the agent may not read the group.
            InvalidInputError: a bad query, id or time.
        """
        if agent_id is None:
            return self.store.operator.search(query, scopes=self.store.backend.scopes(), top_k=top_k, as_of=as_of)
        return self.store.as_agent(agent_id, group=group_id, join=False).search(query, top_k=top_k, as_of=as_of)

    # ------------------------------------------------------------------ review
    def pending(self) -> list[Fact]:
        """The global facts held for review, oldest first."""
        return self.store.operator.pending()

    def approve(self, fact_id: str, reason: str | None) -> Fact:
        """Release a held fact into recall, as the store's operator.

        Raises:
            PermissionError: the inspector was started without an operator token.
            FactNotFoundError: no such fact.
        """
        with self._writing() as store:
            return store.operator.approve(fact_id, reason=reason)

    def reject(self, fact_id: str, reason: str | None) -> Fact:
        """Reject a held fact (it is forgotten: audited as ``rejected``), as the store's operator.

        Raises:
            PermissionError: the inspector was started without an operator token.
            InvalidInputError: the fact is not held for review.
        """
        with self._writing() as store:
            fact = store.operator.get(fact_id)
            if fact.status != "pending":
                raise InvalidInputError(f"{fact_id} is {fact.status}, not held for review")
            return store.operator.forget(fact_id, reason)

    @contextmanager
    def _writing(self) -> Iterator[SharedMemoryStore]:
        if self.writer is None:
            raise PermissionError("the inspector is read-only (started without an operator token)")
        with self.writer() as store:
            yield store

    # ------------------------------------------------------------------ records
    def directory(self) -> list[AgentInfo]:
        """The agent directory."""
        return self.store.for_agent(self.operator_id).list_agents()

    def conversation(self, agent_id: str, limit: int = 100) -> list[ConversationRecord]:
        """An agent's recorded messages, newest first."""
        return self.store.operator.conversation(agent_id, limit=limit)

    def tool_history(self, agent_id: str, limit: int = 100) -> list[ToolCallRecord]:
        """An agent's recorded tool calls, newest first."""
        return self.store.operator.tool_history(agent_id, limit=limit)

    def tasks(self) -> list[Task]:
        """Every scope's tasks, oldest first."""
        return self.store.operator.tasks()

    def case_log(self, group_id: str) -> list[CaseEntry]:
        """A group's case log, oldest first."""
        return self.store.operator.case_log(group_id).entries()

    # ------------------------------------------------------------------ live
    def subscribe(self, callback: Callable[[Change], object]) -> Subscription:
        """Call ``callback`` for every change to a fact committed from now on, by any process."""
        return self.store.subscribe(callback)

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The latest ``limit`` changes to facts over every scope, newest first (as :meth:`change_json`)."""
        events = []
        for ref in self.scopes():
            for row in self.store.backend.rows(ref, "audit", oldest_first=False, limit=limit):
                events.append((float(row["at"]), int(row["seq"]), ref, row))
        events.sort(key=lambda e: (e[0], e[1]), reverse=True)
        out = []
        for at, _, ref, row in events[:limit]:
            detail = json.loads(row["detail"] or "{}")
            out.append(self._change(ref, row["event"], row["fact_id"], row["actor"], at, detail))
        return out

    def change_json(self, change: Change) -> dict[str, Any]:
        """A change as the live page shows it, with the fact's text and author when it still exists."""
        return self._change(change.scope, change.event, change.fact_id, change.actor, change.at, change.detail)

    def _change(
        self, scope: ScopeRef, event: str, fact_id: str, actor: str, at: float, detail: dict[str, Any]
    ) -> dict[str, Any]:
        found = self.store.backend.get(scope, [fact_id])
        fact = found[0] if found else None
        return {
            "scope": str(scope),
            "event": event,
            "fact_id": fact_id,
            "actor": actor,
            "at": at,
            "when": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)),
            "content": fact.content if fact is not None else None,
            "status": fact.status if fact is not None else None,
            "detail": json.loads(json.dumps(detail, default=str)),
        }


def open_inspector(
    location: str | Path | Callable[[], Backend],
    *,
    embedder: Any = None,
    policy: WritePolicy | None = None,
    writable: bool = False,
) -> Inspector:
    """An :class:`Inspector` on a store directory (SQLite files, opened read-only) or on the backend a
    function opens (PostgreSQL: one connection pool, through which operator actions write too).

    Args:
        location: the store directory, or a function returning the backend.
        embedder: the store's embedder (a search embeds its query).
        policy: the store's write policy: its operator id (operator actions are audited under it) and
            global writers (a search as an agent applies them).
        writable: whether operator actions are allowed (an operator token was given).

    Returns:
        The inspector.
    """
    policy = policy or WritePolicy()
    if callable(location):
        store = SharedMemoryStore(location(), embedder=embedder, policy=policy)

        @contextmanager
        def same() -> Iterator[SharedMemoryStore]:
            yield store

        return Inspector(store, same if writable else None)
    root = Path(location).expanduser().absolute()
    if not root.is_dir():
        raise NotAStoreError(f"no memory store at {root}")
    reader = SharedMemoryStore(str(root), embedder=embedder, policy=policy, backend_options={"read_only": True})

    @contextmanager
    def files() -> Iterator[SharedMemoryStore]:
        store = SharedMemoryStore(str(root), embedder=reader.embedder, policy=policy)
        try:
            yield store
        finally:
            store.close()

    return Inspector(reader, files if writable else None)
