"""Handles: the one way an application touches facts, each bound once to the identity it acts as.

* :class:`AgentHandle` (``store.as_agent("crew:researcher", group="crew")``) acts as one agent: the access
  policy applies to every call, writes are authored by the agent, budgets count against it.
* :class:`OperatorHandle` (``store.operator``, or ``store.as_operator(group="crew")``) is trusted code that
  names its privilege: it may read and write every scope, approve held writes, manage groups, purge, and its
  writes carry the store's operator id in the audit trail.

Invariants (``tests/test_handles.py``):

* No method of a handle takes the identity it acts as; a handle's identity never changes after it is made.
* Nothing grants trust by a left-out argument: trust is only ever the operator handle, and an agent id equal
  to the operator id is refused when a handle is made.
* Binding never changes the policy: ``as_agent`` enrols the agent in its group only when asked
  (``join=True``), an act of the trusted code that makes the handle.

An agent handle's records beyond facts are **facets**, small objects bound to the same agent and group with
plain verbs (``researcher.tasks.create(...)``, ``researcher.insights.list()``; :mod:`.views.agents`); the
group's case log is :meth:`MemoryHandle.case_log`, a method because the operator names the group it reads.

Every method has an ``a``-prefixed async twin that runs it in a worker thread (the event loop never blocks);
so has every facet method.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .core.records import ConversationRecord, ToolCallRecord
from .core.types import AuditEvent, Fact, Hit, Receipt, ScopeKind, ScopeName, ScopeRef, validate_owner_id
from .errors import InvalidInputError, InvalidInputTypeError
from .facts import _off_loop, as_engine

if TYPE_CHECKING:
    from .facts import FactStore
    from .views.agents import Directory, Insights, Profile, Task, Tasks
    from .views.caselog import CaseLog

__all__ = ["AgentHandle", "MemoryHandle", "OperatorHandle"]


class MemoryHandle:
    """What both handles share: the fact vocabulary, acting as :attr:`agent_id` in :attr:`group_id`.

    Made by the store (:meth:`~.store.SharedMemoryStore.as_agent`, :attr:`~.store.SharedMemoryStore.operator`),
    never directly.
    """

    __slots__ = ("_agent_id", "_engine", "_group_id")

    def __init__(self, engine: FactStore, agent_id: str | None, group_id: str | None) -> None:
        self._engine = as_engine(engine)
        self._agent_id = agent_id
        self._group_id = None if group_id is None else validate_owner_id(group_id, "group")

    @property
    def agent_id(self) -> str | None:
        """The agent this handle acts as (``None`` for the operator)."""
        return self._agent_id

    @property
    def group_id(self) -> str | None:
        """The group this handle's ``"group"`` scope means (``None``: no group)."""
        return self._group_id

    @property
    def engine(self) -> FactStore:
        """The store's engine (for adapters that pass the identity along themselves)."""
        return self._engine

    # ------------------------------------------------------------------ facts
    def remember(
        self,
        content: str,
        scope: ScopeKind,
        *,
        confidence: float = 1.0,
        ttl_days: float | None = None,
        tags: Sequence[str] | None = None,
        category: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        supersedes: Sequence[str] | None = None,
        session_id: str | None = None,
    ) -> Receipt:
        """Store one fact. A fact that says the same as an active fact of the scope reinforces it (the receipt
        says ``reinforced``); ``supersedes`` makes it the correction of older facts of the same scope, closed
        atomically with the write.

        Args:
            content: the fact's text.
            scope: ``"agent"`` (this agent's private scope), ``"group"`` (the bound group) or ``"global"``.
            confidence: in [0, 1].
            ttl_days: the fact expires after this many days (``None``: never).
            tags: labels to filter searches by.
            category: one label.
            metadata: JSON-able data kept with the fact.
            supersedes: ids of facts this one corrects.
            session_id: the conversation it was learnt in (default: the store's session).

        Returns:
            The receipt: the fact's id, whether it was stored, reinforced or held, and similar facts.

        Raises:
            MemoryAccessDenied: the policy refuses this write (nothing is written).
            InvalidInputError: a bad value (nothing is written).
        """
        return self._engine.remember(
            content,
            scope,
            agent_id=self._agent_id,
            group_id=self._group_id,
            confidence=confidence,
            ttl_days=ttl_days,
            tags=tags,
            category=category,
            metadata=metadata,
            supersedes=supersedes,
            session_id=session_id,
        )

    def remember_many(
        self, /, facts: Sequence[str | Mapping[str, Any]], scope: ScopeKind | None = None, **defaults: Any
    ) -> list[Receipt]:
        """Store many facts: one embedding call, one transaction per scope, all checked before any is written.

        Args:
            facts: strings or mappings with ``content`` and optionally the keywords of :meth:`remember`.
            scope: the scope of the items that leave it out.
            **defaults: keyword defaults for the items that leave them out.

        Returns:
            One receipt per item, in order.

        Raises:
            MemoryAccessDenied: the policy refuses one of the writes (nothing is written).
            InvalidInputError: a bad item; the message names its place (nothing is written).
        """
        return self._engine.remember_many(facts, scope, agent_id=self._agent_id, group_id=self._group_id, **defaults)

    def forget(self, fact_id: str, reason: str | None = None) -> Fact:
        """Tombstone a fact: search stops returning it; its row and audit trail stay.

        Args:
            fact_id: the fact.
            reason: why, kept in the audit trail.

        Returns:
            The fact as it is now (a fact already forgotten or superseded, unchanged).

        Raises:
            FactNotFoundError: no such fact this handle may read.
            MemoryAccessDenied: this handle may not forget it.
        """
        return self._engine.forget(fact_id, reason, agent_id=self._agent_id, group_id=self._group_id)

    def forget_all(self, scope: ScopeKind, reason: str | None = None) -> int:
        """Forget every active fact this handle stated in a scope (the operator: every fact of the scope).
        Where another agent stated a fact too, only this agent's statement is taken back.

        Args:
            scope: ``"agent"``, ``"group"`` or ``"global"``.
            reason: why, kept in the audit trail.

        Returns:
            How many facts were forgotten or withdrawn.

        Raises:
            MemoryAccessDenied: this handle may not write the scope.
        """
        return self._engine.forget_all(scope, agent_id=self._agent_id, group_id=self._group_id, reason=reason)

    def search(self, /, query: str, scope: ScopeName = "all", *, top_k: int = 5, **filters: Any) -> list[Hit]:
        """Hybrid recall: BM25 and embedding candidates fused by Reciprocal Rank Fusion, best first. Each hit
        says why it was recalled (its lexical and semantic ranks, cosine, fused score).

        Args:
            query: what to look for.
            scope: ``"all"`` (this agent's scope, its group and global), ``"agent"``, ``"group"`` or
                ``"global"``.
            top_k: at most this many hits.
            **filters: ``tags``, ``created_by``, ``category``, ``since``, ``until``, ``min_confidence``,
                ``include_inactive``, ``as_of`` (what was believed then), ``other_agent`` (with
                ``scope="agent"``: an explicit read of another agent's scope), ``scopes`` (named scopes),
                ``scope_weights``, ``context_weights``.

        Returns:
            The hits, best first.

        Raises:
            MemoryAccessDenied: a scope this handle may not read.
            InvalidInputError: a bad query or filter.
        """
        return self._engine.search(
            query, scope, agent_id=self._agent_id, group_id=self._group_id, top_k=top_k, **filters
        )

    def recall(self, /, query: str, scope: ScopeName = "all", *, max_bytes: int = 2048, **options: Any) -> str:
        """:meth:`search`, rendered as a capsule: what a memory tool answers a model.

        Args:
            query: what to look for.
            scope: as for :meth:`search`.
            max_bytes: the capsule's size bound in UTF-8 bytes.
            **options: :meth:`search`'s keywords.

        Returns:
            The capsule text (never more than ``max_bytes`` bytes).

        Raises:
            MemoryAccessDenied: a scope this handle may not read.
        """
        return self._engine.capsule(self.search(query, scope, **options), max_bytes)

    def get(self, fact_id: str) -> Fact:
        """One fact by id.

        Args:
            fact_id: the fact.

        Returns:
            The fact, whatever its status.

        Raises:
            FactNotFoundError: no such fact this handle may read (the same answer either way).
        """
        return self._engine.get(fact_id, agent_id=self._agent_id, group_id=self._group_id)

    def history(self, fact_id: str) -> list[AuditEvent]:
        """The audit trail of a fact and of its supersede chain, oldest first.

        Args:
            fact_id: the fact (a purged one too: its trail ends with the ``purged`` event).

        Returns:
            The events, oldest first.

        Raises:
            FactNotFoundError: no such fact this handle may read.
        """
        return self._engine.history(fact_id, agent_id=self._agent_id, group_id=self._group_id)

    def supersede_chain(self, fact_id: str) -> list[Fact | str]:
        """Every fact linked to this one by corrections, itself included, oldest first.

        Args:
            fact_id: the fact.

        Returns:
            The facts; a purged link is its bare id, at the end.

        Raises:
            FactNotFoundError: no such fact this handle may read.
        """
        return self._engine.supersede_chain(fact_id, agent_id=self._agent_id, group_id=self._group_id)

    def approve(self, fact_id: str, reason: str | None = None) -> Fact:
        """Release a global fact held for review into recall (the operator or a global writer).

        Args:
            fact_id: the held fact.
            reason: why, kept in the audit trail.

        Returns:
            The fact now active, or the live fact that already said the same (reinforced instead).

        Raises:
            MemoryAccessDenied: this handle may not write the global scope.
            FactNotFoundError: no such fact.
        """
        return self._engine.approve(fact_id, agent_id=self._agent_id, reason=reason)

    # ------------------------------------------------------------------ the case log
    def case_log(self, group: str | None = None) -> CaseLog:
        """The append-only case log of a group, used by this handle.

        Args:
            group: the group (default: the bound group). An agent may only name its bound group.

        Returns:
            The group's :class:`~.views.caselog.CaseLog`.

        Raises:
            InvalidInputError: no group bound or named, or an agent naming another group.
        """
        from .views.caselog import CaseLog

        group = self._group_id if group is None else group
        if group is None:
            raise InvalidInputError("a case log belongs to a group: bind one (group=...) or name it")
        if self._agent_id is not None and group != self._group_id:
            raise InvalidInputError(f"this handle is bound to group {self._group_id!r}, not {group!r}")
        return CaseLog(self._engine, group, self._agent_id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(agent_id={self._agent_id!r}, group_id={self._group_id!r})"

    aremember = _off_loop(remember)
    aremember_many = _off_loop(remember_many)
    aforget = _off_loop(forget)
    aforget_all = _off_loop(forget_all)
    asearch = _off_loop(search)
    arecall = _off_loop(recall)
    aget = _off_loop(get)
    ahistory = _off_loop(history)
    asupersede_chain = _off_loop(supersede_chain)
    aapprove = _off_loop(approve)


class AgentHandle(MemoryHandle):
    """One agent's memory: every call acts as :attr:`agent_id`, in :attr:`group_id` when bound to a group.

    Made by :meth:`~.store.SharedMemoryStore.as_agent`.
    """

    __slots__ = ()

    def __init__(self, engine: FactStore, agent_id: str, group_id: str | None = None) -> None:
        """Bind a handle; applications get one from :meth:`~.store.SharedMemoryStore.as_agent`.

        Args:
            engine: the store's engine.
            agent_id: the agent (never the operator id).
            group_id: the group its ``"group"`` scope means.

        Raises:
            InvalidInputError: an id the store cannot own, or the operator id.
            InvalidInputTypeError: no agent id (the operator acts through ``store.operator``).
        """
        if not isinstance(agent_id, str):
            raise InvalidInputTypeError("agent_id must be a str: the operator acts through store.operator")
        engine = as_engine(engine)
        super().__init__(engine, engine._agent(agent_id), group_id)

    @property
    def agent_id(self) -> str:
        """The agent this handle acts as."""
        assert self._agent_id is not None  # made with one by the store
        return self._agent_id

    # ------------------------------------------------------------------ facets
    @property
    def tasks(self) -> Tasks:
        """This agent's tasks: its group's (shared by the members), or without a group its own.
        ``create``, ``get``, ``list``, ``assign``, ``set_status``, ``complete``; see :class:`~.views.agents.Tasks`.
        """
        from .views.agents import Tasks

        return Tasks(self._engine, self.agent_id, self._group_id)

    @property
    def insights(self) -> Insights:
        """This agent's insights (facts of its scope with a category): ``add``, ``list``; see
        :class:`~.views.agents.Insights`."""
        from .views.agents import Insights

        return Insights(self._engine, self.agent_id)

    @property
    def profile(self) -> Profile:
        """The user profile every agent shares, written as this agent: ``get``, ``all``, ``set``; see
        :class:`~.views.agents.Profile`."""
        from .views.agents import Profile

        return Profile(self._engine, self.agent_id)

    @property
    def directory(self) -> Directory:
        """The agent directory every agent shares; this agent writes its own entry: ``register``, ``get``,
        ``list``; see :class:`~.views.agents.Directory`."""
        from .views.agents import Directory

        return Directory(self._engine, self.agent_id)

    # ------------------------------------------------------------------ records
    def log_message(
        self,
        content: str,
        *,
        role: str = "assistant",
        source: str | None = None,
        session_id: str | None = None,
        context: Mapping[str, Any] | None = None,
        task_id: str | None = None,
    ) -> ConversationRecord:
        """Record a message of this agent (its conversation history, searchable by full text).

        Args:
            content: the message.
            role: ``"assistant"``, ``"user"``, ``"system"`` or ``"tool"``.
            source: who sent it, if not this agent.
            session_id: the conversation (default: the store's session).
            context: JSON-able data kept with it.
            task_id: the task it belongs to.

        Returns:
            The record written.

        Raises:
            InvalidInputError: a bad value (nothing is written).
        """
        return self._engine.log_message(
            self.agent_id, content, role=role, source=source, session_id=session_id, context=context, task_id=task_id
        )

    def log_tool_call(
        self,
        /,
        tool_name: str,
        tool_args: Mapping[str, Any] | None = None,
        result: Any = None,
        **details: Any,
    ) -> ToolCallRecord:
        """Record one tool call of this agent.

        Args:
            tool_name: the tool.
            tool_args: its arguments.
            result: what it answered.
            **details: ``success``, ``duration_ms``, ``error``, ``task_id``, ``session_id``, ``call_id``.

        Returns:
            The record written.

        Raises:
            InvalidInputError: a bad value (nothing is written).
        """
        return self._engine.log_tool_call(self.agent_id, tool_name, tool_args, result, **details)

    def conversation(
        self, *, session_id: str | None = None, query: str | None = None, limit: int = 100
    ) -> list[ConversationRecord]:
        """This agent's recorded messages: newest first, or ranked by full-text match of ``query``.

        Args:
            session_id: only this conversation.
            query: rank by full-text match instead of time.
            limit: at most this many.

        Returns:
            The records.
        """
        return self._engine.conversation(self.agent_id, session_id=session_id, query=query, limit=limit)

    def tool_history(self, *, tool_name: str | None = None, limit: int = 50) -> list[ToolCallRecord]:
        """This agent's recorded tool calls, newest first.

        Args:
            tool_name: only calls of this tool.
            limit: at most this many.

        Returns:
            The records.
        """
        return self._engine.tool_history(self.agent_id, tool_name=tool_name, limit=limit)

    alog_message = _off_loop(log_message)
    alog_tool_call = _off_loop(log_tool_call)
    aconversation = _off_loop(conversation)
    atool_history = _off_loop(tool_history)


class OperatorHandle(MemoryHandle):
    """Trusted code: reads and writes every scope, unbound by the access policy and write budgets; its writes
    are authored by the store's operator id. Made by :attr:`~.store.SharedMemoryStore.operator` (no group)
    or :meth:`~.store.SharedMemoryStore.as_operator`.
    """

    __slots__ = ()

    def pending(self) -> list[Fact]:
        """The global facts held for review, oldest first (an agent never lists them: unreviewed text).

        Returns:
            The held facts.
        """
        return self._engine.pending()

    # ------------------------------------------------------------------ groups and privacy
    def add_member(self, group: str, agent: str) -> None:
        """Enrol an agent in a group: it may then read and write the group's scope.

        Args:
            group: the group.
            agent: the agent.

        Raises:
            InvalidInputError: an id the store cannot own.
        """
        self._engine.add_group_member(group, agent)

    def remove_member(self, group: str, agent: str) -> None:
        """Take an agent out of a group (its facts there stay).

        Args:
            group: the group.
            agent: the agent.
        """
        self._engine.remove_group_member(group, agent)

    def members(self, group: str) -> set[str]:
        """The members of a group.

        Args:
            group: the group.

        Returns:
            Their agent ids.
        """
        return self._engine.group_members(group)

    def set_private(self, agent: str, private: bool = True) -> None:
        """Mark an agent's scope private: other agents may no longer read it, even when asked explicitly.

        Args:
            agent: the agent.
            private: ``False`` opens it again.
        """
        self._engine.set_agent_private(agent, private)

    # ------------------------------------------------------------------ records of any agent
    def conversation(
        self, agent: str, *, session_id: str | None = None, query: str | None = None, limit: int = 100
    ) -> list[ConversationRecord]:
        """An agent's recorded messages: newest first, or ranked by full-text match of ``query``.

        Args:
            agent: whose.
            session_id: only this conversation.
            query: rank by full-text match instead of time.
            limit: at most this many.

        Returns:
            The records.
        """
        return self._engine.conversation(agent, session_id=session_id, query=query, limit=limit)

    def tool_history(self, agent: str, *, tool_name: str | None = None, limit: int = 50) -> list[ToolCallRecord]:
        """An agent's recorded tool calls, newest first.

        Args:
            agent: whose.
            tool_name: only calls of this tool.
            limit: at most this many.

        Returns:
            The records.
        """
        return self._engine.tool_history(agent, tool_name=tool_name, limit=limit)

    def tasks(
        self, group: str | None = None, *, status: str | None = None, assigned_to: str | None = None
    ) -> list[Task]:
        """Tasks of one group, or of every group and agent, oldest first; each names its scope.

        Args:
            group: one group (default: the bound group, else every scope).
            status: only tasks with this status.
            assigned_to: only tasks assigned to this agent.

        Returns:
            The tasks.
        """
        from .views.agents import task_from_row

        group = self._group_id if group is None else group
        backend = self._engine.backend
        refs = [ScopeRef("group", group)] if group else [r for r in backend.scopes() if r.kind != "global"]
        where = {k: v for k, v in (("status", status), ("agent_id", assigned_to)) if v is not None}
        return [
            task_from_row(row, ref)
            for ref in refs
            for row in backend.read_records(ref, "tasks", where, limit=1_000_000, oldest_first=True)
        ]

    # ------------------------------------------------------------------ maintenance
    def purge(self, older_than: float | timedelta, *, scopes: Sequence[ScopeRef] | None = None) -> int:
        """Physically delete forgotten, superseded and expired facts older than ``older_than`` (the only
        physical delete; the audit trail keeps a ``purged`` event).

        Args:
            older_than: days, or a timedelta.
            scopes: only these scopes (default: every scope).

        Returns:
            How many facts were deleted.
        """
        return self._engine.purge(older_than, scopes=scopes)

    def purge_plan(
        self, older_than: float | timedelta, *, scopes: Sequence[ScopeRef] | None = None
    ) -> dict[ScopeRef, dict[str, int]]:
        """What :meth:`purge` would delete now, per scope and status; changes nothing.

        Args:
            older_than: days, or a timedelta.
            scopes: only these scopes (default: every scope).

        Returns:
            Counts by scope and status (``forgotten``, ``superseded``, ``expired``).
        """
        return self._engine.purge_plan(older_than, scopes=scopes)

    def purge_records(
        self,
        older_than: float | timedelta,
        *,
        kinds: Sequence[str] = ("conversations", "tool_calls"),
        include_case_log: bool = False,
    ) -> dict[str, int]:
        """Delete records older than ``older_than`` days, per kind.

        Args:
            older_than: days, or a timedelta.
            kinds: ``conversations``, ``tool_calls``, ``tasks``, ``saved_conversations``.
            include_case_log: also the case logs (append-only otherwise).

        Returns:
            How many were deleted, per kind.

        Raises:
            InvalidInputError: an unknown kind.
        """
        return self._engine.purge_records(older_than, kinds=kinds, include_case_log=include_case_log)

    def reembed(self, progress: Callable[[int], None] | None = None) -> int:
        """Re-embed every fact with the store's embedder and record it as their model.

        Args:
            progress: called with the number of facts done so far.

        Returns:
            How many facts were re-embedded.
        """
        return self._engine.reembed(progress)

    apending = _off_loop(pending)
    aadd_member = _off_loop(add_member)
    aconversation = _off_loop(conversation)
    atool_history = _off_loop(tool_history)
    apurge = _off_loop(purge)
    areembed = _off_loop(reembed)
