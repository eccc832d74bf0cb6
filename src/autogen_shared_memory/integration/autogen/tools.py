"""The three memory tools a model calls: ``memory_search``, ``memory_remember``, ``memory_forget``.

Each tool is bound, when it is created, to one agent id and one group id: the model chooses the query,
the fact, the scope it asks for, ``top_k``, ``confidence``, ``ttl_days`` and tags — never who it is or
which group it is in. A refused or invalid call returns a clear text result (the run goes on) instead of
raising. The tools are AutoGen components, so an agent or team that holds them dumps and loads.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from typing import Any, Literal

from autogen_core import CancellationToken, Component, ComponentBase, ComponentLoader, ComponentModel
from autogen_core.tools import BaseTool
from pydantic import BaseModel, Field
from typing_extensions import Self

from ...core.types import FactNotFoundError, MemoryAccessDenied, validate_owner_id
from ...facts import FactStore

logger = logging.getLogger("autogen_shared_memory")


def store_component(store: FactStore) -> ComponentModel:
    """The store's component config, for the tools and views that dump with it (a
    :class:`~autogen_shared_memory.SharedMemoryStore` is a component; a bare ``FactStore`` is not)."""
    if not isinstance(store, ComponentBase):
        raise TypeError(f"{type(store).__name__} is not an AutoGen component: use SharedMemoryStore to dump and load")
    return store.dump_component()


def load_store(model: ComponentModel) -> FactStore:
    """A store loaded from its component config (the same instance as an equal store of this process)."""
    store: FactStore = ComponentLoader.load_component(model, FactStore)
    return store


SEARCH, REMEMBER, FORGET = "memory_search", "memory_remember", "memory_forget"
TOOL_NAMES = (SEARCH, REMEMBER, FORGET)
FAILURE_PREFIXES = ("DENIED", "ERROR")  # how a refused or invalid call's result starts


class SearchArgs(BaseModel):
    query: str = Field(description="What to look for, in your own words or with exact keywords.")
    scope: Literal["all", "agent", "group", "global"] = Field(
        "all", description="'all' (default): your notes, your team's facts and global facts together."
    )
    top_k: int = Field(5, ge=1, le=20, description="How many facts at most.")
    max_capsule_bytes: int = Field(2048, ge=256, le=16384, description="Size limit of the result.")


class RememberArgs(BaseModel):
    fact: str = Field(description="One short, self-contained statement worth keeping.")
    scope: Literal["agent", "group", "global"] = Field(
        description="'agent': private notes for yourself; 'group': facts your team needs; "
        "'global': deployment-wide rules and user preferences (may be refused)."
    )
    confidence: float = Field(1.0, ge=0.0, le=1.0, description="How sure you are, 0..1.")
    ttl_days: float | None = Field(None, gt=0, description="Days after which the fact expires; none = keep.")
    tags: list[str] | None = Field(None, description="Optional short labels.")
    supersedes: list[str] | None = Field(None, description="Ids of facts (same scope) this one corrects or replaces.")


class ForgetArgs(BaseModel):
    fact_id: str = Field(description="The id of the fact, as shown in a memory_search result.")
    reason: str | None = Field(None, description="Why the fact is wrong or obsolete.")


class MemoryToolConfig(BaseModel):
    """Declarative config of a memory tool: the store and the identity the tool is bound to."""

    store: ComponentModel
    agent_id: str
    group_id: str | None = None
    record_calls: bool = False


class _MemoryTool(BaseTool[BaseModel, BaseModel]):
    """Common part of the three tools: the bound identity and the error-to-result policy."""

    component_type = "tool"
    component_config_schema = MemoryToolConfig
    _args: type[BaseModel]
    _tool_name: str
    _tool_description: str

    def __init__(
        self,
        store: FactStore,
        agent_id: str,
        group_id: str | None = None,
        *,
        record_calls: bool = False,
    ) -> None:
        super().__init__(self._args, str, self._tool_name, self._tool_description)  # type: ignore[arg-type]
        self.store = store
        self.agent_id = validate_owner_id(agent_id, "agent_id")
        self.group_id = None if group_id is None else validate_owner_id(group_id, "group_id")
        self.record_calls = record_calls

    def _to_config(self) -> MemoryToolConfig:
        return MemoryToolConfig(
            store=store_component(self.store),
            agent_id=self.agent_id,
            group_id=self.group_id,
            record_calls=self.record_calls,
        )

    @classmethod
    def _from_config(cls, config: MemoryToolConfig) -> Self:
        return cls(
            load_store(config.store),
            config.agent_id,
            config.group_id,
            record_calls=config.record_calls,
        )

    async def run(self, args: BaseModel, cancellation_token: CancellationToken) -> Any:
        started = time.perf_counter()
        try:
            text = await self._run(args)
        except MemoryAccessDenied as exc:
            text = f"DENIED by the memory policy: {exc}. Nothing was changed."
        except FactNotFoundError as exc:
            text = f"ERROR: {exc}. Search memory to find the right id."
        except (ValueError, TypeError) as exc:
            text = f"ERROR: {exc}. Nothing was changed."
        if self.record_calls:
            failed = text.startswith(FAILURE_PREFIXES)
            try:
                await self.store.alog_tool_call(
                    self.agent_id,
                    self.name,
                    args.model_dump(mode="json"),
                    text,
                    success=not failed,
                    duration_ms=(time.perf_counter() - started) * 1000.0,
                    error=text if failed else None,
                )
            except Exception:  # the call's answer stands; a record that cannot be written is logged
                logger.exception("could not record a %s call of %s", self.name, self.agent_id)
        return text

    @abstractmethod
    async def _run(self, args: Any) -> str: ...


class MemorySearchTool(_MemoryTool, Component[MemoryToolConfig]):
    """Search shared memory; returns a byte-bounded capsule with ids and provenance."""

    component_provider_override = "autogen_shared_memory.MemorySearchTool"
    _args = SearchArgs
    _tool_name = SEARCH
    _tool_description = (
        "Search the shared long-term memory: your private notes, your team's facts and deployment-wide "
        "facts. Returns the best matching facts, one per line, each with its id, scope, author and date. "
        "Search before acting on anything that may have been decided, learned or asked before."
    )

    async def _run(self, args: SearchArgs) -> str:
        if args.scope == "group" and self.group_id is None:
            return "ERROR: you are not in a group; search scope 'agent', 'global' or 'all'."
        hits = await self.store.asearch(
            args.query, args.scope, agent_id=self.agent_id, group_id=self.group_id, top_k=args.top_k
        )
        return self.store.capsule(hits, args.max_capsule_bytes)


class MemoryRememberTool(_MemoryTool, Component[MemoryToolConfig]):
    """Store a fact in shared memory; returns the new (or reinforced) fact's id."""

    component_provider_override = "autogen_shared_memory.MemoryRememberTool"
    _args = RememberArgs
    _tool_name = REMEMBER
    _tool_description = (
        "Store one durable fact in shared memory (a decision, preference, result or correction), as a "
        "short self-contained sentence. scope 'agent' = private notes, 'group' = your team, 'global' = "
        "the whole deployment. Returns the fact id. To correct a fact, pass supersedes=[old id]."
    )

    async def _run(self, args: RememberArgs) -> str:
        if args.scope == "group" and self.group_id is None:
            return "ERROR: you are not in a group; use scope 'agent' (or 'global' if allowed)."
        receipt = await self.store.aremember(
            args.fact,
            args.scope,
            agent_id=self.agent_id,
            group_id=self.group_id,
            confidence=args.confidence,
            ttl_days=args.ttl_days,
            tags=args.tags,
            supersedes=args.supersedes,
        )
        text = f"{receipt.status} fact {receipt.id} in scope {receipt.scope}"
        if receipt.status == "reinforced":
            text += " (the same fact was already stored: your statement was recorded on it)"
        elif receipt.status == "held":
            text += " (held for review: it is recalled once a global writer approves it)"
        if receipt.superseded:
            text += f"; superseded {', '.join(receipt.superseded)}"
        for fact_id in receipt.similar:  # facts of the scope just written to: the caller may read them
            fact = await self.store.aget(fact_id, agent_id=self.agent_id, group_id=self.group_id)
            content = " ".join(fact.content.split())
            quoted = content if len(content) <= 160 else content[:159] + "…"
            text += (
                f"\nsimilar to {fact.id}: {quoted!r}. If the new fact replaces it, remember it with "
                f"supersedes=[{fact.id}]."
            )
        return text


class MemoryForgetTool(_MemoryTool, Component[MemoryToolConfig]):
    """Tombstone a fact by id (soft delete, kept for audit)."""

    component_provider_override = "autogen_shared_memory.MemoryForgetTool"
    _args = ForgetArgs
    _tool_name = FORGET
    _tool_description = (
        "Forget a fact that is wrong or obsolete, by the id shown in memory_search results. The fact is "
        "kept as a tombstone for audit but no longer recalled."
    )

    async def _run(self, args: ForgetArgs) -> str:
        fact = await self.store.aforget(args.fact_id, args.reason, agent_id=self.agent_id, group_id=self.group_id)
        return f"forgot fact {fact.id} ({fact.scope}): {fact.content[:80]}"


def memory_tools(
    store: FactStore, agent_id: str, group_id: str | None = None, *, record_calls: bool = False
) -> list[_MemoryTool]:
    """The three memory tools bound to ``agent_id`` (and ``group_id``).

    With ``record_calls`` each call is also logged in the agent's tool history (for loops that do not run
    through a recording runtime; tools attached to agentchat agents are recorded from the runtime's events).
    """
    classes = (MemorySearchTool, MemoryRememberTool, MemoryForgetTool)
    return [cls(store, agent_id, group_id, record_calls=record_calls) for cls in classes]
