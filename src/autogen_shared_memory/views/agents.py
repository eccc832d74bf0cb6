"""``AgentMemory``: one agent's view of the shared store, the compatible view that keeps the names an earlier
design of per-agent namespaces specified (``store_insight``, ``get_my_insights``, ``log_conversation``, tasks).

It unifies with the fact store where the concepts are the same — an *insight* is a fact in the agent's
scope with a category, a completed task's result becomes a fact — and keeps apart what is genuinely
different: conversation and tool-call logs, tasks, the shared user profile and agent directory (in
``global.db``), and the group's append-only case log.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..core.records import ConversationRecord, ToolCallRecord, bounded_text, lookup_key, strict_json
from ..core.types import (
    Fact,
    Filters,
    Hit,
    MemoryAccessDenied,
    Receipt,
    ScopeKind,
    ScopeRef,
    finite_number,
    require_utf8,
    validate_confidence,
    validate_owner_id,
)
from ..errors import InvalidInputError, InvalidInputTypeError, TaskNotFoundError, UnknownAgentError
from ..facts import as_engine
from ..search.fusion import rrf
from ..search.text import query_terms
from .caselog import CaseHit, CaseLog

if TYPE_CHECKING:
    from ..backends.base import ScopeTx
    from ..facts import FactStore

TaskStatus = Literal["pending", "assigned", "in_progress", "blocked", "completed", "failed", "cancelled"]
TASK_STATUSES: tuple[str, ...] = (
    "pending",
    "assigned",
    "in_progress",
    "blocked",
    "completed",
    "failed",
    "cancelled",
)
FINAL_STATUSES = ("completed", "failed", "cancelled")
AGENT_STATUSES = ("active", "idle", "unavailable")
GLOBAL = ScopeRef("global")


@dataclass(frozen=True)
class AgentInfo:
    """An agent directory entry."""

    agent_id: str
    display_name: str | None
    description: str | None
    capabilities: tuple[str, ...]
    model: str | None
    tools: tuple[str, ...]
    status: str | None
    last_active_at: float | None
    updated_at: float


@dataclass(frozen=True)
class ProfileEntry:
    key: str
    value: Any
    source_agent: str | None
    confidence: float | None
    updated_at: float


@dataclass(frozen=True)
class Task:
    id: str
    agent_id: str  # the assignee
    created_by: str
    title: str
    status: str
    context: dict[str, Any]
    result: Any
    group_id: str | None
    fact_id: str | None
    created_at: float
    updated_at: float | None
    completed_at: float | None
    scope: str = ""  # the scope file the task lives in ("group:<id>" or "agent:<id>")


def _agent_info(row: Mapping[str, Any]) -> AgentInfo:
    return AgentInfo(
        agent_id=row["agent_id"],
        display_name=row.get("display_name"),
        description=row.get("description"),
        capabilities=tuple(json.loads(row.get("capabilities") or "[]")),
        model=row.get("model"),
        tools=tuple(json.loads(row.get("tools") or "[]")),
        status=row.get("status"),
        last_active_at=row.get("last_active_at"),
        updated_at=row["updated_at"],
    )


def task_from_row(row: Mapping[str, Any], scope: ScopeRef) -> Task:
    return Task(
        id=row["id"],
        agent_id=row["agent_id"],
        created_by=row["created_by"],
        title=row["title"],
        status=row["status"],
        context=json.loads(row.get("context") or "{}"),
        result=json.loads(row["result"]) if row.get("result") is not None else None,
        group_id=row.get("group_id"),
        fact_id=row.get("fact_id"),
        created_at=row["created_at"],
        updated_at=row.get("updated_at"),
        completed_at=row.get("completed_at"),
        scope=str(scope),
    )


# --------------------------------------------------------------------------- shared, store-wide parts
def upsert_agent(
    store: FactStore,
    agent_id: str,
    *,
    display_name: str | None = None,
    description: str | None = None,
    capabilities: Sequence[str] | None = None,
    model: str | None = None,
    tools: Sequence[str] | None = None,
    status: str | None = None,
    last_active_at: float | None = None,
) -> None:
    """Create or update an agent directory entry, keeping fields that are not given (a new entry is
    ``active`` unless ``status`` says otherwise)."""
    validate_owner_id(agent_id, "agent_id")
    if status is not None and status not in AGENT_STATUSES:
        raise InvalidInputError(f"agent status must be one of {AGENT_STATUSES}, got {status!r}")
    for what, text in (("display_name", display_name), ("description", description), ("model", model)):
        _directory_text(text, what)
    if last_active_at is not None:
        last_active_at = finite_number(last_active_at, "last_active_at")
    for what, names in (("capabilities", capabilities), ("tools", tools)):
        if names is not None:
            if isinstance(names, str) or not isinstance(names, Sequence):
                raise InvalidInputTypeError(f"{what} must be a list of strings")
            for name in names:
                _directory_text(name, f"each of {what}")
    given = {
        "display_name": display_name,
        "description": description,
        "capabilities": None if capabilities is None else json.dumps(list(capabilities)),
        "model": model,
        "tools": None if tools is None else json.dumps(list(tools)),
        "status": status,
        "last_active_at": last_active_at,
    }
    changes = {k: v for k, v in given.items() if v is not None}
    now = time.time()
    entry = {
        "agent_id": agent_id,
        "display_name": display_name or agent_id,
        "description": description,
        "capabilities": given["capabilities"] or "[]",
        "model": model,
        "tools": given["tools"] or "[]",
        "status": status or "active",
        "last_active_at": last_active_at,
        "updated_at": now,
    }

    def run(tx: ScopeTx) -> None:  # one transaction: two first registrations never overwrite each other's fields
        if tx.rows("agent_directory", {"agent_id": agent_id}):
            tx.update_rows("agent_directory", {"agent_id": agent_id}, {**changes, "updated_at": now})
        else:
            tx.add_rows("agent_directory", [entry])

    store.backend.transact(GLOBAL, run, "records:agent_directory")


MAX_DIRECTORY_CHARS = 4096  # a directory field (description, a capability...)


def positive_limit(limit: object) -> int:
    """A result count a caller asks for: an int from 1 to 100,000 (-1 gave every row on SQLite and an error
    on PostgreSQL)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
        raise InvalidInputError(f"limit must be an integer from 1 to 100000, got {limit!r:.40}")
    return limit


def _directory_text(value: object, what: str) -> None:
    """A directory field is set on purpose: text every backend stores as given, or refused (as a fact is)."""
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidInputTypeError(f"{what} must be a string, got {type(value).__name__}")
    require_utf8(value, what)
    if "\x00" in value:
        raise InvalidInputError(f"{what} contains a NUL character; not allowed")
    if len(value) > MAX_DIRECTORY_CHARS:  # every agent's list_agents() returns it
        raise InvalidInputError(f"{what} is {len(value)} characters; the limit is {MAX_DIRECTORY_CHARS}")


def agent_known(store: FactStore, agent_id: str) -> bool:
    return bool(
        store.backend.read_records(GLOBAL, "agent_directory", {"agent_id": agent_id}, limit=1)
    ) or store.backend.exists(ScopeRef("agent", agent_id))


class AgentMemory:
    """One agent's memory: its own records, cross-agent reads, the shared profile and directory, tasks,
    and (with a group) the group's case log. Every operation acts as ``agent_id``."""

    def __init__(self, store: FactStore, agent_id: str, group_id: str | None = None) -> None:
        self.store = as_engine(store)
        self.agent_id = validate_owner_id(agent_id, "agent_id")
        self.group_id = None if group_id is None else validate_owner_id(group_id, "group_id")
        self.scope = ScopeRef("agent", agent_id)

    def __repr__(self) -> str:
        return f"AgentMemory(agent_id={self.agent_id!r}, group_id={self.group_id!r})"

    # ------------------------------------------------------------------ own records
    def log_conversation(
        self,
        role: str,
        content: str,
        context: Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        task_id: str | None = None,
    ) -> ConversationRecord:
        return self.store.log_message(
            self.agent_id,
            content,
            role=role,
            context=context,
            session_id=session_id,
            task_id=task_id,
            source=self.agent_id,
        )

    def log_tool_call(
        self,
        tool: str,
        args: Mapping[str, Any] | None,
        result: Any,
        success: bool = True,
        duration_ms: float | None = None,
        *,
        error: str | None = None,
        task_id: str | None = None,
    ) -> ToolCallRecord:
        return self.store.log_tool_call(
            self.agent_id,
            tool,
            args,
            result,
            success=success,
            duration_ms=duration_ms,
            error=error,
            task_id=task_id,
        )

    def get_my_tool_history(self, tool: str | None = None, limit: int = 50) -> list[ToolCallRecord]:
        return self.store.tool_history(self.agent_id, tool_name=tool, limit=limit)

    # ------------------------------------------------------------------ insights = categorised facts
    def store_insight(
        self,
        category: str,
        content: str,
        source: str | None = None,
        *,
        confidence: float = 0.5,
        context: Mapping[str, Any] | None = None,
        ttl_days: float | None = None,
    ) -> Receipt:
        """An insight is a fact in this agent's scope with a category (and where it came from)."""
        metadata = {"source": source, "context": dict(context or {})}
        return self.store.remember(
            content,
            "agent",
            agent_id=self.agent_id,
            category=category,
            confidence=confidence,
            metadata=metadata,
            ttl_days=ttl_days,
        )

    def _insights(self, agent_id: str, category: str | None, limit: int) -> list[Fact]:
        limit = positive_limit(limit)
        ref = ScopeRef("agent", agent_id)
        ids = self.store.backend.select_ids(ref, Filters(category=category), 1_000_000)
        facts = self.store.backend.get(ref, ids[::-1])
        return [f for f in facts if f.category is not None][:limit]

    def get_my_insights(self, category: str | None = None, limit: int = 20) -> list[Fact]:
        return self._insights(self.agent_id, category, limit)

    def get_agent_insights(self, agent_id: str, category: str | None = None, limit: int = 20) -> list[Fact]:
        """Another agent's insights (a cross-agent read: refused if that agent is private)."""
        validate_owner_id(agent_id, "agent_id")
        if not agent_known(self.store, agent_id):
            raise UnknownAgentError(f"unknown agent {agent_id!r}: not in the directory and no memory of its own")
        self.store.access.check_read(self.agent_id, ScopeRef("agent", agent_id))
        return self._insights(agent_id, category, limit)

    # ------------------------------------------------------------------ conversations, across agents
    def search_all_conversations(
        self, query: str, agent_id: str | None = None, limit: int = 20
    ) -> list[ConversationRecord]:
        """Full-text search over every agent's recorded messages, or one agent's (best first)."""
        limit = positive_limit(limit)
        terms = query_terms(query)
        if not terms:
            return []
        if agent_id is not None:
            if not agent_known(self.store, agent_id):
                raise UnknownAgentError(f"unknown agent {agent_id!r}")
            refs = [ScopeRef("agent", agent_id)]
        else:
            refs = self.store.backend.scopes("agent")
        ranked: list[tuple[int, int, dict[str, Any]]] = []
        for n, ref in enumerate(refs):
            if ref.owner != self.agent_id and self.store.access.is_private(ref.owner):
                continue
            rows = self.store.backend.read_records(ref, "conversations", limit=limit, query_terms=terms)
            ranked += [(rank, n, row) for rank, row in enumerate(rows)]
        ranked.sort(key=lambda t: (t[0], t[1]))  # interleave the files by rank
        return [ConversationRecord.from_row(row) for _, _, row in ranked[:limit]]

    # ------------------------------------------------------------------ user profile (shared)
    def get_user_profile(self, key: str | None = None) -> dict[str, ProfileEntry] | ProfileEntry | None:
        """The whole profile (key -> entry), or one entry (None if unset)."""
        found = None if key is None else lookup_key(key, "key")
        if key is not None and found is None:
            return None
        where = {"key": found} if found is not None else None
        rows = self.store.backend.read_records(GLOBAL, "user_profile", where, limit=100_000)
        entries = {
            r["key"]: ProfileEntry(
                r["key"], json.loads(r["value"]), r.get("source_agent"), r.get("confidence"), r["updated_at"]
            )
            for r in rows
        }
        return entries.get(key) if key is not None else entries

    def update_user_profile(self, key: str, value: Any, confidence: float = 1.0) -> ProfileEntry:
        """Set a profile key (any agent may); the entry records which agent learned it."""
        if not isinstance(key, str) or not key.strip() or len(key) > 128:
            raise InvalidInputError("profile key must be a non-blank string of at most 128 characters")
        _directory_text(key, "profile key")
        encoded = strict_json(value, "profile value", 64 * 1024)
        entry = ProfileEntry(key, json.loads(encoded), self.agent_id, validate_confidence(confidence), time.time())
        self.store.backend.upsert_records(
            GLOBAL,
            "user_profile",
            [
                {
                    "key": key,
                    "value": encoded,
                    "source_agent": self.agent_id,
                    "confidence": entry.confidence,
                    "updated_at": entry.updated_at,
                }
            ],
        )
        return entry

    # ------------------------------------------------------------------ agent directory (shared)
    def register(self, **fields: Any) -> AgentInfo:
        """Create or update this agent's directory entry (display_name, description, capabilities, ...)."""
        upsert_agent(self.store, self.agent_id, **fields)
        return self.get_agent(self.agent_id)

    def get_agent(self, agent_id: str) -> AgentInfo:
        key = lookup_key(agent_id, "agent_id")
        rows = self.store.backend.read_records(GLOBAL, "agent_directory", {"agent_id": key}, limit=1) if key else []
        if not rows:
            raise UnknownAgentError(f"unknown agent {agent_id!r}: not in the agent directory")
        return _agent_info(rows[0])

    def list_agents(self, status: str | None = None) -> list[AgentInfo]:
        if status is not None and status not in AGENT_STATUSES:
            raise InvalidInputError(f"agent status must be one of {AGENT_STATUSES}, got {status!r}")
        rows = self.store.backend.read_records(
            GLOBAL,
            "agent_directory",
            {"status": status} if status else None,
            limit=100_000,
            oldest_first=True,
        )
        return sorted((_agent_info(r) for r in rows), key=lambda a: a.agent_id)

    def get_agent_capabilities(self, agent_id: str) -> list[str]:
        return list(self.get_agent(agent_id).capabilities)

    # ------------------------------------------------------------------ tasks
    @property
    def _task_scope(self) -> ScopeRef:
        """Tasks of a group live in the group's file (members coordinate on them); without a group, an
        agent's tasks are its own and live in its file."""
        return ScopeRef("group", self.group_id) if self.group_id else self.scope

    def _check_task_access(self) -> None:
        if self.group_id is not None and not self.store.access.is_member(self.group_id, self.agent_id):
            raise MemoryAccessDenied(
                f"agent {self.agent_id!r} may not use the tasks of group {self.group_id!r}: "
                "it is not a member of that group"
            )

    def create_task(self, title: str, assignee: str | None = None, context: Mapping[str, Any] | None = None) -> Task:
        self._check_task_access()
        if not isinstance(title, str) or not title.strip() or len(title) > 1000:
            raise InvalidInputError("task title must be a non-blank string of at most 1000 characters")
        _directory_text(title, "task title")  # no NUL or lone surrogate: stored as given on every backend
        assignee = validate_owner_id(assignee or self.agent_id, "assignee")
        if self.group_id is None and assignee != self.agent_id:
            raise InvalidInputError("without a group, an agent can only create tasks for itself")
        if self.group_id is not None and not self.store.access.is_member(self.group_id, assignee):
            raise UnknownAgentError(f"cannot assign to {assignee!r}: not a member of group {self.group_id!r}")
        now = time.time()
        row = {
            "id": f"k_{time.time_ns() // 1_000_000:012x}{secrets.token_hex(4)}",
            "agent_id": assignee,
            "created_by": self.agent_id,
            "title": title,
            "status": "assigned" if assignee != self.agent_id else "pending",
            "context": strict_json(dict(context or {}), "task context", 64 * 1024),
            "result": None,
            "group_id": self.group_id,
            "fact_id": None,
            "created_at": now,
            "updated_at": now,
            "completed_at": None,
        }
        self.store.backend.append_records(self._task_scope, "tasks", [row])
        return task_from_row(row, self._task_scope)

    def get_task(self, task_id: str) -> Task:
        self._check_task_access()
        key = lookup_key(task_id, "task_id")
        rows = self.store.backend.read_records(self._task_scope, "tasks", {"id": key}, limit=1) if key else []
        if not rows:
            raise TaskNotFoundError(f"no task {task_id!r} in {self._task_scope}")
        return task_from_row(rows[0], self._task_scope)

    def list_tasks(self, status: str | None = None, *, assigned_to: str | None = None) -> list[Task]:
        self._check_task_access()
        where: dict[str, Any] = {}
        if status is not None:
            if status not in TASK_STATUSES:
                raise InvalidInputError(f"status must be one of {list(TASK_STATUSES)}, got {status!r:.40}")
            where["status"] = status
        if assigned_to is not None:
            key = lookup_key(assigned_to, "assigned_to")
            if key is None:
                return []
            where["agent_id"] = key
        rows = self.store.backend.read_records(self._task_scope, "tasks", where, limit=100_000, oldest_first=True)
        return [task_from_row(r, self._task_scope) for r in rows]

    def _change_task(self, task_id: str, change: Any) -> Task:
        self._check_task_access()
        key = lookup_key(task_id, "task_id")
        row = self.store.backend.update_record(self._task_scope, "tasks", {"id": key}, change) if key else None
        if row is None:
            raise TaskNotFoundError(f"no task {task_id!r} in {self._task_scope}")
        return task_from_row(row, self._task_scope)

    def assign_task(self, task_id: str, agent_id: str) -> Task:
        validate_owner_id(agent_id, "agent_id")
        if self.group_id is not None and not self.store.access.is_member(self.group_id, agent_id):
            raise UnknownAgentError(f"cannot assign to {agent_id!r}: not a member of group {self.group_id!r}")

        def change(row: dict[str, Any]) -> dict[str, Any]:
            if row["status"] in FINAL_STATUSES:
                raise InvalidInputError(f"task {task_id} is already {row['status']}")
            return {"agent_id": agent_id, "status": "assigned", "updated_at": time.time()}

        return self._change_task(task_id, change)

    def update_task_status(self, task_id: str, status: TaskStatus) -> Task:
        if status not in TASK_STATUSES or status == "completed":
            raise InvalidInputError(
                f"status must be one of {[s for s in TASK_STATUSES if s != 'completed']} "
                "(use complete_task to complete a task)"
            )

        def change(row: dict[str, Any]) -> dict[str, Any]:
            if row["status"] in FINAL_STATUSES:
                raise InvalidInputError(f"task {task_id} is already {row['status']}")
            done = time.time() if status in FINAL_STATUSES else None
            return {"status": status, "updated_at": time.time(), "completed_at": done}

        return self._change_task(task_id, change)

    def complete_task(self, task_id: str, result: Any) -> Task:
        """Complete a task assigned to this agent; its result is stored as a fact automatically (in the
        group scope for a group task, else in the agent's scope; category ``task_result``)."""
        task = self.get_task(task_id)
        if task.agent_id != self.agent_id:
            raise MemoryAccessDenied(
                f"agent {self.agent_id!r} may not complete task {task_id}: it is assigned to {task.agent_id!r}"
            )
        if task.status in FINAL_STATUSES:
            raise InvalidInputError(f"task {task_id} is already {task.status}")
        encoded = strict_json(result, "task result", 64 * 1024)
        text = result if isinstance(result, str) else encoded
        scope: ScopeKind = "group" if self.group_id else "agent"
        receipt = self.store.remember(
            bounded_text(  # a long result is cut in UTF-8 bytes, and says so (the task keeps all of it)
                f"Task '{task.title}' completed by {self.agent_id}: {text}",
                "task result",
                self.store.policy.max_fact_bytes // 2,
                truncate=True,
            ),
            scope,
            agent_id=self.agent_id,
            group_id=self.group_id,
            category="task_result",
            metadata={"task_id": task_id},
        )

        def change(row: dict[str, Any]) -> dict[str, Any]:
            if row["agent_id"] != self.agent_id:  # reassigned since the check above
                raise MemoryAccessDenied(
                    f"agent {self.agent_id!r} may not complete task {task_id}: it is assigned to {row['agent_id']!r}"
                )
            if row["status"] in FINAL_STATUSES:
                raise InvalidInputError(f"task {task_id} is already {row['status']}")
            now = time.time()
            return {
                "status": "completed",
                "result": encoded,
                "fact_id": receipt.id,
                "updated_at": now,
                "completed_at": now,
            }

        try:
            return self._change_task(task_id, change)
        except (ValueError, MemoryAccessDenied):  # completed or reassigned meanwhile: no stray result fact
            held = self.store.backend.read_records(self._task_scope, "tasks", {"id": task_id}, limit=1)
            if receipt.status == "created" and not (held and held[0]["fact_id"] == receipt.id):
                self.store.forget(  # (the winner's result may be this very fact, said the same way)
                    receipt.id, "task completion lost a race", agent_id=self.agent_id, group_id=self.group_id
                )
            raise

    # ------------------------------------------------------------------ the group's case log
    @property
    def case_log(self) -> CaseLog:
        if self.group_id is None:
            raise InvalidInputError("the case log belongs to a group: use store.for_agent(agent_id, group_id)")
        return CaseLog(self.store, self.group_id, self.agent_id)

    def search(self, query: str, top_k: int = 5, *, include_agents: Sequence[str] = ()) -> list[Hit | CaseHit]:
        """Hybrid recall over this agent's own memory plus its group's case log (what an agent reads by
        default), and other agents' memories when named in ``include_agents``; fused with RRF."""
        lists: list[tuple[list[str], float]] = []
        items: dict[str, Hit | CaseHit] = {}
        for agent in (self.agent_id, *include_agents):
            hits = self.store.search(query, "agent", agent_id=self.agent_id, other_agent=agent, top_k=top_k * 4)
            lists.append(([h.id for h in hits], 1.0))
            items.update({h.id: h for h in hits})
        if self.group_id is not None:
            case_hits = self.case_log.search(query, top_k * 4)
            lists.append(([h.id for h in case_hits], 1.0))
            items.update({h.id: h for h in case_hits})
        fused = rrf(lists, k=self.store.recall.rrf_k)
        return [items[i] for i, _ in sorted(fused.items(), key=lambda kv: -kv[1])[:top_k]]
