"""The three memory tools a model calls: ``memory_search``, ``memory_remember``, ``memory_forget``.

Each tool is bound, when it is created, to one agent id and one group id: the model chooses the query,
the fact, the scope it asks for, ``top_k``, ``confidence``, ``ttl_days`` and tags — never who it is or
which group it is in. A refused or invalid call returns a clear text result (the run goes on) instead of
raising. The tools are AutoGen components, so an agent or team that holds them dumps and loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from autogen_core import CancellationToken, Component, ComponentBase, ComponentLoader, ComponentModel
from autogen_core.tools import BaseTool
from pydantic import BaseModel, ValidationError
from typing_extensions import Self

from ...core.types import validate_owner_id
from ...facts import FactStore, as_engine
from ..toolkit import (
    DESCRIPTIONS,
    FORGET,
    REMEMBER,
    SEARCH,
    TOOL_NAMES,
    BoundTools,
    ForgetArgs,
    RememberArgs,
    SearchArgs,
)

__all__ = [
    "TOOL_NAMES",
    "ForgetArgs",
    "MemoryForgetTool",
    "MemoryRememberTool",
    "MemorySearchTool",
    "MemoryToolConfig",
    "RememberArgs",
    "SearchArgs",
    "memory_tools",
]


def store_component(store: FactStore) -> ComponentModel:
    """The store's component config, for the tools and views that dump with it (a
    :class:`~autogen_shared_memory.SharedMemoryStore` is a component; a bare ``FactStore`` is not)."""
    facade = store.facade
    if not isinstance(facade, ComponentBase):
        raise TypeError(f"{type(store).__name__} is not an AutoGen component: use SharedMemoryStore to dump and load")
    return facade.dump_component()


def load_store(model: ComponentModel) -> FactStore:
    """A store loaded from its component config (the same instance as an equal store of this process)."""
    loaded = ComponentLoader.load_component(model)
    engine = getattr(loaded, "engine", None)
    if not isinstance(engine, FactStore):
        raise TypeError(f"{model.provider} is not a SharedMemoryStore")
    return engine


_CALL_ID: ContextVar[str | None] = ContextVar("memory_tool_call_id", default=None)


class MemoryToolConfig(BaseModel):
    """Declarative config of a memory tool: the store and the identity the tool is bound to."""

    store: ComponentModel
    agent_id: str
    group_id: str | None = None
    record_calls: bool = False


class _MemoryTool(BaseTool[BaseModel, BaseModel]):
    """Common part of the three tools: the bound identity; the call itself is the toolkit's :class:`BoundTools`."""

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
        self.store = as_engine(store)
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

    async def run_json(
        self, args: Mapping[str, Any], cancellation_token: CancellationToken, call_id: str | None = None
    ) -> Any:
        """AutoGen's entry point for a model's call. Arguments that fail validation (a negative ``top_k``, a
        list for ``query``, a missing field) answer ``ERROR: invalid arguments (...)`` text, as every other
        refusal does, instead of raising: the model reads what to fix and nothing was changed."""
        try:
            self._args_type.model_validate(args)
        except ValidationError:  # answered (and recorded, with ``record_calls``) as the toolkit answers it
            return await self._bound().call(self.name, args, call_id)
        token = _CALL_ID.set(call_id)  # for run(), which BaseTool.run_json calls without it
        try:
            return await super().run_json(args, cancellation_token, call_id)
        finally:
            _CALL_ID.reset(token)

    def _bound(self) -> BoundTools:
        return BoundTools(self.store, self.agent_id, self.group_id, record_calls=self.record_calls)

    async def run(self, args: BaseModel, cancellation_token: CancellationToken) -> Any:
        return await self._bound().run(self.name, args, call_id=_CALL_ID.get())


class MemorySearchTool(_MemoryTool, Component[MemoryToolConfig]):
    """Search shared memory; returns a byte-bounded capsule with ids and provenance."""

    component_provider_override = "autogen_shared_memory.MemorySearchTool"
    _args = SearchArgs
    _tool_name = SEARCH
    _tool_description = DESCRIPTIONS[SEARCH]


class MemoryRememberTool(_MemoryTool, Component[MemoryToolConfig]):
    """Store a fact in shared memory; returns the new (or reinforced) fact's id."""

    component_provider_override = "autogen_shared_memory.MemoryRememberTool"
    _args = RememberArgs
    _tool_name = REMEMBER
    _tool_description = DESCRIPTIONS[REMEMBER]


class MemoryForgetTool(_MemoryTool, Component[MemoryToolConfig]):
    """Tombstone a fact by id (soft delete, kept for audit)."""

    component_provider_override = "autogen_shared_memory.MemoryForgetTool"
    _args = ForgetArgs
    _tool_name = FORGET
    _tool_description = DESCRIPTIONS[FORGET]


def memory_tools(
    store: FactStore, agent_id: str, group_id: str | None = None, *, record_calls: bool = False
) -> list[_MemoryTool]:
    """The three memory tools bound to ``agent_id`` (and ``group_id``).

    With ``record_calls`` each call is also logged in the agent's tool history (for loops that do not run
    through a recording runtime; tools attached to agentchat agents are recorded from the runtime's events).
    """
    classes = (MemorySearchTool, MemoryRememberTool, MemoryForgetTool)
    return [cls(store, agent_id, group_id, record_calls=record_calls) for cls in classes]
