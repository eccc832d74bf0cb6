"""One agent's records beside its facts: tasks, insights, the shared user profile and agent directory.

The facets :class:`Tasks`, :class:`Insights`, :class:`Profile` and :class:`Directory` are bound to the agent
they act as and hold the logic; a handle offers them (``store.as_agent("researcher", group="crew").tasks``).
:class:`AgentMemory` is the compatible view that keeps the names an earlier design of per-agent namespaces
specified (``store_insight``, ``get_my_insights``, ``create_task``...), each a thin delegation to a facet.

It unifies with the fact store where the concepts are the same (an *insight* is a fact in the agent's
scope with a category, a completed task's result becomes a fact) and keeps apart what is genuinely
different: conversation and tool-call logs, tasks, the shared user profile and agent directory (in
``global.db``), and the group's append-only case log.
"""

from __future__ import annotations

import builtins
import json
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
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
from ..facts import _off_loop, as_engine
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


# --------------------------------------------------------------------------- facets: one agent's verbs
# Each facet is bound to the identity it acts as (the way a handle is) and holds the logic of its records;
# the handles expose them (``handle.tasks``, ``handle.insights``...) and :class:`AgentMemory`'s seed-named
# methods delegate to them.
class Tasks:
    """The tasks an agent coordinates on, acting as that agent: those of its group (kept in the group's
    file, shared by its members), or without a group its own (kept in its file).

    Every call checks first that the agent is a member of its group (when it has one).
    """

    __slots__ = ("_agent_id", "_engine", "_group_id", "_scope")

    def __init__(self, engine: FactStore, agent_id: str, group_id: str | None = None) -> None:
        """Bind the facet; applications get it from :attr:`~..handles.AgentHandle.tasks`.

        Args:
            engine: the store's engine.
            agent_id: the agent it acts as.
            group_id: the group whose tasks it works on (``None``: the agent's own tasks).

        Raises:
            InvalidInputError: an id the store cannot own.
        """
        self._engine = as_engine(engine)
        self._agent_id = validate_owner_id(agent_id, "agent_id")
        self._group_id = None if group_id is None else validate_owner_id(group_id, "group_id")
        self._scope = ScopeRef("group", self._group_id) if self._group_id else ScopeRef("agent", self._agent_id)

    def __repr__(self) -> str:
        return f"Tasks(agent_id={self._agent_id!r}, group_id={self._group_id!r})"

    def _check_access(self) -> None:
        if self._group_id is not None and not self._engine.access.is_member(self._group_id, self._agent_id):
            raise MemoryAccessDenied(
                f"agent {self._agent_id!r} may not use the tasks of group {self._group_id!r}: "
                "it is not a member of that group"
            )

    def _check_assignee(self, agent: str) -> None:
        if self._group_id is not None and not self._engine.access.is_member(self._group_id, agent):
            raise UnknownAgentError(f"cannot assign to {agent!r}: not a member of group {self._group_id!r}")

    def create(self, title: str, assignee: str | None = None, context: Mapping[str, Any] | None = None) -> Task:
        """Create a task: ``pending`` when it is this agent's, ``assigned`` when it is another member's.

        Args:
            title: what is to be done (non-blank, at most 1000 characters).
            assignee: the member who does it (default: this agent). Without a group, only this agent.
            context: JSON-able data kept with the task (at most 64 KiB encoded).

        Returns:
            The task.

        Raises:
            MemoryAccessDenied: this agent is not a member of its group (nothing is written).
            UnknownAgentError: the assignee is not a member of the group (nothing is written).
            InvalidInputError: a bad value, or another assignee without a group (nothing is written).
        """
        self._check_access()
        if not isinstance(title, str) or not title.strip() or len(title) > 1000:
            raise InvalidInputError("task title must be a non-blank string of at most 1000 characters")
        _directory_text(title, "task title")  # no NUL or lone surrogate: stored as given on every backend
        assignee = validate_owner_id(assignee or self._agent_id, "assignee")
        if self._group_id is None and assignee != self._agent_id:
            raise InvalidInputError("without a group, an agent can only create tasks for itself")
        self._check_assignee(assignee)
        now = time.time()
        row = {
            "id": f"k_{time.time_ns() // 1_000_000:012x}{secrets.token_hex(4)}",
            "agent_id": assignee,
            "created_by": self._agent_id,
            "title": title,
            "status": "assigned" if assignee != self._agent_id else "pending",
            "context": strict_json(dict(context or {}), "task context", 64 * 1024),
            "result": None,
            "group_id": self._group_id,
            "fact_id": None,
            "created_at": now,
            "updated_at": now,
            "completed_at": None,
        }
        self._engine.backend.append_records(self._scope, "tasks", [row])
        return task_from_row(row, self._scope)

    def get(self, task_id: str) -> Task:
        """One task by id.

        Args:
            task_id: the task.

        Returns:
            The task.

        Raises:
            MemoryAccessDenied: this agent is not a member of its group.
            TaskNotFoundError: no such task among this agent's (its group's) tasks.
        """
        self._check_access()
        key = lookup_key(task_id, "task_id")
        rows = self._engine.backend.read_records(self._scope, "tasks", {"id": key}, limit=1) if key else []
        if not rows:
            raise TaskNotFoundError(f"no task {task_id!r} in {self._scope}")
        return task_from_row(rows[0], self._scope)

    def list(self, status: str | None = None, *, assigned_to: str | None = None) -> builtins.list[Task]:
        """The tasks, oldest first.

        Args:
            status: only tasks with this status (one of :data:`TASK_STATUSES`).
            assigned_to: only tasks assigned to this agent.

        Returns:
            The tasks.

        Raises:
            MemoryAccessDenied: this agent is not a member of its group.
            InvalidInputError: an unknown status.
        """
        self._check_access()
        where: dict[str, Any] = {}
        if status is not None:
            if status not in TASK_STATUSES:
                raise InvalidInputError(f"status must be one of {builtins.list(TASK_STATUSES)}, got {status!r:.40}")
            where["status"] = status
        if assigned_to is not None:
            key = lookup_key(assigned_to, "assigned_to")
            if key is None:
                return []
            where["agent_id"] = key
        rows = self._engine.backend.read_records(self._scope, "tasks", where, limit=100_000, oldest_first=True)
        return [task_from_row(r, self._scope) for r in rows]

    def _change(self, task_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Task:
        self._check_access()
        key = lookup_key(task_id, "task_id")
        row = self._engine.backend.update_record(self._scope, "tasks", {"id": key}, change) if key else None
        if row is None:
            raise TaskNotFoundError(f"no task {task_id!r} in {self._scope}")
        return task_from_row(row, self._scope)

    def assign(self, task_id: str, agent: str) -> Task:
        """Give an open task to a member of the group (its status becomes ``assigned``).

        Args:
            task_id: the task.
            agent: the member who does it now.

        Returns:
            The task as it is now.

        Raises:
            MemoryAccessDenied: this agent is not a member of its group.
            UnknownAgentError: ``agent`` is not a member of the group.
            TaskNotFoundError: no such task.
            InvalidInputError: a bad id, or the task is already completed, failed or cancelled.
        """
        validate_owner_id(agent, "agent_id")
        self._check_assignee(agent)

        def change(row: dict[str, Any]) -> dict[str, Any]:
            if row["status"] in FINAL_STATUSES:
                raise InvalidInputError(f"task {task_id} is already {row['status']}")
            return {"agent_id": agent, "status": "assigned", "updated_at": time.time()}

        return self._change(task_id, change)

    def set_status(self, task_id: str, status: TaskStatus) -> Task:
        """Move an open task to another status; ``failed`` and ``cancelled`` close it (completing it is
        :meth:`complete`'s, which keeps its result).

        Args:
            task_id: the task.
            status: any of :data:`TASK_STATUSES` but ``completed``.

        Returns:
            The task as it is now.

        Raises:
            MemoryAccessDenied: this agent is not a member of its group.
            TaskNotFoundError: no such task.
            InvalidInputError: a bad status, or the task is already completed, failed or cancelled.
        """
        if status not in TASK_STATUSES or status == "completed":
            raise InvalidInputError(
                f"status must be one of {[s for s in TASK_STATUSES if s != 'completed']} "
                "(a task is completed by tasks.complete, or complete_task of the compatible view)"
            )

        def change(row: dict[str, Any]) -> dict[str, Any]:
            if row["status"] in FINAL_STATUSES:
                raise InvalidInputError(f"task {task_id} is already {row['status']}")
            done = time.time() if status in FINAL_STATUSES else None
            return {"status": status, "updated_at": time.time(), "completed_at": done}

        return self._change(task_id, change)

    def complete(self, task_id: str, result: Any) -> Task:
        """Complete a task assigned to this agent. Its result is also stored as a fact (category
        ``task_result``; in the group scope for a group task, else in the agent's scope), and a completion
        that loses a race to another leaves no stray result fact behind.

        Args:
            task_id: the task.
            result: JSON-able; a string is stored as it is (at most 64 KiB encoded).

        Returns:
            The task as it is now, naming the result fact.

        Raises:
            MemoryAccessDenied: this agent is not a member of its group, or the task is not assigned to it.
            TaskNotFoundError: no such task.
            InvalidInputError: a result that is not JSON-able or too large, or the task is already closed.
        """
        task = self.get(task_id)
        if task.agent_id != self._agent_id:
            raise MemoryAccessDenied(
                f"agent {self._agent_id!r} may not complete task {task_id}: it is assigned to {task.agent_id!r}"
            )
        if task.status in FINAL_STATUSES:
            raise InvalidInputError(f"task {task_id} is already {task.status}")
        encoded = strict_json(result, "task result", 64 * 1024)
        text = result if isinstance(result, str) else encoded
        scope: ScopeKind = "group" if self._group_id else "agent"
        store = self._engine
        receipt = store.remember(
            bounded_text(  # a long result is cut in UTF-8 bytes, and says so (the task keeps all of it)
                f"Task '{task.title}' completed by {self._agent_id}: {text}",
                "task result",
                store.policy.max_fact_bytes // 2,
                truncate=True,
            ),
            scope,
            agent_id=self._agent_id,
            group_id=self._group_id,
            category="task_result",
            metadata={"task_id": task_id},
        )

        def change(row: dict[str, Any]) -> dict[str, Any]:
            if row["agent_id"] != self._agent_id:  # reassigned since the check above
                raise MemoryAccessDenied(
                    f"agent {self._agent_id!r} may not complete task {task_id}: it is assigned to {row['agent_id']!r}"
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
            return self._change(task_id, change)
        except (ValueError, MemoryAccessDenied):  # completed or reassigned meanwhile: no stray result fact
            held = store.backend.read_records(self._scope, "tasks", {"id": task_id}, limit=1)
            if receipt.status == "created" and not (held and held[0]["fact_id"] == receipt.id):
                store.forget(  # (the winner's result may be this very fact, said the same way)
                    receipt.id, "task completion lost a race", agent_id=self._agent_id, group_id=self._group_id
                )
            raise

    acreate = _off_loop(create)
    aget = _off_loop(get)
    alist = _off_loop(list)
    aassign = _off_loop(assign)
    aset_status = _off_loop(set_status)
    acomplete = _off_loop(complete)


class Insights:
    """An agent's insights, acting as that agent: an insight is a fact of the agent's own scope with a
    category (and where it came from); another agent's insights are a cross-agent read."""

    __slots__ = ("_agent_id", "_engine")

    def __init__(self, engine: FactStore, agent_id: str) -> None:
        """Bind the facet; applications get it from :attr:`~..handles.AgentHandle.insights`.

        Args:
            engine: the store's engine.
            agent_id: the agent it acts as.

        Raises:
            InvalidInputError: an id the store cannot own.
        """
        self._engine = as_engine(engine)
        self._agent_id = validate_owner_id(agent_id, "agent_id")

    def __repr__(self) -> str:
        return f"Insights(agent_id={self._agent_id!r})"

    def add(
        self,
        text: str,
        *,
        category: str,
        confidence: float = 0.5,
        source: str | None = None,
        context: Mapping[str, Any] | None = None,
        ttl_days: float | None = None,
    ) -> Receipt:
        """Store an insight in this agent's scope (it reinforces an active insight that says the same).

        Args:
            text: the insight.
            category: its label (what makes the fact an insight).
            confidence: in [0, 1].
            source: where it came from (kept in the fact's metadata).
            context: JSON-able data kept in the fact's metadata.
            ttl_days: the insight expires after this many days (``None``: never).

        Returns:
            The fact's receipt.

        Raises:
            InvalidInputTypeError: no category.
            InvalidInputError: a bad value (nothing is written).
        """
        if not isinstance(category, str):
            raise InvalidInputTypeError(f"an insight needs a category (a string), got {type(category).__name__}")
        return self._engine.remember(
            text,
            "agent",
            agent_id=self._agent_id,
            category=category,
            confidence=confidence,
            metadata={"source": source, "context": dict(context or {})},
            ttl_days=ttl_days,
        )

    def list(self, category: str | None = None, *, agent: str | None = None, limit: int = 20) -> builtins.list[Fact]:
        """Insights, newest first: this agent's, or (``agent``) another agent's, a cross-agent read.

        Args:
            category: only insights of this category.
            agent: whose (default: this agent's).
            limit: at most this many (1 to 100,000).

        Returns:
            The insight facts.

        Raises:
            UnknownAgentError: ``agent`` is in neither the directory nor the store.
            MemoryAccessDenied: ``agent`` keeps its scope private.
            InvalidInputError: a bad id or limit.
        """
        owner = self._agent_id
        if agent is not None:
            owner = validate_owner_id(agent, "agent_id")
            if not agent_known(self._engine, owner):
                raise UnknownAgentError(f"unknown agent {owner!r}: not in the directory and no memory of its own")
            self._engine.access.check_read(self._agent_id, ScopeRef("agent", owner))
        limit = positive_limit(limit)
        ref = ScopeRef("agent", owner)
        ids = self._engine.backend.select_ids(ref, Filters(category=category), 1_000_000)
        facts = self._engine.backend.get(ref, ids[::-1])
        return [f for f in facts if f.category is not None][:limit]

    aadd = _off_loop(add)
    alist = _off_loop(list)


class Profile:
    """The user profile every agent shares (in the global file), acting as one agent: any agent may read
    and set it, and each entry records the agent that set it."""

    __slots__ = ("_agent_id", "_engine")

    def __init__(self, engine: FactStore, agent_id: str) -> None:
        """Bind the facet; applications get it from :attr:`~..handles.AgentHandle.profile`.

        Args:
            engine: the store's engine.
            agent_id: the agent it acts as.

        Raises:
            InvalidInputError: an id the store cannot own.
        """
        self._engine = as_engine(engine)
        self._agent_id = validate_owner_id(agent_id, "agent_id")

    def __repr__(self) -> str:
        return f"Profile(agent_id={self._agent_id!r})"

    def _read(self, key: str | None) -> dict[str, ProfileEntry]:
        where = {"key": key} if key is not None else None
        rows = self._engine.backend.read_records(GLOBAL, "user_profile", where, limit=100_000)
        return {
            r["key"]: ProfileEntry(
                r["key"], json.loads(r["value"]), r.get("source_agent"), r.get("confidence"), r["updated_at"]
            )
            for r in rows
        }

    def get(self, key: str) -> ProfileEntry | None:
        """One profile entry.

        Args:
            key: the key.

        Returns:
            The entry, or ``None`` when the key is unset (or could not be one).
        """
        found = lookup_key(key, "key")
        return None if found is None else self._read(found).get(key)

    def all(self) -> dict[str, ProfileEntry]:
        """The whole profile.

        Returns:
            Every entry, by key.
        """
        return self._read(None)

    def set(self, key: str, value: Any, *, confidence: float = 1.0) -> ProfileEntry:
        """Set a profile key (any agent may); the entry records that this agent learnt it.

        Args:
            key: non-blank, at most 128 characters.
            value: JSON-able, at most 64 KiB encoded.
            confidence: in [0, 1].

        Returns:
            The entry written.

        Raises:
            InvalidInputError: a bad key, value or confidence (nothing is written).
        """
        if not isinstance(key, str) or not key.strip() or len(key) > 128:
            raise InvalidInputError("profile key must be a non-blank string of at most 128 characters")
        _directory_text(key, "profile key")
        encoded = strict_json(value, "profile value", 64 * 1024)
        entry = ProfileEntry(key, json.loads(encoded), self._agent_id, validate_confidence(confidence), time.time())
        self._engine.backend.upsert_records(
            GLOBAL,
            "user_profile",
            [
                {
                    "key": key,
                    "value": encoded,
                    "source_agent": self._agent_id,
                    "confidence": entry.confidence,
                    "updated_at": entry.updated_at,
                }
            ],
        )
        return entry

    aget = _off_loop(get)
    aall = _off_loop(all)
    aset = _off_loop(set)


class Directory:
    """The agent directory every agent shares (in the global file), acting as one agent: it reads every
    entry and writes its own."""

    __slots__ = ("_agent_id", "_engine")

    def __init__(self, engine: FactStore, agent_id: str) -> None:
        """Bind the facet; applications get it from :attr:`~..handles.AgentHandle.directory`.

        Args:
            engine: the store's engine.
            agent_id: the agent it acts as (the entry :meth:`register` writes).

        Raises:
            InvalidInputError: an id the store cannot own.
        """
        self._engine = as_engine(engine)
        self._agent_id = validate_owner_id(agent_id, "agent_id")

    def __repr__(self) -> str:
        return f"Directory(agent_id={self._agent_id!r})"

    def register(
        self,
        *,
        display_name: str | None = None,
        description: str | None = None,
        capabilities: Sequence[str] | None = None,
        model: str | None = None,
        tools: Sequence[str] | None = None,
        status: str | None = None,
        last_active_at: float | None = None,
    ) -> AgentInfo:
        """Create or update this agent's entry, keeping the fields not given (a new entry is ``active``
        unless ``status`` says otherwise, and is named by its id unless ``display_name`` says otherwise).

        Args:
            display_name: its name for people.
            description: what it does.
            capabilities: what it can do.
            model: the model it runs on.
            tools: the tools it has.
            status: ``"active"``, ``"idle"`` or ``"unavailable"``.
            last_active_at: when it was last active (epoch seconds).

        Returns:
            The entry as it is now.

        Raises:
            InvalidInputError: a bad value (nothing is written).
        """
        upsert_agent(
            self._engine,
            self._agent_id,
            display_name=display_name,
            description=description,
            capabilities=capabilities,
            model=model,
            tools=tools,
            status=status,
            last_active_at=last_active_at,
        )
        return self.get(self._agent_id)

    def get(self, agent: str) -> AgentInfo:
        """One agent's entry.

        Args:
            agent: the agent.

        Returns:
            Its entry.

        Raises:
            UnknownAgentError: no entry for it.
        """
        key = lookup_key(agent, "agent_id")
        rows = self._engine.backend.read_records(GLOBAL, "agent_directory", {"agent_id": key}, limit=1) if key else []
        if not rows:
            raise UnknownAgentError(f"unknown agent {agent!r}: not in the agent directory")
        return _agent_info(rows[0])

    def list(self, status: str | None = None) -> builtins.list[AgentInfo]:
        """Every entry, by agent id.

        Args:
            status: only agents with this status.

        Returns:
            The entries.

        Raises:
            InvalidInputError: an unknown status.
        """
        if status is not None and status not in AGENT_STATUSES:
            raise InvalidInputError(f"agent status must be one of {AGENT_STATUSES}, got {status!r}")
        rows = self._engine.backend.read_records(
            GLOBAL,
            "agent_directory",
            {"status": status} if status else None,
            limit=100_000,
            oldest_first=True,
        )
        return sorted((_agent_info(r) for r in rows), key=lambda a: a.agent_id)

    aregister = _off_loop(register)
    aget = _off_loop(get)
    alist = _off_loop(list)


class AgentMemory:
    """The compatible view of one agent, keeping the seed's names (``store_insight``, ``get_my_insights``,
    ``create_task``...): each is a thin delegation to the facet the handles offer (:class:`Tasks`,
    :class:`Insights`, :class:`Profile`, :class:`Directory`) or to the store's records. Every operation acts
    as ``agent_id``. New code uses :meth:`~..store.SharedMemoryStore.as_agent` and its facets.
    """

    def __init__(self, store: FactStore, agent_id: str, group_id: str | None = None) -> None:
        self.store = as_engine(store)
        self.agent_id = validate_owner_id(agent_id, "agent_id")
        self.group_id = None if group_id is None else validate_owner_id(group_id, "group_id")
        self.scope = ScopeRef("agent", agent_id)
        self._tasks = Tasks(self.store, self.agent_id, self.group_id)
        self._insights = Insights(self.store, self.agent_id)
        self._profile = Profile(self.store, self.agent_id)
        self._directory = Directory(self.store, self.agent_id)

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

    # ------------------------------------------------------------------ insights (Insights)
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
        return self._insights.add(
            content, category=category, confidence=confidence, source=source, context=context, ttl_days=ttl_days
        )

    def get_my_insights(self, category: str | None = None, limit: int = 20) -> list[Fact]:
        return self._insights.list(category, limit=limit)

    def get_agent_insights(self, agent_id: str, category: str | None = None, limit: int = 20) -> list[Fact]:
        """Another agent's insights (a cross-agent read: refused if that agent is private)."""
        return self._insights.list(category, agent=agent_id, limit=limit)

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

    # ------------------------------------------------------------------ user profile (Profile)
    def get_user_profile(self, key: str | None = None) -> dict[str, ProfileEntry] | ProfileEntry | None:
        """The whole profile (key -> entry), or one entry (None if unset)."""
        return self._profile.all() if key is None else self._profile.get(key)

    def update_user_profile(self, key: str, value: Any, confidence: float = 1.0) -> ProfileEntry:
        """Set a profile key (any agent may); the entry records which agent learned it."""
        return self._profile.set(key, value, confidence=confidence)

    # ------------------------------------------------------------------ agent directory (Directory)
    def register(self, **fields: Any) -> AgentInfo:
        """Create or update this agent's directory entry (display_name, description, capabilities, ...)."""
        return self._directory.register(**fields)

    def get_agent(self, agent_id: str) -> AgentInfo:
        return self._directory.get(agent_id)

    def list_agents(self, status: str | None = None) -> list[AgentInfo]:
        return self._directory.list(status)

    def get_agent_capabilities(self, agent_id: str) -> list[str]:
        return list(self._directory.get(agent_id).capabilities)

    # ------------------------------------------------------------------ tasks (Tasks)
    def create_task(self, title: str, assignee: str | None = None, context: Mapping[str, Any] | None = None) -> Task:
        return self._tasks.create(title, assignee, context)

    def get_task(self, task_id: str) -> Task:
        return self._tasks.get(task_id)

    def list_tasks(self, status: str | None = None, *, assigned_to: str | None = None) -> list[Task]:
        return self._tasks.list(status, assigned_to=assigned_to)

    def assign_task(self, task_id: str, agent_id: str) -> Task:
        return self._tasks.assign(task_id, agent_id)

    def update_task_status(self, task_id: str, status: TaskStatus) -> Task:
        return self._tasks.set_status(task_id, status)

    def complete_task(self, task_id: str, result: Any) -> Task:
        """Complete a task assigned to this agent; its result is stored as a fact automatically (in the
        group scope for a group task, else in the agent's scope; category ``task_result``)."""
        return self._tasks.complete(task_id, result)

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
