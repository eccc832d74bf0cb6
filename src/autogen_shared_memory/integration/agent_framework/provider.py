"""``SharedMemoryContextProvider``: shared memory for a Microsoft Agent Framework agent, run by run.

A MAF ``ContextProvider`` is called around every ``agent.run``: ``before_run`` may add tools,
instructions and messages to the run's :class:`~agent_framework.SessionContext`, ``after_run`` sees the
response. This one gives the agent that runs with it:

* the three memory tools (``memory_search``, ``memory_remember``, ``memory_forget``), bound to the running
  agent's identity and the provider's group. The identity is the agent's name (``agent.name``, else
  ``agent.id``) qualified by the group (``launch:writer``: unrelated teams whose agents have the same names
  never share a private scope), or the id ``agent_ids`` maps the name to, or, for a provider without a
  group, the bare name. It is taken from the agent object by trusted code, never from the model's
  arguments; every call goes through :class:`~autogen_shared_memory.integration.toolkit.BoundTools`, so a
  refused or invalid call answers ``DENIED:`` / ``ERROR:`` text to the model (MAF itself would only say
  "Error: Function failed.");
* the scaffolding, appended to the agent's instructions;
* optionally a capsule of the facts relevant to the latest message (``recall=True``, always in the
  read-only ``mode="recall"``, which adds no tools);
* in ``after_run``, the run's messages and memory tool calls in the agent's records
  (``store.conversation(agent)``, ``store.tool_history(agent)``); a record that cannot be written is
  logged, never raised.

One provider may serve several agents (each gets tools bound to its own identity). Two shared-memory
providers on one agent do not both act: the first one of a run claims it, the others stay out of that run
(two tools with one name would make MAF fail the run).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from agent_framework import AgentSession, ContextProvider, FunctionTool, Message, SessionContext, SupportsAgentRun
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...core.capsule import MIN_CAPSULE_BYTES
from ...core.records import ConversationRecord, Record, ToolCallRecord, bounded_text, storable, storable_text
from ...core.types import validate_owner_id
from ...facts import FactStore, as_engine
from ..toolkit import (
    ARGS,
    CAPSULE_PREAMBLE,
    DEFAULT_SCAFFOLDING,
    DESCRIPTIONS,
    FAILURE_PREFIXES,
    READ_ONLY_SCAFFOLDING,
    TOOL_NAMES,
    BoundTools,
    Recall,
    json_kind,
    not_an_object,
    register_agent,
    team_identity,
)

logger = logging.getLogger("autogen_shared_memory")

DEFAULT_SOURCE_ID = "shared_memory"
_CLAIM = "autogen_shared_memory.provider"  # SessionContext.metadata key: the provider acting in this run


def agent_identity(agent: Any) -> str:
    """The memory identity of a MAF agent: its name, else its id (trusted code reads it from the agent object;
    a model never chooses it). Raises ``ValueError`` / ``TypeError`` for an id the store cannot own."""
    name = getattr(agent, "name", None)
    identity = name if isinstance(name, str) and name.strip() else getattr(agent, "id", None)
    return validate_owner_id(identity, "agent name")


class MemoryTool(FunctionTool):
    """One memory tool as a MAF ``FunctionTool``, bound to a :class:`BoundTools` (one agent, one group).

    The JSON schema the model sees is the tool's argument model (``SearchArgs``, ``RememberArgs``,
    ``ForgetArgs``). The raw arguments are not validated by MAF but handed to :meth:`BoundTools.call`, which
    validates them once and answers ``ERROR:`` text naming the bad field (MAF would answer only "Error:
    Argument parsing failed."), an argument outside the schema (an ``agent_id``, say) included; arguments
    MAF could not read as a JSON object answer so.
    """

    def __init__(self, bound: BoundTools, name: str) -> None:
        if name not in ARGS:
            raise ValueError(f"no memory tool is named {name!r}; the tools are {', '.join(TOOL_NAMES)}")

        async def invoke(arguments: Mapping[str, Any]) -> str:
            if set(arguments) == {"raw"}:  # no memory tool has "raw": MAF's (or our) stand-in for non-objects
                raw = arguments["raw"]
                return not_an_object(name, "text that is not JSON" if isinstance(raw, str) else json_kind(raw))
            return await bound.call(name, arguments)

        super().__init__(
            name=name,
            description=DESCRIPTIONS[name],
            approval_mode="never_require",
            func=invoke,
            input_model=ARGS[name],
            additional_properties={},
        )
        self.bound = bound

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        """MAF calls ``tool(**arguments)``: the model's keys travel on as one mapping, so that one named
        ``self`` (or anything else) reaches validation instead of breaking the call."""
        return super().__call__(kwargs)

    def _prepare_arguments(self, arguments: BaseModel | Mapping[str, Any] | None) -> dict[str, Any]:
        # MAF validates here against the input model before calling the function; BoundTools.call validates
        # instead, so that a bad argument gets the same ERROR: text in every framework.
        if arguments is None:
            return {}
        if isinstance(arguments, BaseModel):
            return arguments.model_dump()
        if isinstance(arguments, Mapping):
            return {str(key): value for key, value in arguments.items()}
        return {"raw": arguments}


def memory_tools(bound: BoundTools) -> list[MemoryTool]:
    """``memory_search``, ``memory_remember`` and ``memory_forget`` as MAF tools bound like ``bound``."""
    return [MemoryTool(bound, name) for name in TOOL_NAMES]


class SharedMemoryProviderConfig(BaseModel):
    """The options of a :class:`SharedMemoryContextProvider` (``store.context_provider(**options)``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group_id: str | None = None
    agent_ids: dict[str, str] | None = None  # explicit memory ids by agent name (default: group_id:name)
    mode: Literal["tools", "recall"] = "tools"  # "recall": read-only, no tools, a capsule every run
    recall: bool | None = None  # inject a capsule for the latest message; default: only in mode "recall"
    top_k: int = Field(5, ge=1, le=20)
    max_capsule_bytes: int = Field(1024, ge=MIN_CAPSULE_BYTES, le=16384)
    record: bool = True  # the run's messages and memory tool calls into the agent's records
    record_tools: Literal["memory", "all"] = "memory"  # which tool calls of a run are recorded
    scaffolding: str | None = None  # replaces DEFAULT_SCAFFOLDING / READ_ONLY_SCAFFOLDING
    source_id: str = DEFAULT_SOURCE_ID

    @field_validator("group_id")
    @classmethod
    def _owner_id(cls, value: str | None) -> str | None:
        return None if value is None else team_identity(value, ())[0]

    @field_validator("agent_ids")
    @classmethod
    def _agent_ids(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for name, agent_id in (value or {}).items():
            validate_owner_id(name, "agent name")
            validate_owner_id(agent_id, f"agent_ids[{name!r}]")
        return value

    def agent_id(self, name: str) -> str:
        """The memory identity of the agent called ``name`` (see the module docstring)."""
        if self.agent_ids and name in self.agent_ids:
            return self.agent_ids[name]
        if self.group_id is None:
            return name
        return team_identity(self.group_id, [name])[1][name]

    @property
    def injects_capsule(self) -> bool:
        return self.mode == "recall" if self.recall is None else self.recall


class _Bound:
    """What the provider made for one agent identity: its tools and its recall (made once, reused every run,
    so MAF sees the same tool objects and never a duplicate name)."""

    def __init__(self, store: FactStore, agent_id: str, config: SharedMemoryProviderConfig) -> None:
        self.bound = BoundTools(store, agent_id, config.group_id)
        self.tools = memory_tools(self.bound) if config.mode == "tools" else []
        self.recall = Recall(store, agent_id, config.group_id, top_k=config.top_k, max_bytes=config.max_capsule_bytes)
        self.enrolled = False


class SharedMemoryContextProvider(ContextProvider):
    """Shared memory for the MAF agents that run with this provider (see the module docstring).

    ``store`` is the neutral :class:`~autogen_shared_memory.facts.FactStore` (a ``SharedMemoryStore`` is
    one); ``group_id`` the team scope its agents share (``None``: agent and global scopes only). The first
    run of each agent enrols it in the group and in the agent directory (trusted code put the provider on the
    agent; a model cannot).
    """

    def __init__(
        self,
        store: FactStore,
        group_id: str | None = None,
        *,
        agent_ids: Mapping[str, str] | None = None,
        mode: Literal["tools", "recall"] = "tools",
        recall: bool | None = None,
        top_k: int = 5,
        max_capsule_bytes: int = 1024,
        record: bool = True,
        record_tools: Literal["memory", "all"] = "memory",
        scaffolding: str | None = None,
        source_id: str = DEFAULT_SOURCE_ID,
    ) -> None:
        self.config = SharedMemoryProviderConfig(
            group_id=group_id,
            agent_ids=dict(agent_ids) if agent_ids is not None else None,
            mode=mode,
            recall=recall,
            top_k=top_k,
            max_capsule_bytes=max_capsule_bytes,
            record=record,
            record_tools=record_tools,
            scaffolding=scaffolding,
            source_id=source_id,
        )
        super().__init__(self.config.source_id)
        self.store = as_engine(store)
        self._agents: dict[str, _Bound] = {}
        self._warned_twice = False

    @property
    def group_id(self) -> str | None:
        return self.config.group_id

    @property
    def mode(self) -> Literal["tools", "recall"]:
        return self.config.mode

    @property
    def scaffolding(self) -> str:
        if self.config.scaffolding is not None:
            return self.config.scaffolding
        return DEFAULT_SCAFFOLDING if self.config.mode == "tools" else READ_ONLY_SCAFFOLDING

    def agent_id_of(self, agent: Any) -> str:
        """The memory identity this provider gives ``agent`` (its name qualified by the group, or mapped)."""
        return self.config.agent_id(agent_identity(agent))

    def tools_for(self, agent: Any) -> list[MemoryTool]:
        """The tools this provider gives ``agent`` (the same objects on every run)."""
        return self._bound(self.agent_id_of(agent)).tools

    def _bound(self, agent_id: str) -> _Bound:
        found = self._agents.get(agent_id)
        if found is None:
            found = self._agents[agent_id] = _Bound(self.store, agent_id, self.config)
        return found

    async def _enrol(self, agent: Any, agent_id: str, bound: _Bound) -> None:
        """Group membership and the directory entry, once per agent (a later policy change is not undone)."""
        if bound.enrolled:
            return
        if self.config.group_id is not None:
            await self.store.aadd_group_member(self.config.group_id, agent_id)
        tools = list(TOOL_NAMES) if bound.tools else []
        await asyncio.to_thread(register_agent, self.store, agent_id, getattr(agent, "description", None), None, tools)
        bound.enrolled = True

    # ------------------------------------------------------------------ the two hooks
    async def before_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Add the tools, the scaffolding and (with recall) the capsule for the latest message."""
        claimed = context.metadata.get(_CLAIM)
        if claimed is not None and claimed is not self:
            if not self._warned_twice:
                logger.warning(
                    "agent %r has two shared memory providers; only the first one acts in a run",
                    getattr(agent, "name", None),
                )
                self._warned_twice = True
            return
        agent_id = self.agent_id_of(agent)
        bound = self._bound(agent_id)
        _check_no_foreign_tool(agent, context, agent_id, self, adds_tools=bool(bound.tools))
        context.metadata[_CLAIM] = self
        try:
            await self._enrol(agent, agent_id, bound)
        except Exception:  # memory is context, not the task: the tools answer for themselves (ERROR: text)
            logger.warning(
                "shared memory could not enrol %r (directory, group); retried next run", agent_id, exc_info=True
            )
        if bound.tools:
            context.extend_tools(self.source_id, bound.tools)
        context.extend_instructions(self.source_id, self.scaffolding)
        if self.config.injects_capsule:
            try:
                _, text = await bound.recall(_latest_text(context.input_messages))
            except Exception:  # memory is context, not the task: the run goes on without a capsule
                logger.warning("shared memory recall failed for %r; no capsule this run", agent_id, exc_info=True)
                text = ""
            if text:
                context.extend_messages(self, [Message(role="user", contents=[text])])

    async def after_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Record the run's messages and its memory tool calls in the agent's records (failures are logged)."""
        if not self.config.record or context.metadata.get(_CLAIM) is not self:
            return
        try:
            agent_id = self.agent_id_of(agent)
            response = context.response.messages if context.response is not None else []
            records = list(
                run_records(
                    self.store,
                    agent_id,
                    context.input_messages,
                    response,
                    session_id=getattr(session, "session_id", None),
                    all_tools=self.config.record_tools == "all",
                )
            )
            if records:
                await self.store.alog_records(records)
        except Exception:  # the run's answer stands; a record that cannot be written is logged
            logger.warning("could not record a run of %r in shared memory", getattr(agent, "name", None), exc_info=True)


def _tool_name(tool: Any) -> str | None:
    if isinstance(tool, Mapping):
        function = tool.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
    else:
        name = getattr(tool, "name", None)
    return name if isinstance(name, str) else None


def foreign_binding(tool: MemoryTool, store: FactStore, agent_id: str, group_id: str | None) -> str | None:
    """Where a memory tool an agent holds is bound, if not to ``store``, ``agent_id`` and ``group_id``: such a
    tool would act as another agent (its private scope, its name on every write) or in another team."""
    bound = tool.bound
    if bound.store is not store:
        return "another store"
    if bound.group_id != group_id:
        return f"group {bound.group_id!r}"
    if bound.agent_id != agent_id:
        return f"agent {bound.agent_id!r}"
    return None


def foreign_tool_error(agent_name: str, where: str) -> ValueError:
    """The error that refuses an agent holding memory tools bound elsewhere (see :func:`foreign_binding`)."""
    return ValueError(
        f"agent {agent_name!r} holds shared memory tools bound to {where}: they would act as that agent or team. "
        "Give each agent only its own memory tools (attach, or store.context_provider(...)), not another's"
    )


def _check_no_foreign_tool(
    agent: Any, context: SessionContext, agent_id: str, provider: SharedMemoryContextProvider, *, adds_tools: bool
) -> None:
    """A tool of the agent (or of another provider) named like a memory tool would make MAF fail the run with
    "Duplicate tool name" (when ``adds_tools``): say which agent and tool instead. A memory tool bound to
    another agent, group or store than ``provider`` gives this agent is refused in every mode: the run would
    otherwise act as that agent."""
    options = getattr(agent, "default_options", None)
    agent_tools = options.get("tools") if isinstance(options, Mapping) else None
    for tool in [*(agent_tools or []), *context.tools]:
        name = _tool_name(tool)
        if isinstance(tool, MemoryTool):
            where = foreign_binding(tool, provider.store, agent_id, provider.group_id)
            if where is not None:
                raise foreign_tool_error(agent_identity(agent), where)
        elif name in TOOL_NAMES and adds_tools:
            raise ValueError(
                f"agent {agent_id!r} already has a tool named {name!r}: rename that tool or do not give this "
                "agent shared memory"
            )


def _latest_text(messages: Sequence[Message]) -> str:
    """The text a recall is about: the latest input message with text (the user's or another agent's)."""
    for message in reversed(messages):
        if _role(message) in ("user", "assistant"):
            text = message.text
            if text.strip() and not text.startswith(CAPSULE_PREAMBLE):
                return text
    return ""


def _role(message: Message) -> str:
    role = message.role
    return str(getattr(role, "value", role))


def _safe(text: str, what: str) -> str:
    """Model text as a record field: a NUL or unpaired surrogate as an escape (as every framework's records
    show it), cut to the record size limit."""
    return bounded_text(storable_text(text), what, truncate=True)


def _json_safe(value: Any) -> dict[str, Any]:
    """Tool arguments as a JSON object a record can hold (anything else kept as its text)."""
    try:  # measured as stored: a lone surrogate or a NUL as its escape
        text = json.dumps(storable(value), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return {"raw": _safe(repr(value), "tool arguments")}
    if len(text.encode("utf-8", "replace")) > 60_000 or not isinstance(value, dict):
        return {"raw": _safe(text, "tool arguments")}
    parsed: dict[str, Any] = json.loads(text)  # the record escapes what no backend stores alike
    return parsed


def _result_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, Iterable):
        texts = [getattr(item, "text", None) for item in result]
        if texts and all(isinstance(t, str) for t in texts):
            return "".join(t for t in texts if isinstance(t, str))
    return "" if result is None else str(result)


def run_records(
    store: FactStore,
    agent_id: str,
    inputs: Sequence[Message],
    response: Sequence[Message],
    *,
    session_id: str | None = None,
    all_tools: bool = False,
) -> Iterable[Record]:
    """The records of one run of ``agent_id``: the input messages it received and the messages it answered
    (text only), and its tool calls paired with their results (memory tools only unless ``all_tools``)."""
    ticks = itertools.count()
    started = time.time()

    def now() -> float:  # distinct, increasing times keep the run's order in every listing
        return started + next(ticks) * 1e-6

    context: dict[str, Any] = {"framework": "agent_framework"}
    if session_id:
        context["maf_session_id"] = session_id
    for direction, messages in (("in", inputs), ("out", response)):
        for message in messages:
            text = message.text
            if not text.strip():
                continue
            role = _role(message)
            author = message.author_name or (agent_id if direction == "out" else role)
            yield ConversationRecord(
                agent_id=agent_id,
                content=_safe(text, "message"),
                role=role,
                source=_safe(author, "source")[:128],
                session_id=store.session_id,
                context={**context, "direction": direction},
                created_at=now(),
            )
    calls: dict[str, Any] = {}
    for message in response:
        for content in message.contents:
            if content.type == "function_call" and content.call_id:
                calls[content.call_id] = content
            elif content.type == "function_result" and content.call_id in calls:
                call = calls.pop(content.call_id)
                name = call.name or "unknown"
                if not all_tools and name not in TOOL_NAMES:
                    continue
                try:
                    arguments: Any = call.parse_arguments() or {}
                except Exception:  # a malformed call is recorded as what the model sent
                    arguments = {"raw": str(call.arguments)}
                text = _result_text(content.result)
                failed = content.exception is not None or text.startswith(FAILURE_PREFIXES)
                yield ToolCallRecord(
                    agent_id=agent_id,
                    tool_name=name,
                    tool_args=_json_safe(arguments),
                    result=_safe(text, "tool result"),
                    success=not failed,
                    error=_safe(str(content.exception or text), "tool error")[:2000] if failed else None,
                    session_id=store.session_id,
                    call_id=_safe(content.call_id, "call id")[:128],
                    created_at=now(),
                )
