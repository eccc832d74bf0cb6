"""Attach a store to agentchat teams and agents: memory tools, prompt scaffolding, group membership.

``store.attach(team, group_id=...)`` walks the team (nested teams and ``SocietyOfMindAgent`` inner teams) and
gives every agent the memory it can use:

* an ``AssistantAgent`` whose model can call functions gets the three memory tools (in a workbench of
  their own) bound to its name and the group, and the scaffolding appended to its system message;
* an ``AssistantAgent`` whose model cannot call functions gets read-only recall through the ``Memory``
  protocol (a bounded capsule injected before each model call) and a read-only scaffolding, with a
  ``UserWarning`` saying so (a model client that does not declare ``function_calling`` is the usual cause);
* any other agent (``UserProxyAgent``, ``CodeExecutorAgent``, custom agents) becomes a group member, so
  the runtime recorder and trusted code can attribute its messages, but gets nothing injected.

The team is named by the caller (``group_id``), and each agent's memory identity is its name qualified by
that group (``launch:writer``) unless ``agent_ids`` maps it (see :func:`~..toolkit.team_identity`); a
recording runtime (``store.runtime_handler()``) records an attached team's agents under those identities.

This module is the AutoGen adapter (:class:`Adapter`); the generic :class:`~..attacher.Attacher` does what
every framework shares (unique names, the group, "bound elsewhere" checks, all or nothing, the undo
registry), so that ``detach`` removes exactly what attach added, and attaching twice changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autogen_agentchat.agents import AssistantAgent, SocietyOfMindAgent
from autogen_agentchat.base import ChatAgent, Team
from autogen_agentchat.teams import BaseGroupChat
from autogen_core.models import SystemMessage
from autogen_core.tools import StaticWorkbench

from ..attacher import AdapterBase, Binding, bound_elsewhere, private_attribute, set_private_attribute
from ..attacher import Attacher as GenericAttacher
from ..toolkit import DEFAULT_SCAFFOLDING, READ_ONLY_SCAFFOLDING, TOOL_NAMES, Mode, warn_recall_only
from .memory import SharedMemory, drop_capsules
from .tools import _MemoryTool, memory_tools

if TYPE_CHECKING:
    from ...facts import FactStore


@dataclass
class AgentAttachment:
    """What attach did to one agent (and what detach will undo)."""

    agent_name: str
    group_id: str | None
    mode: Mode
    agent_id: str = ""  # the agent's memory identity (its name qualified by the group, or mapped)
    workbench: StaticWorkbench | None = None
    memory: SharedMemory | None = None
    added_memory: bool = True  # False: the agent already had this store's view for it; detach leaves it
    added_workbench: bool = True  # False: the agent was built with these memory tools; detach leaves them
    original_system_messages: list[SystemMessage] | None = None


# The private attributes of agentchat objects attach reads or sets, one function each, written against
# autogen-agentchat 0.7.5 (autogen-core 0.7.5): agentchat has no public way to add a workbench, a memory or
# system messages to a built agent, nor to list a team's participants. A version without one of them fails
# with an error naming it, not with an AttributeError from the middle of an attach.
_WRITTEN_FOR = "autogen-agentchat 0.7.5"


def _participants(team: BaseGroupChat) -> list[ChatAgent | Team]:
    return list(private_attribute(team, "_participants", _WRITTEN_FOR))


def _inner_team(agent: SocietyOfMindAgent) -> Team:
    team: Team = private_attribute(agent, "_team", _WRITTEN_FOR)
    return team


def _team_id(team: BaseGroupChat) -> str:
    return str(private_attribute(team, "_team_id", _WRITTEN_FOR))


def _model_client(agent: AssistantAgent) -> Any:
    return private_attribute(agent, "_model_client", _WRITTEN_FOR)


def _tools(agent: AssistantAgent) -> list[Any]:
    return list(private_attribute(agent, "_tools", _WRITTEN_FOR))


def _handoff_tools(agent: AssistantAgent) -> list[Any]:
    return list(private_attribute(agent, "_handoff_tools", _WRITTEN_FOR))


def _workbench(agent: AssistantAgent) -> list[Any]:
    return list(private_attribute(agent, "_workbench", _WRITTEN_FOR))


def _set_workbench(agent: AssistantAgent, workbenches: list[Any]) -> None:
    set_private_attribute(agent, "_workbench", workbenches, _WRITTEN_FOR)


def _workbench_tools(wb: StaticWorkbench) -> list[Any]:
    return list(private_attribute(wb, "_tools", _WRITTEN_FOR))


def _memory(agent: AssistantAgent) -> list[Any] | None:
    memory: list[Any] | None = private_attribute(agent, "_memory", _WRITTEN_FOR)
    return memory


def _set_memory(agent: AssistantAgent, memory: list[Any] | None) -> None:
    set_private_attribute(agent, "_memory", memory, _WRITTEN_FOR)


def _system_messages(agent: AssistantAgent) -> list[SystemMessage]:
    return list(private_attribute(agent, "_system_messages", _WRITTEN_FOR))


def _set_system_messages(agent: AssistantAgent, messages: list[SystemMessage]) -> None:
    set_private_attribute(agent, "_system_messages", messages, _WRITTEN_FOR)


def _model_context(agent: AssistantAgent) -> Any:
    return private_attribute(agent, "_model_context", _WRITTEN_FOR)


def _configured_model(client: Any) -> Any:
    # autogen-ext 0.7.5's OpenAI clients keep their configuration in _raw_config; other clients have none,
    # and the directory entry then names the model family: optional, so no error when it is missing.
    config = getattr(client, "_raw_config", None)
    return config.get("model") if isinstance(config, Mapping) else None


def iter_agents(target: Any) -> Iterator[ChatAgent]:
    """Every agent inside a team (recursively) or the agent itself."""
    if isinstance(target, BaseGroupChat):
        for participant in _participants(target):
            yield from iter_agents(participant)
    elif isinstance(target, ChatAgent):
        yield target
        if isinstance(target, SocietyOfMindAgent):
            yield from iter_agents(_inner_team(target))
    elif isinstance(target, Team):
        raise TypeError(f"cannot look inside team type {type(target).__name__}; attach its agents one by one")
    else:
        raise TypeError(f"attach takes an agentchat team or agent, got {type(target).__name__}")


def _teams(target: Any) -> Iterator[BaseGroupChat]:
    """Every agentchat team inside ``target`` (itself, nested teams, ``SocietyOfMindAgent`` inner teams)."""
    if isinstance(target, BaseGroupChat):
        yield target
        for participant in _participants(target):
            yield from _teams(participant)
    elif isinstance(target, SocietyOfMindAgent):
        yield from _teams(_inner_team(target))


_TEAMS = "_autogen_team_agent_ids"  # store attribute: team id -> {agent name: memory id}, for the recorder


def team_agent_ids(store: FactStore, team_id: str) -> Mapping[str, str] | None:
    """The memory ids of the agents of the attached agentchat team whose runtime id is ``team_id``, by
    agent name (None for a team this store did not attach): how a recording runtime names them."""
    teams: dict[str, dict[str, str]] = store.__dict__.get(_TEAMS, {})
    return teams.get(team_id)


def _function_calling(agent: AssistantAgent) -> bool:
    return bool(_model_client(agent).model_info.get("function_calling", False))


def _existing_tool_names(agent: AssistantAgent) -> set[str]:
    names = {tool.name for tool in _tools(agent)} | {tool.name for tool in _handoff_tools(agent)}
    for wb in _workbench(agent):
        if isinstance(wb, StaticWorkbench) and not _is_memory_workbench(wb):
            names |= {tool.name for tool in _workbench_tools(wb)}
    return names


def _memory_binding(agent: Any) -> tuple[FactStore, str | None, str] | None:
    """The store, group and agent id the agent's memory tools (or recall view) are bound to, if it has
    them already."""
    if not isinstance(agent, AssistantAgent):
        return None
    for wb in _workbench(agent):
        if isinstance(wb, StaticWorkbench) and _is_memory_workbench(wb):
            tool = _workbench_tools(wb)[0]
            if isinstance(tool, _MemoryTool):
                return tool.store, tool.group_id, tool.agent_id
    for memory in _memory(agent) or []:
        if isinstance(memory, SharedMemory):
            return memory.store, memory.group_id, memory.agent_id
    return None


def _is_memory_workbench(wb: Any) -> bool:
    if not isinstance(wb, StaticWorkbench):
        return False
    tools = _workbench_tools(wb)
    return bool(tools) and all(isinstance(t, _MemoryTool) for t in tools)


def _with_scaffolding(messages: list[SystemMessage], text: str) -> list[SystemMessage]:
    """One system message at the start, the scaffolding appended (never a second system message)."""
    if not messages:
        return [SystemMessage(content=text)]
    first = messages[0]
    if isinstance(first.content, str) and text in first.content:
        return list(messages)
    return [SystemMessage(content=f"{first.content}\n\n{text}"), *messages[1:]]


class Adapter(AdapterBase[AgentAttachment]):
    """The AutoGen agentchat adapter: teams (nested ones and ``SocietyOfMindAgent`` inner teams included)
    and agents; an ``AssistantAgent`` gets a memory workbench or the ``Memory`` view, any other agent is a
    member."""

    @staticmethod
    def claims(target: Any) -> bool:
        """Whether ``target`` is an agentchat team or agent (or a list whose first item is).

        Args:
            target: anything given to ``store.attach``.

        Returns:
            True for agentchat objects.
        """
        first = target[0] if isinstance(target, (list, tuple)) and target else target
        return isinstance(first, (ChatAgent, Team))

    def agents(self, target: Any) -> list[Any]:
        return list(iter_agents(target))

    def check(self, agent: Any, binding: Binding) -> None:
        bound = _memory_binding(agent)
        where = bound_elsewhere(self.store, binding, bound) if bound is not None else None
        if where is not None:
            raise ValueError(
                f"agent {binding.name!r} already has shared memory bound to {where} (an agent loaded "
                "from a dumped, attached one, or attached to another store): detach it there first, or "
                "build it without the memory tools and memory view"
            )
        if isinstance(agent, AssistantAgent) and _function_calling(agent):
            clash = _existing_tool_names(agent) & set(TOOL_NAMES)
            if clash:
                raise ValueError(
                    f"agent {binding.name!r} already has a tool named {sorted(clash)[0]!r}: rename that "
                    "tool or do not attach shared memory to this agent"
                )

    def bind(self, agent: Any, binding: Binding) -> AgentAttachment:
        store, agent_id, group_id = self.store, binding.agent_id, binding.group_id
        if not isinstance(agent, AssistantAgent):
            return AgentAttachment(agent.name, group_id, "member", agent_id)
        original = _system_messages(agent)
        if _function_calling(agent):
            existing = next((wb for wb in _workbench(agent) if _is_memory_workbench(wb)), None)
            if existing is not None:  # e.g. an agent loaded from a dumped, already attached agent
                workbench = existing
            else:
                workbench = StaticWorkbench(list(memory_tools(store, agent_id, group_id)))
                _set_workbench(agent, [*_workbench(agent), workbench])
            _set_system_messages(agent, _with_scaffolding(original, binding.scaffolding or DEFAULT_SCAFFOLDING))
            return AgentAttachment(
                agent.name,
                group_id,
                "tools",
                agent_id,
                workbench=workbench,
                added_workbench=existing is None,
                original_system_messages=original,
            )
        warn_recall_only(
            agent.name,
            "does not declare function calling (model_info['function_calling'])",
            "declare it in the client's model_info if the model can call functions",
        )
        memory = next((m for m in _memory(agent) or [] if isinstance(m, SharedMemory)), None)
        added = memory is None  # one already there is bound to this store, group and agent (attach checked)
        if memory is None:
            memory = SharedMemory(store, agent_id, group_id)
            _set_memory(agent, [*(_memory(agent) or []), memory])
        read_only = binding.read_only_scaffolding or READ_ONLY_SCAFFOLDING
        _set_system_messages(agent, _with_scaffolding(original, read_only))
        return AgentAttachment(
            agent.name,
            group_id,
            "recall",
            agent_id,
            memory=memory,
            added_memory=added,
            original_system_messages=original,
        )

    def unbind(self, agent: Any, record: AgentAttachment) -> None:
        if not isinstance(agent, AssistantAgent):
            return
        if record.workbench is not None and record.added_workbench:
            _set_workbench(agent, [wb for wb in _workbench(agent) if wb is not record.workbench])
        memory = _memory(agent)
        if record.memory is not None and record.added_memory and memory:
            _set_memory(agent, [m for m in memory if m is not record.memory] or None)
            drop_capsules(_model_context(agent))
        if record.original_system_messages is not None:
            _set_system_messages(agent, record.original_system_messages)

    def describe(self, agent: Any, record: AgentAttachment) -> tuple[Any, Any, list[str]]:
        """The directory entry: description, model, the agent's own tools (the memory tools are implied)."""
        if not isinstance(agent, AssistantAgent):
            return agent.description, None, []
        tools = [t.name for t in (*_tools(agent), *_handoff_tools(agent))]
        client = _model_client(agent)
        model = str(_configured_model(client) or client.model_info.get("family") or "") or None
        return agent.description, model, tools

    def attached(self, target: Any, ids: Mapping[str, str]) -> None:
        """Name the agents of every team in ``target`` for a recording runtime as attach did."""
        teams: dict[str, dict[str, str]] = self.store.__dict__.setdefault(_TEAMS, {})
        for team in _teams(target):
            teams[_team_id(team)] = {a.name: ids[a.name] for a in iter_agents(team)}

    def detached(self, target: Any) -> None:
        teams: dict[str, dict[str, str]] = self.store.__dict__.get(_TEAMS, {})
        for team in _teams(target):
            teams.pop(_team_id(team), None)


class Attacher(GenericAttacher[AgentAttachment]):
    """The generic attacher with the AutoGen adapter (what ``store.attach`` uses for agentchat objects)."""

    def __init__(self, store: FactStore) -> None:
        super().__init__(store, Adapter(store))
