"""Runtime integration: a recording intervention handler and a memory service agent.

``SingleThreadedAgentRuntime(intervention_handlers=[store.runtime_handler()])`` records every message
each agent sends and every tool call (arguments, result, success, duration, error) into that agent's
file — for core-API agents and for agentchat teams run on the runtime alike. The agents of a team the store
attached are recorded under the memory ids attach gave them (``group:name``); a message of a source that is
not one of its agents (the task's ``user``) gets no agent file. An agentchat team that was not attached is
recorded by its agents' names, and its task by no one. The handler only converts
and enqueues: a background thread does the database writes, so the runtime's loop is never blocked,
and a failure of the recorder is logged and counted, never allowed to drop, delay or alter a message.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from autogen_agentchat.messages import BaseChatMessage, ThoughtEvent, ToolCallExecutionEvent, ToolCallRequestEvent
from autogen_agentchat.teams._group_chat._events import (
    GroupChatAgentResponse,
    GroupChatMessage,
    GroupChatStart,
)
from autogen_core import AgentId, DefaultInterventionHandler, FunctionCall, MessageContext, RoutedAgent
from autogen_core import message_handler as core_message_handler
from autogen_core.models import FunctionExecutionResult
from pydantic import BaseModel, ValidationError

from ...core.records import ConversationRecord, Record, ToolCallRecord, bounded_text
from ...core.types import MAX_ID_CHARS, validate_owner_id
from ...facts import as_engine
from ..toolkit import FAILURE_PREFIXES, ForgetArgs, RememberArgs, SearchArgs, invalid_arguments, recorded_by_tool
from ..writer import RecordWriter
from .attach import team_agent_ids
from .tools import memory_tools

if TYPE_CHECKING:
    from ...facts import FactStore

logger = logging.getLogger("autogen_shared_memory")


def agent_id_of(agent: AgentId) -> str:
    """The memory identity of a runtime agent: its type, plus its key unless that is ``default``."""
    return memory_id(agent.type if agent.key in ("default", "") else f"{agent.type}:{agent.key}")


def memory_id(name: str) -> str:
    """A runtime name as a memory agent id, one to one: ``%``, ``/``, ``\\`` and ``~`` percent-encoded (ids
    hold no path separator), and a name longer than an id may be cut with a hash of all of it after a ``~``
    (which no encoded name holds). ``alice/42`` and ``alice_42`` stay two agents."""
    encoded = "".join(_ESCAPES.get(ch, ch) for ch in name) if _NEEDS_ESCAPE.search(name) else name
    if len(encoded) <= MAX_ID_CHARS:
        return encoded
    digest = hashlib.sha256(encoded.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return f"{encoded[: MAX_ID_CHARS - 21]}~{digest}"


_ESCAPES = {"%": "%25", "/": "%2F", "\\": "%5C", "~": "%7E"}
_NEEDS_ESCAPE = re.compile(r"[%/\\~]")


def _text(message: Any) -> str:
    if isinstance(message, BaseChatMessage):
        return message.to_model_text()
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(message, BaseModel):
        return message.model_dump_json()
    if dataclasses.is_dataclass(message) and not isinstance(message, type):
        return json.dumps(dataclasses.asdict(message), default=str, ensure_ascii=False)
    return str(message)


def _ts(value: Any) -> float:
    return value.timestamp() if isinstance(value, datetime) else time.time()


class MemoryRecorder(DefaultInterventionHandler):
    """An intervention handler that records agents' messages and tool calls into their memory files."""

    def __init__(self, store: FactStore, *, session_id: str | None = None, max_pending: int = 100_000) -> None:
        self.store = as_engine(store)
        self.session_id = session_id or store.session_id
        self.task_id: str | None = None  # set it to tag what is recorded from now on with a task id
        self._unobserved = 0  # messages that could not be turned into records
        self._writer = RecordWriter(store, max_pending)
        self._seen: OrderedDict[str, None] = OrderedDict()  # message ids already recorded (relays repeat)
        # core-API tool calls in flight, by (asker, tool agent, call id): models repeat call ids
        self._calls: dict[tuple[str, str, str], tuple[str, FunctionCall, float]] = {}
        # autogen_core warns whenever a handler's on_response returns None, also when the response was None to
        # begin with (an RPC handler that returns nothing, as agentchat's do): this handler passes every
        # response through unchanged, so without the filter every such message would warn.
        warnings.filterwarnings(
            "ignore",
            message="Intervention handler on_response returned None",
            category=RuntimeWarning,
            module=r"autogen_core\._single_threaded_agent_runtime",
        )

    # ---------------------------------------------------------------- the runtime's hooks
    async def on_send(self, message: Any, *, message_context: MessageContext, recipient: AgentId) -> Any:
        self._safely(self._observe_direct, message, message_context.sender, recipient, None)
        return message

    async def on_publish(self, message: Any, *, message_context: MessageContext) -> Any:
        topic = message_context.topic_id
        self._safely(self._observe_direct, message, message_context.sender, None, topic.source if topic else None)
        return message

    async def on_response(self, message: Any, *, sender: AgentId, recipient: AgentId | None) -> Any:
        self._safely(self._observe_response, message, sender, recipient)
        return message

    def _safely(self, fn: Any, *args: Any) -> None:
        try:
            for record in fn(*args):
                self._writer.put(record)
        except Exception:  # never let the recorder break the runtime
            self._unobserved += 1
            logger.warning("shared memory recorder could not record a message", exc_info=True)

    @property
    def errors(self) -> int:
        """Messages that could not be recorded, and batches of records that could not be written."""
        return self._unobserved + self._writer.errors

    @property
    def recorded(self) -> int:
        return self._writer.recorded

    # ---------------------------------------------------------------- message -> records
    def _first_time(self, message_id: str | None) -> bool:
        if not message_id:
            return True
        if message_id in self._seen:
            return False
        self._seen[message_id] = None
        if len(self._seen) > 10_000:
            self._seen.popitem(last=False)
        return True

    def _team(self, *keys: str | None) -> Mapping[str, str] | None:
        """The memory ids of an attached agentchat team's agents, by name, if one of ``keys`` (the runtime
        keys of the messages' sender, recipient or topic: agentchat keys them by the team's id) is its id."""
        for key in keys:
            team = team_agent_ids(self.store, key) if key else None
            if team is not None:
                return team
        return None

    @staticmethod
    def _agent(source: str, team: Mapping[str, str] | None) -> str | None:
        """The memory id of a team message's ``source``: as attach named it, or None when the team was
        attached and ``source`` is none of its agents; the name itself for a team that was not attached."""
        if team is not None:
            return team.get(source)
        return validate_owner_id(memory_id(source) or "unknown", "source")

    def _chat_message(
        self, message: BaseChatMessage, role: str, context: dict[str, Any], team: Mapping[str, str] | None
    ) -> Iterable[Record]:
        agent = self._agent(message.source, team)
        if agent is None or not self._first_time(message.id):
            return
        yield ConversationRecord(
            agent_id=agent,
            content=bounded_text(_text(message), "message", truncate=True),
            role=role,
            source=message.source,
            session_id=self.session_id,
            task_id=self.task_id,
            context={"type": type(message).__name__, **context},
            created_at=_ts(message.created_at),
        )

    def _inner_events(self, events: Iterable[Any], team: Mapping[str, str] | None) -> Iterable[Record]:
        """An agentchat agent's inner events: its tool calls, and the text a model sent with them."""
        requests: dict[str, tuple[FunctionCall | None, float | None, str]] = {}
        events = list(events)
        for i, event in enumerate(events):
            agent = self._agent(event.source, team)
            if agent is None:
                continue
            if (
                isinstance(event, ThoughtEvent)
                and isinstance(events[i + 1] if i + 1 < len(events) else None, ToolCallRequestEvent)
                and self._first_time(event.id)
                and event.content.strip()
            ):  # sent with tool calls; a thought before a plain answer is the model's hidden reasoning
                yield ConversationRecord(
                    agent_id=agent,
                    content=bounded_text(event.content, "message", truncate=True),
                    role="assistant",
                    source=event.source,
                    session_id=self.session_id,
                    task_id=self.task_id,
                    context={"type": "ThoughtEvent"},
                    created_at=_ts(event.created_at),
                )
            elif isinstance(event, ToolCallRequestEvent):
                for request in event.content:
                    requests[request.id] = (request, _ts(event.created_at), event.source)
            elif isinstance(event, ToolCallExecutionEvent):
                for result in event.content:
                    call, started, source = requests.get(result.call_id, (None, None, event.source))
                    asker = self._agent(source, team)
                    if asker is not None and not recorded_by_tool(self.store, asker, result.name, result.call_id):
                        yield self._tool_record(asker, result, call, started, _ts(event.created_at))

    def _tool_record(
        self,
        agent: str,
        result: FunctionExecutionResult,
        call: FunctionCall | None,
        started: float | None,
        ended: float,
    ) -> ToolCallRecord:
        try:
            args = json.loads(call.arguments) if call is not None else {}
        except (TypeError, ValueError):
            args = {"raw": call.arguments if call is not None else None}
        return ToolCallRecord(
            agent_id=agent,
            tool_name=result.name or (call.name if call is not None else "unknown"),
            tool_args=args if isinstance(args, dict) else {"value": args},
            result=bounded_text(result.content, "tool result", truncate=True),
            success=not result.is_error and not result.content.startswith(FAILURE_PREFIXES),
            duration_ms=None if started is None else max(0.0, (ended - started) * 1000.0),
            error=result.content[:2000] if result.is_error else None,
            session_id=self.session_id,
            task_id=self.task_id,
            call_id=result.call_id,
            created_at=ended,
        )

    def _observe_direct(
        self, message: Any, sender: AgentId | None, recipient: AgentId | None, topic_source: str | None
    ) -> Iterable[Record]:
        team = None
        if type(message).__module__.startswith("autogen_agentchat"):
            team = self._team(sender.key if sender else None, recipient.key if recipient else None, topic_source)
        if isinstance(message, GroupChatAgentResponse):
            response = message.response
            yield from self._inner_events(response.inner_messages or [], team)
            yield from self._chat_message(response.chat_message, "assistant", {"team_agent": message.name}, team)
        elif isinstance(message, GroupChatStart):
            for task in message.messages or []:  # recorded only when an agent of an attached team set it
                if team is not None:
                    yield from self._chat_message(task, "user", {"event": "task"}, team)
        elif isinstance(message, GroupChatMessage):
            if isinstance(message.message, BaseChatMessage):
                yield from self._chat_message(message.message, "assistant", {"event": "relay"}, team)
        elif type(message).__module__.startswith("autogen_agentchat"):
            return  # the group chat's own control messages (request to speak, reset, termination...)
        elif sender is not None:
            agent = agent_id_of(sender)
            if isinstance(message, FunctionCall):  # core API: a tool call sent to a tool agent
                self._calls[(agent, str(recipient), message.id)] = (agent, message, time.time())
                return
            context = {"type": type(message).__name__}
            if recipient is not None:
                context["recipient"] = f"{recipient.type}/{recipient.key}"
            yield ConversationRecord(
                agent_id=agent,
                content=bounded_text(_text(message), "message", truncate=True),
                role="assistant",
                source=agent,
                session_id=self.session_id,
                context=context,
            )

    def _observe_response(self, message: Any, sender: AgentId, recipient: AgentId | None) -> Iterable[Record]:
        key = (agent_id_of(recipient) if recipient is not None else "", str(sender), getattr(message, "call_id", ""))
        if isinstance(message, FunctionExecutionResult) and key in self._calls:
            agent, call, started = self._calls.pop(key)
            if not recorded_by_tool(self.store, agent, call.name, call.id):  # tools_for's record their calls
                yield self._tool_record(agent, message, call, started, time.time())
        elif message is not None:
            yield ConversationRecord(
                agent_id=agent_id_of(sender),
                content=bounded_text(_text(message), "message", truncate=True),
                role="assistant",
                source=agent_id_of(sender),
                session_id=self.session_id,
                context={"type": type(message).__name__, "response": True},
            )

    # ---------------------------------------------------------------- the writer thread
    def flush(self, timeout: float = 30.0) -> bool:
        """Block until every record observed so far is written (for tests and shutdown); False if some were
        still pending when ``timeout`` ran out."""
        return self._writer.flush(timeout)

    async def aflush(self, timeout: float = 30.0) -> bool:
        return await self._writer.aflush(timeout)

    def close(self) -> None:
        """Write what is pending and stop the writer thread."""
        self._writer.close()


# ------------------------------------------------------------------------- the memory service agent
@dataclass
class RememberRequest:
    fact: str
    scope: str
    group_id: str | None = None
    confidence: float = 1.0
    ttl_days: float | None = None
    tags: list[str] | None = None
    supersedes: list[str] | None = None


@dataclass
class SearchRequest:
    query: str
    scope: str = "all"
    group_id: str | None = None
    top_k: int = 5
    max_capsule_bytes: int = 2048


@dataclass
class ForgetRequest:
    fact_id: str
    reason: str | None = None
    group_id: str | None = None


@dataclass
class MemoryReply:
    """The service's answer: the same text the matching memory tool would return to a model."""

    text: str
    ok: bool


ArgsT = TypeVar("ArgsT", bound=BaseModel)


def _arguments(model: type[ArgsT], request: Any) -> ArgsT:
    """A request's tool arguments (its ``group_id`` is where the service acts, not an argument)."""
    return model.model_validate({k: v for k, v in dataclasses.asdict(request).items() if k != "group_id"})


class MemoryServiceAgent(RoutedAgent):
    """Answers remember/search/forget messages for core-API agents.

    The caller's identity is the runtime's sender (``ctx.sender``), never a field of the message; the
    group named in a request is subject to the membership policy.
    """

    def __init__(self, store: FactStore) -> None:
        super().__init__("Shared memory service: remember, search and forget facts.")
        self.store = as_engine(store)

    async def _call(self, request: Any, ctx: MessageContext, tool_index: int, make_args: Any) -> MemoryReply:
        if ctx.sender is None:
            return MemoryReply("ERROR: the memory service needs a sending agent (its identity)", False)
        try:
            args = make_args()
            tool = memory_tools(self.store, agent_id_of(ctx.sender), request.group_id)[tool_index]
        except ValidationError as exc:
            return MemoryReply(invalid_arguments(exc), False)
        except (ValueError, TypeError) as exc:
            return MemoryReply(f"ERROR: invalid request: {exc}", False)
        text = await tool.run(args, ctx.cancellation_token)
        return MemoryReply(str(text), not str(text).startswith(FAILURE_PREFIXES))

    @core_message_handler
    async def on_search(self, message: SearchRequest, ctx: MessageContext) -> MemoryReply:
        return await self._call(message, ctx, 0, lambda: _arguments(SearchArgs, message))

    @core_message_handler
    async def on_remember(self, message: RememberRequest, ctx: MessageContext) -> MemoryReply:
        return await self._call(message, ctx, 1, lambda: _arguments(RememberArgs, message))

    @core_message_handler
    async def on_forget(self, message: ForgetRequest, ctx: MessageContext) -> MemoryReply:
        return await self._call(message, ctx, 2, lambda: _arguments(ForgetArgs, message))
