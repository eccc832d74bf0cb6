"""``SharedMemoryStore``: the façade users start from. A :class:`~.facts.FactStore` that is also an AutoGen
component, with the per-agent views, the case log, the state store, export/import and the AutoGen integration
on top. Nothing imports this module back: views and adapters take a ``FactStore``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field
from typing_extensions import Self

from .component import Component, ComponentBase, ComponentLoader, ComponentModel
from .core.types import DEFAULT_MAX_FACT_BYTES, ScopeRef
from .embedding import Embedder
from .errors import InvalidInputTypeError
from .facts import DEFAULT_ROOT, ENV_DSN, ENV_ROOT, FactStore, _off_loop, default_root
from .search.index import VectorIndexKind
from .transfer import ImportReport, export_jsonl, import_jsonl
from .views.agents import AgentMemory, Task, task_from_row
from .views.caselog import CaseLog
from .views.state import BackendConversationStateStore

if TYPE_CHECKING:
    from autogen_core.tools import BaseTool

    from .integration.autogen.memory import SharedMemory
    from .integration.autogen.runtime import MemoryRecorder


def framework_of(target: Any) -> str:
    """``"agent_framework"``, ``"ag2"`` or ``"autogen"``: the framework an agent or team (or the first
    of a list of agents) comes from, by the package that defines its type or the nearest framework class it
    derives from."""
    first = target[0] if isinstance(target, (list, tuple)) and target else target
    for cls in type(first).__mro__:  # an application's own agent subclass belongs to its base's framework
        root = cls.__module__.split(".")[0]
        if root.startswith("agent_framework"):
            return "agent_framework"
        if root == "autogen":
            return "ag2"
        if root.startswith("autogen_"):
            return "autogen"
    return "autogen"


__all__ = ["DEFAULT_ROOT", "ENV_DSN", "ENV_ROOT", "SharedMemoryStore", "SharedMemoryStoreConfig", "default_root"]


class SharedMemoryStoreConfig(BaseModel):
    """Declarative config of a :class:`SharedMemoryStore` (``dump_component`` / ``load_component``)."""

    root: str | None = None
    dsn: str | None = None  # a PostgreSQL DSN given explicitly (prefer $AUTOGEN_SHARED_MEMORY_DSN: no password here)
    embedder: ComponentModel | None = None
    global_writers: list[str] = Field(default_factory=list)
    near_duplicate_threshold: float = 0.95
    similar_threshold: float = 0.8
    rrf_k: float = 5.0
    lexical_weight: float = 1.0
    semantic_weight: float = 0.5
    scope_weights: dict[str, float] | None = None
    search_depth: int = 50
    min_similarity: float = 0.15
    context_weights: tuple[float, float] | None = None
    max_fact_bytes: int = DEFAULT_MAX_FACT_BYTES
    operator_id: str = "system"
    vector_index: VectorIndexKind = "exact"
    write_budget: int | None = None
    review_global_writes: bool = False


# Stores loaded from equal configs in one process are one instance: tools, memories and agents loaded
# from a dumped team then share connections and vector caches instead of opening their own.
_LOADED: weakref.WeakValueDictionary[str, SharedMemoryStore] = weakref.WeakValueDictionary()
_LOADED_LOCK = threading.Lock()


class SharedMemoryStore(FactStore, ComponentBase[SharedMemoryStoreConfig], Component[SharedMemoryStoreConfig]):
    """Persistent memory shared by the agents of a deployment, in agent, group and global scopes.

    A :class:`~.facts.FactStore` (the arguments are documented there) that is also an AutoGen component, with
    the per-agent views, the case log, the state store, export and import, and the AutoGen integration.
    """

    component_type = "shared_memory_store"
    component_provider_override = "autogen_shared_memory.SharedMemoryStore"
    component_config_schema = SharedMemoryStoreConfig

    def _created(self) -> None:
        embedder = self.embedder.dump_component() if isinstance(self.embedder, ComponentBase) else None
        self._config = SharedMemoryStoreConfig(embedder=embedder, **self._settings)
        if self._config.embedder is not None:  # loading this config in this process reuses this instance
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
                config.root,
                dsn=config.dsn,
                embedder=embedder,
                global_writers=config.global_writers,
                near_duplicate_threshold=config.near_duplicate_threshold,
                similar_threshold=config.similar_threshold,
                rrf_k=config.rrf_k,
                lexical_weight=config.lexical_weight,
                semantic_weight=config.semantic_weight,
                scope_weights=config.scope_weights,
                search_depth=config.search_depth,
                min_similarity=config.min_similarity,
                context_weights=config.context_weights,
                max_fact_bytes=config.max_fact_bytes,
                operator_id=config.operator_id,
                vector_index=config.vector_index,
                write_budget=config.write_budget,
                review_global_writes=config.review_global_writes,
            )
            _LOADED[key] = store
            return store

    # ------------------------------------------------------------------ per-agent views and shared records
    def for_agent(self, agent_id: str, group_id: str | None = None) -> AgentMemory:
        """One agent's view: its records, insights, tasks, the shared profile and directory, and (with a
        group) the group's case log; see :class:`~.agent_memory.AgentMemory`."""
        return AgentMemory(self, agent_id, group_id)

    def case_log(self, group_id: str, agent_id: str | None = None) -> CaseLog:
        """The append-only case log of ``group_id``, used as ``agent_id`` (a member) or, without one, by
        trusted code."""
        return CaseLog(self, group_id, agent_id)

    def list_tasks(
        self, group_id: str | None = None, *, status: str | None = None, assigned_to: str | None = None
    ) -> list[Task]:
        """Tasks as trusted code sees them (no membership needed): one group's, or those of every group and
        agent file, scope by scope, oldest first; each names its scope."""
        refs = [ScopeRef("group", group_id)] if group_id else [r for r in self.backend.scopes() if r.kind != "global"]
        where = {k: v for k, v in (("status", status), ("agent_id", assigned_to)) if v is not None}
        return [
            task_from_row(row, ref)
            for ref in refs
            for row in self.backend.read_records(ref, "tasks", where, limit=1_000_000, oldest_first=True)
        ]

    @property
    def state(self) -> BackendConversationStateStore:
        """The conversation and agent-state store on this store's backend."""
        return BackendConversationStateStore(self.backend)

    def export(
        self,
        path: Any,
        *,
        agent_id: str | None = None,
        scopes: Sequence[ScopeRef] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Write everything (or one agent's memory and records, or some scopes) as JSON Lines; see
        :mod:`.transfer`."""
        return export_jsonl(self, path, agent_id=agent_id, scopes=scopes, progress=progress)

    def import_(
        self,
        path: Any,
        *,
        skip_bad: bool = False,
        policy: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> ImportReport:
        """Import a JSON Lines export (checked whole before anything is written); ``policy=True`` also applies
        the group memberships and privacy settings it holds (refused without it); see
        :func:`.transfer.import_jsonl`."""
        return import_jsonl(self, path, skip_bad=skip_bad, policy=policy, progress=progress)

    # ------------------------------------------------------------------ framework integration
    def _attacher(self, target: Any) -> Any:
        """The attacher of the framework ``target`` (a team, an agent or a list of agents) belongs to,
        one per store and framework: it remembers what it added so that detach removes exactly that."""
        framework = framework_of(target)
        attachers: dict[str, Any] = self.__dict__.setdefault("_attachers", {})
        if framework not in attachers:
            if framework == "agent_framework":
                from .integration.agent_framework import Attacher as MafAttacher

                attachers[framework] = MafAttacher(self)
            elif framework == "ag2":
                from .integration.ag2 import Attacher as Ag2Attacher

                attachers[framework] = Ag2Attacher(self)
            else:
                from .integration.autogen.attach import Attacher

                attachers[framework] = Attacher(self)
        return attachers[framework]

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
        from .integration.toolkit import team_identity

        team_identity(group_id, (), None)  # no team name: refused before anything else is looked at
        return self._attacher(team_or_agent).attach(
            team_or_agent,
            group_id,
            agent_ids=agent_ids,
            scaffolding=scaffolding,
            read_only_scaffolding=read_only_scaffolding,
            **options,
        )

    def detach(self, team_or_agent: Any) -> list[str]:
        """Remove everything :meth:`attach` added; returns the names of the agents changed."""
        changed: list[str] = self._attacher(team_or_agent).detach(team_or_agent)
        return changed

    def context_provider(self, group_id: str | None = None, **options: Any) -> Any:
        """A Microsoft Agent Framework context provider giving the agent that runs with it shared memory
        (the tools bound to ``agent.name``, the scaffolding, optional capsule recall, recording); see
        :mod:`.integration.agent_framework`."""
        from .integration.agent_framework import SharedMemoryContextProvider

        return SharedMemoryContextProvider(self, group_id=group_id, **options)

    def tools_for(
        self, agent_id: str, group_id: str | None = None, *, record_calls: bool = True
    ) -> list[BaseTool[BaseModel, BaseModel]]:
        """``memory_search``, ``memory_remember`` and ``memory_forget`` bound to one agent (and group),
        for a core-API tool-calling loop; each call is logged in the agent's tool history.

        Binding an agent to a group enrols it as a member, as ``attach`` does for a team's agents: tools
        handed out for a group would otherwise deny every group call at run time (this is trusted code
        choosing the agent's team; a model never reaches it)."""
        from .integration.autogen.tools import memory_tools

        self._agent(agent_id)
        if group_id is not None:
            self.add_group_member(group_id, agent_id)
        return list(memory_tools(self, agent_id, group_id, record_calls=record_calls))

    def memory_for(self, agent_id: str, group_id: str | None = None, **options: Any) -> SharedMemory:
        """An AutoGen ``Memory`` view bound to one agent, for ``AssistantAgent(memory=[...])``."""
        from .integration.autogen.memory import SharedMemory

        return SharedMemory(self, agent_id, group_id, **options)

    def runtime_handler(self, *, session_id: str | None = None) -> MemoryRecorder:
        """An intervention handler for ``SingleThreadedAgentRuntime(intervention_handlers=[...])`` that
        records every agent's messages and tool calls (writes happen in a background thread)."""
        from .integration.autogen.runtime import MemoryRecorder

        return MemoryRecorder(self, session_id=session_id)

    def register(self, runtime: Any, *, session_id: str | None = None) -> MemoryRecorder:
        """Add the recording handler to an existing runtime (one that was built without it)."""
        if not hasattr(runtime, "_intervention_handlers"):
            raise InvalidInputTypeError(f"{type(runtime).__name__} does not take intervention handlers")
        handler = self.runtime_handler(session_id=session_id)
        runtime._intervention_handlers = [*(runtime._intervention_handlers or []), handler]
        return handler

    async def register_service(self, runtime: Any, agent_type: str = "shared_memory") -> Any:
        """Register a memory service agent that answers remember/search/forget messages on ``runtime``."""
        from .integration.autogen.runtime import MemoryServiceAgent

        return await MemoryServiceAgent.register(runtime, agent_type, lambda: MemoryServiceAgent(self))

    def __repr__(self) -> str:
        return f"SharedMemoryStore(root={str(self.root)!r}, model={self.embedder.model_id!r})"

    # ------------------------------------------------------------------ async twins
    aexport = _off_loop(export)
    aimport_ = _off_loop(import_)
