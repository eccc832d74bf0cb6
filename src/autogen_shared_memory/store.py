"""``SharedMemoryStore``: the façade users start from, and an AutoGen component.

It holds the engine (:class:`~.facts.FactStore`) and hands out the identity-bound handles that are the one way
to touch facts: :meth:`SharedMemoryStore.as_agent` for an agent, :attr:`SharedMemoryStore.operator` for
trusted code. Around them: attaching frameworks, the change feed, export and import, the conversation-state
store. Nothing imports this module back: views and adapters take the engine or a handle.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field
from typing_extensions import Self

from .adapters import adapter, attacher, framework_of
from .backends.base import Backend, ModelInfo
from .component import Component, ComponentBase, ComponentLoader, ComponentModel
from .core.types import Change, Position, ScopeRef, ScopeStats
from .embedding import Embedder
from .errors import GroupIdRequired, InvalidInputError, InvalidInputTypeError
from .facts import DEFAULT_ROOT, ENV_DSN, ENV_ROOT, FactStore, _off_loop, default_root
from .handles import AgentHandle, OperatorHandle
from .settings import DedupSettings, RecallSettings, WritePolicy
from .transfer import ImportReport, export_jsonl, import_jsonl
from .views.agents import AgentMemory
from .views.state import BackendConversationStateStore

if TYPE_CHECKING:
    from . import feed


__all__ = ["DEFAULT_ROOT", "ENV_DSN", "ENV_ROOT", "SharedMemoryStore", "SharedMemoryStoreConfig", "default_root"]


class SharedMemoryStoreConfig(BaseModel):
    """Declarative config of a :class:`SharedMemoryStore` (``dump_component`` / ``load_component``): the
    same settings objects the constructor takes."""

    location: str | None = None  # a DSN given explicitly (prefer $AUTOGEN_SHARED_MEMORY_DSN: no password here)
    embedder: ComponentModel | None = None
    recall: RecallSettings = Field(default_factory=RecallSettings)
    dedup: DedupSettings = Field(default_factory=DedupSettings)
    policy: WritePolicy = Field(default_factory=WritePolicy)
    backend_options: dict[str, Any] = Field(default_factory=dict)


# Stores loaded from equal configs in one process are one instance: tools, memories and agents loaded
# from a dumped team then share connections and vector caches instead of opening their own.
_LOADED: weakref.WeakValueDictionary[str, SharedMemoryStore] = weakref.WeakValueDictionary()
_LOADED_LOCK = threading.RLock()  # a store made inside _from_config registers itself too


class SharedMemoryStore(ComponentBase[SharedMemoryStoreConfig], Component[SharedMemoryStoreConfig]):
    """Persistent memory shared by the agents of a deployment, in agent, group and global scopes.

    ::

        store = SharedMemoryStore("./memory", policy=WritePolicy(global_writers=["crew:lead"]))
        researcher = store.as_agent("crew:researcher", group="crew")
        researcher.remember("The Q3 report is due on October 14.", "group")
        store.operator.remember("Answers are markdown tables.", "global")

    Args:
        location: where the memory lives: a store directory (SQLite files), ``sqlite:///dir``, a PostgreSQL
            DSN (``postgresql://…``) or a :class:`~.backends.base.Backend`. Default:
            ``$AUTOGEN_SHARED_MEMORY_DSN`` if set, else ``$AUTOGEN_SHARED_MEMORY_DIR``, else
            ``~/.autogen/shared_memory``.
        embedder: any :class:`~.embedding.Embedder`; default all-MiniLM-L6-v2 on ONNX Runtime, loaded lazily.
        recall: how searches rank (:class:`~.settings.RecallSettings`).
        dedup: when a write merges into a fact the scope holds (:class:`~.settings.DedupSettings`).
        policy: who may write where, and how much (:class:`~.settings.WritePolicy`).
        backend_options: the backend's own options (``vector_index="hnsw"`` for SQLite files; ``schema=``,
            ``max_size=`` for PostgreSQL); an option the backend does not support is an error.

    Raises:
        InvalidInputError: a bad setting or an unsupported backend option.
        InvalidInputTypeError: a settings argument of the wrong type.
    """

    component_type = "shared_memory_store"
    component_provider_override = "autogen_shared_memory.SharedMemoryStore"
    component_config_schema = SharedMemoryStoreConfig

    def __init__(
        self,
        location: str | os.PathLike[str] | Backend | None = None,
        *,
        embedder: Embedder | None = None,
        recall: RecallSettings | None = None,
        dedup: DedupSettings | None = None,
        policy: WritePolicy | None = None,
        backend_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._engine = FactStore(
            location, embedder=embedder, recall=recall, dedup=dedup, policy=policy, backend_options=backend_options
        )
        engine = self._engine
        engine.facade = self
        dumped = engine.embedder.dump_component() if isinstance(engine.embedder, ComponentBase) else None
        self._config = SharedMemoryStoreConfig(
            location=engine.location,
            embedder=dumped,
            recall=engine.recall,
            dedup=engine.dedup,
            policy=engine.policy,
            backend_options=dict(engine.backend_options),
        )
        self._operator = OperatorHandle(engine, None, None)
        self._attachers: dict[str, Any] = {}
        if dumped is not None:  # loading this config in this process reuses this instance
            with _LOADED_LOCK:
                _LOADED.setdefault(self._config.model_dump_json(), self)

    def _to_config(self) -> SharedMemoryStoreConfig:
        if self._config.embedder is None:
            raise InvalidInputTypeError(
                f"cannot dump a store whose embedder ({type(self.embedder).__name__}) is not an AutoGen Component"
            )
        return self._config.model_copy(deep=True)

    @classmethod
    def _from_config(cls, config: SharedMemoryStoreConfig) -> Self:
        key = config.model_dump_json()
        with _LOADED_LOCK:
            existing = _LOADED.get(key)
            if isinstance(existing, cls) and not existing.closed:
                return existing
            embedder: Embedder | None = None
            if config.embedder is not None:
                loaded = ComponentLoader.load_component(config.embedder)
                if not isinstance(loaded, Embedder):
                    raise InvalidInputTypeError(f"{config.embedder.provider} is not an Embedder")
                embedder = loaded
            store = cls(
                config.location,
                embedder=embedder,
                recall=config.recall,
                dedup=config.dedup,
                policy=config.policy,
                backend_options=config.backend_options,
            )
            _LOADED[key] = store
            return store

    # ------------------------------------------------------------------ what it is made of
    @property
    def engine(self) -> FactStore:
        """The engine behind the handles. Its methods take the caller's identity explicitly; applications use
        the handles."""
        return self._engine

    @property
    def backend(self) -> Backend:
        """The storage backend."""
        return self._engine.backend

    @property
    def embedder(self) -> Embedder:
        """The embedder of facts and queries."""
        return self._engine.embedder

    @property
    def model(self) -> ModelInfo:
        """The embedding model's id and dimension, as scopes record it."""
        return self._engine.model

    @property
    def recall(self) -> RecallSettings:
        """How searches rank."""
        return self._engine.recall

    @property
    def dedup(self) -> DedupSettings:
        """When a write merges into an existing fact."""
        return self._engine.dedup

    @property
    def policy(self) -> WritePolicy:
        """Who may write where, and how much."""
        return self._engine.policy

    @property
    def root(self) -> Path | None:
        """The store directory of a SQLite store (``None`` for other backends)."""
        root = getattr(self._engine.backend, "root", None)
        return root if isinstance(root, Path) else None

    # ------------------------------------------------------------------ handles
    def as_agent(self, agent_id: str, group: str | None = None, *, join: bool = False) -> AgentHandle:
        """A handle acting as one agent: every call through it is that agent's, under the access policy.

        Args:
            agent_id: the agent (not the operator id).
            group: the group its ``"group"`` scope means (``None``: none).
            join: also enrol the agent in ``group`` (trusted code choosing the agent's team, as ``attach``
                does); without it, binding changes nothing.

        Returns:
            The :class:`~.handles.AgentHandle`.

        Raises:
            InvalidInputError: an id the store cannot own, the operator id, or ``join`` without a group.
        """
        handle = AgentHandle(self._engine, agent_id, group)
        if join:
            if handle.group_id is None:
                raise InvalidInputError("join=True needs a group")
            if not self._engine.access.is_member(handle.group_id, handle.agent_id):
                self._engine.add_group_member(handle.group_id, handle.agent_id)
        return handle

    @property
    def operator(self) -> OperatorHandle:
        """Trusted code, named: reads and writes every scope; its writes carry the operator id."""
        return self._operator

    def as_operator(self, group: str | None = None) -> OperatorHandle:
        """The operator handle bound to a group (its ``"group"`` scope means that group).

        Args:
            group: the group.

        Returns:
            The :class:`~.handles.OperatorHandle`.

        Raises:
            InvalidInputError: an id the store cannot own.
        """
        return OperatorHandle(self._engine, None, group)

    def for_agent(self, agent_id: str, group_id: str | None = None) -> AgentMemory:
        """The seed-named compatible view of one agent (``store_insight``, ``get_my_insights``, tasks, the
        profile and directory, the group's case log); see :class:`~.views.agents.AgentMemory`.

        Args:
            agent_id: the agent.
            group_id: its group.

        Returns:
            The view.
        """
        return AgentMemory(self._engine, agent_id, group_id)

    # ------------------------------------------------------------------ the whole store
    def stats(self) -> list[ScopeStats]:
        """Counts, size and model of every scope.

        Returns:
            One entry per scope.
        """
        return self._engine.stats()

    def changes(self, since: Position | str | None = None, *, limit: int | None = None) -> list[Change]:
        """The change feed: every change after ``since``, in order (lossless across processes).

        Args:
            since: a position from an earlier change or :attr:`~.core.types.Change.position`; ``None``: from
                the start.
            limit: at most this many.

        Returns:
            The changes; the last one's ``position`` resumes after it.

        Raises:
            PositionError: a malformed position.
        """
        return self._engine.changes(since, limit=limit)

    def subscribe(self, callback: Callable[[Change], Any], **options: Any) -> feed.Subscription:
        """Call ``callback`` with every change as it happens, in order, in a background thread.

        Args:
            callback: receives each :class:`~.core.types.Change`.
            **options: ``since`` (a position to resume from), ``scopes``, ``poll_interval``.

        Returns:
            The subscription (``stop()`` ends it; ``close`` stops every subscription).
        """
        return self._engine.subscribe(callback, **options)

    @property
    def state(self) -> BackendConversationStateStore:
        """The conversation and agent-state store on this store's backend."""
        return BackendConversationStateStore(self.backend)

    def export(
        self,
        path: Any,
        *,
        agent: str | None = None,
        scopes: Sequence[ScopeRef] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Write everything (or one agent's memory and records, or some scopes) as JSON Lines.

        Args:
            path: a file path or a writable text stream.
            agent: only this agent's scope and records (an export is an operator act).
            scopes: only these scopes.
            progress: called with the count of lines written.

        Returns:
            How many lines were written.
        """
        return export_jsonl(self._engine, path, agent_id=agent, scopes=scopes, progress=progress)

    def import_(
        self,
        path: Any,
        *,
        skip_bad: bool = False,
        policy: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> ImportReport:
        """Import a JSON Lines export, checked whole before anything is written.

        Args:
            path: a file path or a readable text stream.
            skip_bad: skip invalid lines (listed in the report) instead of refusing the file.
            policy: also apply the group memberships and privacy settings the file holds (refused without).
            progress: called with the count of lines read.

        Returns:
            The :class:`~.transfer.ImportReport`.

        Raises:
            ImportFormatError: a bad line (nothing is written).
            ImportPolicyError: policy rows without ``policy=True``.
        """
        return import_jsonl(self._engine, path, skip_bad=skip_bad, policy=policy, progress=progress)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._engine.closed

    def close(self) -> None:
        """Stop subscriptions, flush recorders, close the backend. Idempotent.

        Returns:
            None.
        """
        self._engine.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ framework integration
    def _attacher(self, target: Any) -> Any:
        """The attacher of the framework ``target`` belongs to, one per store and framework: it remembers what
        it added so that detach removes exactly that (found through :mod:`.adapters`)."""
        framework = framework_of(target)
        if framework not in self._attachers:
            self._attachers[framework] = attacher(framework, self._engine)
        return self._attachers[framework]

    def attach(
        self,
        team_or_agent: Any,
        group_id: str | None = None,
        *,
        agent_ids: Mapping[str, str] | None = None,
        scaffolding: str | None = None,
        read_only_scaffolding: str | None = None,
        **options: Any,
    ) -> Any:
        """Give every agent of a team (or one agent, or a list of agents) shared memory: the three tools
        bound to its identity, the scaffolding, group membership. AutoGen agentchat teams and agents,
        Microsoft Agent Framework agents (or lists of them), orchestration builders and built workflows, and
        AG2 ``GroupChat`` / pattern / ``ConversableAgent`` are told apart by their package; see
        ``integration/<framework>/attach.py``.

        Args:
            team_or_agent: the team, agent or list of agents.
            group_id: the team's name (required): its memory lives under it whatever its roster or type,
                and teams given the same name share it, whatever their framework.
            agent_ids: explicit memory ids by agent name; an agent not named here is ``group_id:name``, so
                unrelated teams whose agents have the same names never share a private scope.
            scaffolding: replaces the default scaffolding of agents with the tools.
            read_only_scaffolding: replaces the scaffolding of agents that only get recall.
            options: for the framework's attacher (AG2: ``read_only=True`` or agent names, ``record=False``).

        Returns:
            The framework's ``Attachment`` (``group_id``, ``agents``, ``mode_of``).

        Raises:
            GroupIdRequired: no ``group_id`` (a ``TypeError``).
            ValueError / TypeError: an id the store cannot own, or an agent that cannot be attached as asked.
        """
        if group_id is None:  # no team name: refused before anything else is looked at
            raise GroupIdRequired()
        return self._attacher(team_or_agent).attach(
            team_or_agent,
            group_id,
            agent_ids=agent_ids,
            scaffolding=scaffolding,
            read_only_scaffolding=read_only_scaffolding,
            **options,
        )

    def detach(self, team_or_agent: Any) -> list[str]:
        """Remove everything :meth:`attach` added (tools, scaffolding, recording; memberships and facts stay).

        Args:
            team_or_agent: what was attached.

        Returns:
            The names of the agents changed.
        """
        changed: list[str] = self._attacher(team_or_agent).detach(team_or_agent)
        return changed

    def context_provider(self, group_id: str | None = None, **options: Any) -> Any:
        """A Microsoft Agent Framework context provider giving the agent that runs with it shared memory
        (the tools bound to ``agent.name``, the scaffolding, optional capsule recall, recording); see
        :mod:`.integration.agent_framework`.

        Args:
            group_id: the agent's team.
            **options: the provider's options (``mode``, ``top_k``, ``max_capsule_bytes``, ...).

        Returns:
            The ``SharedMemoryContextProvider``.
        """
        return adapter("agent_framework").SharedMemoryContextProvider(self._engine, group_id=group_id, **options)

    def tools_for(self, agent_id: str, group_id: str | None = None, *, record_calls: bool = True) -> list[Any]:
        """``memory_search``, ``memory_remember`` and ``memory_forget`` bound to one agent (and group),
        for a core-API tool-calling loop; each call is logged in the agent's tool history.

        Binding an agent to a group enrols it as a member, as ``attach`` does for a team's agents: tools
        handed out for a group would otherwise deny every group call at run time (this is trusted code
        choosing the agent's team; a model never reaches it).

        Args:
            agent_id: the agent the tools act as.
            group_id: its group (enrolled).
            record_calls: also log each call in the agent's tool history.

        Returns:
            The three AutoGen tools.

        Raises:
            InvalidInputError: an id the store cannot own, or the operator id.
        """
        handle = self.as_agent(agent_id, group_id, join=group_id is not None)
        autogen = adapter("autogen")
        tools = autogen.memory_tools(self._engine, handle.agent_id, handle.group_id, record_calls=record_calls)
        return list(tools)

    def memory_for(self, agent_id: str, group_id: str | None = None, **options: Any) -> Any:
        """An AutoGen ``Memory`` view bound to one agent, for ``AssistantAgent(memory=[...])``.

        Args:
            agent_id: the agent it recalls as.
            group_id: its group.
            **options: the view's options (``top_k``, ``max_bytes``, ...).

        Returns:
            The ``SharedMemory``.
        """
        return adapter("autogen").SharedMemory(self._engine, agent_id, group_id, **options)

    def runtime_handler(self, runtime: Any = None, *, session_id: str | None = None) -> Any:
        """An intervention handler that records every agent's messages and tool calls of an AutoGen core
        runtime (writes happen in a background thread).

        Args:
            runtime: a runtime that already exists, to add the handler to; ``None``: pass the handler to
                ``SingleThreadedAgentRuntime(intervention_handlers=[...])`` yourself.
            session_id: the session the records carry (default: the store's).

        Returns:
            The ``MemoryRecorder``.

        Raises:
            InvalidInputTypeError: ``runtime`` takes no intervention handlers.
        """
        recorder = adapter("autogen").MemoryRecorder(self._engine, session_id=session_id)
        if runtime is not None:
            if not hasattr(runtime, "_intervention_handlers"):
                raise InvalidInputTypeError(f"{type(runtime).__name__} does not take intervention handlers")
            runtime._intervention_handlers = [*(runtime._intervention_handlers or []), recorder]
        return recorder

    async def register_service(self, runtime: Any, agent_type: str = "shared_memory") -> Any:
        """Register a memory service agent that answers remember/search/forget messages on ``runtime``.

        Args:
            runtime: an AutoGen core runtime.
            agent_type: the service's agent type.

        Returns:
            The registered agent type.
        """
        service = adapter("autogen").MemoryServiceAgent
        return await service.register(runtime, agent_type, lambda: service(self._engine))

    def __repr__(self) -> str:
        return f"SharedMemoryStore({self._engine.backend!r}, model={self.embedder.model_id!r})"

    # ------------------------------------------------------------------ async twins
    astats = _off_loop(stats)
    achanges = _off_loop(changes)
    aexport = _off_loop(export)
    aimport_ = _off_loop(import_)
