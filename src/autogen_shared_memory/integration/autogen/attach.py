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

Everything attach adds is recorded so that ``detach`` removes exactly that, and attaching twice changes
nothing.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autogen_agentchat.agents import AssistantAgent, SocietyOfMindAgent
from autogen_agentchat.base import ChatAgent, Team
from autogen_agentchat.teams import BaseGroupChat
from autogen_core.models import SystemMessage
from autogen_core.tools import StaticWorkbench

from ...facts import as_engine
from ..toolkit import (
    DEFAULT_SCAFFOLDING,
    READ_ONLY_SCAFFOLDING,
    TOOL_NAMES,
    Attachment,
    Mode,
    join_group,
    register_agent,
    team_identity,
    warn_recall_only,
)
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


def iter_agents(target: Any) -> Iterator[ChatAgent]:
    """Every agent inside a team (recursively) or the agent itself."""
    if isinstance(target, BaseGroupChat):
        for participant in target._participants:
            yield from iter_agents(participant)
    elif isinstance(target, ChatAgent):
        yield target
        if isinstance(target, SocietyOfMindAgent):
            yield from iter_agents(target._team)
    elif isinstance(target, Team):
        raise TypeError(f"cannot look inside team type {type(target).__name__}; attach its agents one by one")
    else:
        raise TypeError(f"attach takes an agentchat team or agent, got {type(target).__name__}")


def _teams(target: Any) -> Iterator[BaseGroupChat]:
    """Every agentchat team inside ``target`` (itself, nested teams, ``SocietyOfMindAgent`` inner teams)."""
    if isinstance(target, BaseGroupChat):
        yield target
        for participant in target._participants:
            yield from _teams(participant)
    elif isinstance(target, SocietyOfMindAgent):
        yield from _teams(target._team)


_TEAMS = "_autogen_team_agent_ids"  # store attribute: team id -> {agent name: memory id}, for the recorder


def team_agent_ids(store: FactStore, team_id: str) -> Mapping[str, str] | None:
    """The memory ids of the agents of the attached agentchat team whose runtime id is ``team_id``, by
    agent name (None for a team this store did not attach): how a recording runtime names them."""
    teams: dict[str, dict[str, str]] = store.__dict__.get(_TEAMS, {})
    return teams.get(team_id)


def _function_calling(agent: AssistantAgent) -> bool:
    return bool(agent._model_client.model_info.get("function_calling", False))


def _existing_tool_names(agent: AssistantAgent) -> set[str]:
    names = {tool.name for tool in agent._tools} | {tool.name for tool in agent._handoff_tools}
    for wb in agent._workbench:
        if isinstance(wb, StaticWorkbench) and not _is_memory_workbench(wb):
            names |= {tool.name for tool in wb._tools}
    return names


def _memory_binding(agent: Any) -> tuple[FactStore, str | None, str] | None:
    """The store, group and agent id the agent's memory tools (or recall view) are bound to, if it has
    them already."""
    if not isinstance(agent, AssistantAgent):
        return None
    for wb in agent._workbench:
        if isinstance(wb, StaticWorkbench) and _is_memory_workbench(wb):
            tool = wb._tools[0]
            if isinstance(tool, _MemoryTool):
                return tool.store, tool.group_id, tool.agent_id
    for memory in agent._memory or []:
        if isinstance(memory, SharedMemory):
            return memory.store, memory.group_id, memory.agent_id
    return None


def _is_memory_workbench(wb: Any) -> bool:
    return isinstance(wb, StaticWorkbench) and bool(wb._tools) and all(isinstance(t, _MemoryTool) for t in wb._tools)


def _with_scaffolding(messages: list[SystemMessage], text: str) -> list[SystemMessage]:
    """One system message at the start, the scaffolding appended (never a second system message)."""
    if not messages:
        return [SystemMessage(content=text)]
    first = messages[0]
    if isinstance(first.content, str) and text in first.content:
        return list(messages)
    return [SystemMessage(content=f"{first.content}\n\n{text}"), *messages[1:]]


def _register_in_directory(store: FactStore, agent: ChatAgent, agent_id: str) -> None:
    """The agent directory entry of an attached agent: name, description, model, tools."""
    tools: list[str] = []
    model: str | None = None
    if isinstance(agent, AssistantAgent):
        tools = [t.name for t in (*agent._tools, *agent._handoff_tools)]
        client = agent._model_client
        model = str(getattr(client, "_raw_config", {}).get("model") or client.model_info.get("family") or "") or None
    register_agent(store, agent_id, agent.description, model, tools)


class Attacher:
    """Keeps track of what a store attached to which agent (weakly: agents may be garbage collected)."""

    def __init__(self, store: FactStore) -> None:
        self.store = as_engine(store)
        self._attached: weakref.WeakKeyDictionary[Any, AgentAttachment] = weakref.WeakKeyDictionary()

    def attach(
        self,
        target: Any,
        group_id: str | None = None,
        *,
        agent_ids: Mapping[str, str] | None = None,
        scaffolding: str | None = None,
        read_only_scaffolding: str | None = None,
    ) -> Attachment[AgentAttachment]:
        """Give every agent of ``target`` shared memory as a member of ``group_id`` (all or nothing; a second
        attach changes nothing).

        Args:
            target: an agentchat team or agent.
            group_id: the team's name (required).
            agent_ids: explicit memory ids for some agents, by name (default: ``group_id:name``).
            scaffolding: replaces the default scaffolding of agents with the tools.
            read_only_scaffolding: replaces the scaffolding of agents that only get recall.

        Returns:
            The attachment: the group id and what was done to each agent, by name.

        Raises:
            GroupIdRequired: no ``group_id``.
            ValueError / TypeError: see :func:`~..toolkit.team_identity`; repeated agent names; an agent
                attached to another group, holding memory bound elsewhere or a tool named like a memory tool.
        """
        agents = list(iter_agents(target))
        names = [agent.name for agent in agents]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ValueError(f"agent names must be unique to share memory; repeated: {sorted(duplicates)}")
        group_id, ids = team_identity(group_id, names, agent_ids)
        # Validate everything before changing anything: attach is all or nothing.
        for agent in agents:
            done = self._attached.get(agent)
            if done is not None and done.group_id != group_id:
                raise ValueError(
                    f"agent {agent.name!r} is already attached to group {done.group_id!r}; detach it first"
                )
            if done is not None and done.agent_id != ids[agent.name]:
                raise ValueError(f"agent {agent.name!r} is already attached as {done.agent_id!r}; detach it first")
            bound = _memory_binding(agent) if done is None else None
            if bound is not None and (
                bound[0] is not self.store or bound[1] != group_id or bound[2] != ids[agent.name]
            ):
                if bound[0] is not self.store:
                    where = "another store"
                elif bound[1] != group_id:
                    where = f"group {bound[1]!r}"
                else:
                    where = f"agent {bound[2]!r}"
                raise ValueError(
                    f"agent {agent.name!r} already has shared memory bound to {where} (an agent loaded "
                    "from a dumped, attached one, or attached to another store): detach it there first, or "
                    "build it without the memory tools and memory view"
                )
            if done is None and isinstance(agent, AssistantAgent) and _function_calling(agent):
                clash = _existing_tool_names(agent) & set(TOOL_NAMES)
                if clash:
                    raise ValueError(
                        f"agent {agent.name!r} already has a tool named {sorted(clash)[0]!r}: rename that "
                        "tool or do not attach shared memory to this agent"
                    )
        result: Attachment[AgentAttachment] = Attachment(group_id)
        for agent in agents:
            done = self._attached.get(agent)
            if done is None:
                done = self._attach_one(
                    agent,
                    ids[agent.name],
                    group_id,
                    scaffolding or DEFAULT_SCAFFOLDING,
                    read_only_scaffolding or READ_ONLY_SCAFFOLDING,
                )
                self._attached[agent] = done
            result.agents[agent.name] = done
        teams: dict[str, dict[str, str]] = self.store.__dict__.setdefault(_TEAMS, {})
        for team in _teams(target):  # a recording runtime names the team's agents as attach did
            teams[team._team_id] = {a.name: ids[a.name] for a in iter_agents(team)}
        return result

    def _attach_one(
        self, agent: ChatAgent, agent_id: str, group_id: str, scaffolding: str, read_only: str
    ) -> AgentAttachment:
        store = self.store
        join_group(store, group_id, agent_id)
        _register_in_directory(store, agent, agent_id)
        if not isinstance(agent, AssistantAgent):
            return AgentAttachment(agent.name, group_id, "member", agent_id)
        original = list(agent._system_messages)
        if _function_calling(agent):
            existing = next(
                (wb for wb in agent._workbench if isinstance(wb, StaticWorkbench) and _is_memory_workbench(wb)),
                None,
            )
            if existing is not None:  # e.g. an agent loaded from a dumped, already attached agent
                workbench = existing
            else:
                workbench = StaticWorkbench(list(memory_tools(store, agent_id, group_id)))
                agent._workbench = [*agent._workbench, workbench]
            agent._system_messages = _with_scaffolding(original, scaffolding)
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
        memory = next((m for m in agent._memory or [] if isinstance(m, SharedMemory)), None)
        added = memory is None  # one already there is bound to this store, group and agent (attach checked)
        if memory is None:
            memory = SharedMemory(store, agent_id, group_id)
            agent._memory = [*(agent._memory or []), memory]
        agent._system_messages = _with_scaffolding(original, read_only)
        return AgentAttachment(
            agent.name,
            group_id,
            "recall",
            agent_id,
            memory=memory,
            added_memory=added,
            original_system_messages=original,
        )

    def detach(self, target: Any) -> list[str]:
        """Undo attach for every agent of ``target``; returns the names of the agents it changed."""
        changed: list[str] = []
        teams: dict[str, dict[str, str]] = self.store.__dict__.get(_TEAMS, {})
        for team in _teams(target):
            teams.pop(team._team_id, None)
        for agent in iter_agents(target):
            done = self._attached.pop(agent, None)
            if done is None:
                continue
            if isinstance(agent, AssistantAgent):
                if done.workbench is not None and done.added_workbench:
                    agent._workbench = [wb for wb in agent._workbench if wb is not done.workbench]
                if done.memory is not None and done.added_memory and agent._memory:
                    agent._memory = [m for m in agent._memory if m is not done.memory] or None
                    drop_capsules(agent._model_context)
                if done.original_system_messages is not None:
                    agent._system_messages = done.original_system_messages
            changed.append(agent.name)
        return changed
