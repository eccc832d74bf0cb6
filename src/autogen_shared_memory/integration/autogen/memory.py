"""``SharedMemory``: the store seen through AutoGen's ``Memory`` protocol, bound to one agent and group.

For ``AssistantAgent(memory=[...])`` and for agents that cannot call tools: before each model call,
``update_context`` recalls the facts relevant to the latest message and injects them as one bounded
capsule — never the whole store.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from autogen_core import CancellationToken, Component, ComponentModel
from autogen_core.memory import Memory, MemoryContent, MemoryMimeType, MemoryQueryResult, UpdateContextResult
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import AssistantMessage, FunctionExecutionResultMessage, SystemMessage, UserMessage
from pydantic import BaseModel, Field
from typing_extensions import Self

from ...core.capsule import MIN_CAPSULE_BYTES
from ...core.types import Hit, ScopeKind, ScopeName, validate_owner_id
from ...facts import FactStore, as_engine
from ..toolkit import CAPSULE_PREAMBLE, Recall
from .tools import load_store, store_component

logger = logging.getLogger("autogen_shared_memory")


class SharedMemoryConfig(BaseModel):
    """Declarative config of a :class:`SharedMemory` view."""

    store: ComponentModel
    agent_id: str
    group_id: str | None = None
    name: str | None = None
    write_scope: Literal["agent", "group", "global"] = "agent"
    recall_scope: Literal["all", "agent", "group", "global"] = "all"
    top_k: int = Field(5, ge=1, le=50)
    max_capsule_bytes: int = Field(1024, ge=MIN_CAPSULE_BYTES, le=65536)
    context_role: Literal["user", "system"] = "user"


def _text(content: MemoryContent | str) -> str:
    if isinstance(content, str):
        return content
    value = content.content
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    raise TypeError(f"shared memory stores text and JSON, not {type(value).__name__} ({content.mime_type})")


def _is_capsule(message: Any) -> bool:
    """A capsule this view injected (as a system or user message)."""
    return (
        isinstance(message, (SystemMessage, UserMessage))
        and isinstance(message.content, str)
        and message.content.startswith(CAPSULE_PREAMBLE)
    )


def drop_capsules(model_context: Any) -> None:
    """Remove injected capsules from a model context's messages in place (on detach: what was recalled for
    the group must not stay in the agent's context). Best effort: a context without a message list is left."""
    messages = getattr(model_context, "_messages", None)
    if isinstance(messages, list):
        messages[:] = [m for m in messages if not _is_capsule(m)]


def _without_stale_capsules(messages: list[Any], own: str) -> list[Any]:
    """``messages`` without the capsules of earlier turns (a message follows them) and without this view's
    own last one; a capsule at the end that another memory view of the agent added this turn stays."""
    last = max((i for i, m in enumerate(messages) if not _is_capsule(m)), default=-1)
    return [m for i, m in enumerate(messages) if not (_is_capsule(m) and (i < last or m.content == own))]


def _latest_text(messages: list[Any]) -> str:
    """The text of the latest message a recall should be about (user, assistant or tool result)."""
    for message in reversed(messages):
        if isinstance(message, (UserMessage, AssistantMessage)) and isinstance(message.content, str):
            if message.content.startswith(CAPSULE_PREAMBLE):
                continue  # our own injected capsule
            return message.content
        if isinstance(message, UserMessage) and isinstance(message.content, list):
            parts = [p for p in message.content if isinstance(p, str)]
            if parts:
                return " ".join(parts)
        if isinstance(message, FunctionExecutionResultMessage):
            return " ".join(r.content for r in message.content)
    return ""


class SharedMemory(Memory, Component[SharedMemoryConfig]):
    """A :class:`SharedMemoryStore` as an AutoGen ``Memory``, bound to ``agent_id`` and ``group_id``.

    * ``add`` remembers text (or JSON) in ``write_scope`` as this agent (policy applies).
    * ``query`` runs hybrid recall over ``recall_scope``; results carry id, scope and score metadata.
    * ``update_context`` injects a capsule of at most ``max_capsule_bytes`` for the latest message, as a
      user-role message by default (every model client accepts one; some reject a second system message
      in the middle of a context).
    * ``clear`` tombstones this agent's facts in ``write_scope`` (nothing is physically deleted).
    * ``close`` releases nothing: the store is shared with other agents (close the store itself).
    """

    component_type = "memory"
    component_provider_override = "autogen_shared_memory.SharedMemory"
    component_config_schema = SharedMemoryConfig

    def __init__(
        self,
        store: FactStore,
        agent_id: str,
        group_id: str | None = None,
        *,
        name: str | None = None,
        write_scope: ScopeKind = "agent",
        recall_scope: ScopeName = "all",
        top_k: int = 5,
        max_capsule_bytes: int = 1024,
        context_role: Literal["user", "system"] = "user",
    ) -> None:
        self.store = as_engine(store)
        self._config = SharedMemoryConfig(  # the store's own config is filled in when dumped
            store=ComponentModel(provider="", config={}),
            agent_id=validate_owner_id(agent_id, "agent_id"),
            group_id=None if group_id is None else validate_owner_id(group_id, "group_id"),
            name=name,
            write_scope=write_scope,
            recall_scope=recall_scope,
            top_k=top_k,
            max_capsule_bytes=max_capsule_bytes,
            context_role=context_role,
        )
        self._injected = ""  # the capsule this view added last (another view's, added this turn, stays)
        self._recall = Recall(
            store,
            self._config.agent_id,
            self._config.group_id,
            recall_scope,
            top_k=top_k,
            max_bytes=max_capsule_bytes,
        )

    @property
    def name(self) -> str:
        return self._config.name or f"shared_memory:{self.agent_id}"

    @property
    def agent_id(self) -> str:
        return self._config.agent_id

    @property
    def group_id(self) -> str | None:
        return self._config.group_id

    def _to_config(self) -> SharedMemoryConfig:
        return self._config.model_copy(update={"store": store_component(self.store)}, deep=True)

    @classmethod
    def _from_config(cls, config: SharedMemoryConfig) -> Self:
        return cls(
            load_store(config.store),
            config.agent_id,
            config.group_id,
            name=config.name,
            write_scope=config.write_scope,
            recall_scope=config.recall_scope,
            top_k=config.top_k,
            max_capsule_bytes=config.max_capsule_bytes,
            context_role=config.context_role,
        )

    @staticmethod
    def _content(hit: Hit) -> MemoryContent:
        fact = hit.fact
        return MemoryContent(
            content=fact.content,
            mime_type=MemoryMimeType.TEXT,
            metadata={
                "id": fact.id,
                "scope": str(fact.scope),
                "created_by": fact.created_by,
                "created_at": fact.created_at,
                "confidence": fact.confidence,
                "score": hit.score,
            },
        )

    async def update_context(self, model_context: ChatCompletionContext) -> UpdateContextResult:
        messages = await model_context.get_messages()
        hits, text = await self._recall(_latest_text(messages))
        kept = _without_stale_capsules(messages, self._injected)
        if len(kept) < len(messages):  # the last turn's capsule goes: one capsule, about the latest message
            await model_context.clear()
            for kept_message in kept:
                await model_context.add_message(kept_message)
        if text:
            message = (
                SystemMessage(content=text)
                if self._config.context_role == "system"
                else UserMessage(content=text, source="shared_memory")
            )
            await model_context.add_message(message)
        self._injected = text
        return UpdateContextResult(memories=MemoryQueryResult(results=[self._content(h) for h in hits]))

    async def query(
        self, query: str | MemoryContent, cancellation_token: CancellationToken | None = None, **kwargs: Any
    ) -> MemoryQueryResult:
        c = self._config
        hits = await self.store.asearch(
            _text(query), c.recall_scope, agent_id=c.agent_id, group_id=c.group_id, top_k=kwargs.get("top_k") or c.top_k
        )
        return MemoryQueryResult(results=[self._content(h) for h in hits])

    async def add(self, content: MemoryContent, cancellation_token: CancellationToken | None = None) -> None:
        metadata = dict(content.metadata or {})
        await self.store.aremember(
            _text(content),
            self._config.write_scope,
            agent_id=self.agent_id,
            group_id=self.group_id,
            metadata={**metadata, "mime_type": str(getattr(content.mime_type, "value", content.mime_type))},
        )

    async def clear(self) -> None:
        await self.store.aforget_all(
            self._config.write_scope,
            agent_id=self.agent_id,
            group_id=self.group_id,
            reason=f"Memory.clear() by {self.agent_id}",
        )

    async def close(self) -> None:
        return None
