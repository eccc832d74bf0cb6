"""Attach a store to Microsoft Agent Framework agents, lists of agents, orchestration builders and workflows.

``store.attach(x, group_id="launch")`` gives every agent of ``x`` a :class:`SharedMemoryContextProvider`
bound to that group and enrols it as a group member, under its memory identity: its name qualified by the
group (``launch:writer``) or the id ``agent_ids`` maps its name to:

* an ``Agent`` whose chat client runs tools (it has MAF's function-invocation layer) gets the memory tools
  and the scaffolding (mode ``"tools"``);
* an ``Agent`` whose client cannot run tools gets a read-only provider (mode ``"recall"``: a capsule for
  the latest message and the read-only scaffolding), with a ``UserWarning`` saying so (an agent that
  already has a shared memory provider keeps it and its mode, without a warning);
* any other agent (one without ``context_providers``) only becomes a group member.

``x`` may be an agent, a list of agents, an orchestration builder from ``agent_framework_orchestrations``
(``GroupChatBuilder``, ``SequentialBuilder``, ``ConcurrentBuilder``, ``HandoffBuilder``,
``MagenticBuilder``: their participants) or a built ``Workflow`` (the agents of its ``AgentExecutor`` s).
Attach a builder before ``build()`` when it copies its agents (``HandoffBuilder`` does), or attach the
built workflow. Everything attach adds is remembered so that ``detach`` removes exactly that, and
attaching twice changes nothing. An agent that holds memory tools bound to another agent, group or store
(``provider.tools_for(other_agent)`` in its ``tools``) is refused: those tools would act as the other agent.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent_framework import AgentExecutor, BaseAgent, Executor, FunctionInvocationLayer, Workflow, WorkflowExecutor

from ...facts import as_engine
from ..toolkit import (
    READ_ONLY_SCAFFOLDING,
    TOOL_NAMES,
    Attachment,
    Mode,
    join_group,
    register_agent,
    team_identity,
    warn_recall_only,
)
from .provider import (
    MemoryTool,
    SharedMemoryContextProvider,
    _tool_name,
    agent_identity,
    foreign_binding,
    foreign_tool_error,
)

if TYPE_CHECKING:
    from ...facts import FactStore


@dataclass
class AgentAttachment:
    """What attach did to one agent (and what detach will undo)."""

    agent_name: str
    group_id: str | None
    mode: Mode
    agent_id: str = ""  # the agent's memory identity (its name qualified by the group, or mapped)
    provider: SharedMemoryContextProvider | None = None
    added_provider: bool = False  # False: the agent already had a shared memory provider; attach kept it


def _is_builder(target: Any) -> bool:
    return type(target).__module__.startswith("agent_framework_orchestrations") and hasattr(target, "_participants")


def _participants(builder: Any) -> list[Any]:
    participants = builder._participants
    found = list(participants.values()) if isinstance(participants, dict) else list(participants)
    if not found and getattr(builder, "_participant_factories", None):
        raise TypeError(
            f"{type(builder).__name__} makes its participants with factories, so there is nothing to attach "
            "yet: attach the agents the factories return, or give them store.context_provider(...)"
        )
    return found


def iter_agents(target: Any) -> Iterator[Any]:
    """Every agent of an agent, a list of agents, an orchestration builder or a workflow (executors that are
    not agents are skipped: they have no identity or context to give memory to)."""
    if isinstance(target, (list, tuple)):
        for item in target:
            yield from iter_agents(item)
    elif isinstance(target, Workflow):
        yield from _workflow_agents(target)
    elif _is_builder(target):
        for participant in _participants(target):
            if isinstance(participant, AgentExecutor):
                yield participant.agent
            elif not isinstance(participant, Executor):
                yield participant
    elif isinstance(target, BaseAgent) or (hasattr(target, "run") and hasattr(target, "name")):
        yield target
    else:
        raise TypeError(
            "attach takes a Microsoft Agent Framework agent, a list of agents, an orchestration builder or a "
            f"workflow, got {type(target).__name__}"
        )


def _workflow_agents(workflow: Workflow) -> Iterator[Any]:
    """The agents of a workflow's executors, sub-workflows included (``with_request_info()`` wraps each
    agent in one); a workflow without any is an error, not an attach that silently gives no one memory."""
    found = False

    def walk(flow: Workflow) -> Iterator[Any]:
        nonlocal found
        for executor in flow.executors.values():
            if isinstance(executor, AgentExecutor):
                found = True
                yield executor.agent
            elif isinstance(executor, WorkflowExecutor):
                yield from walk(executor.workflow)

    yield from walk(workflow)
    if not found:
        raise TypeError(
            "this workflow has no agent executors (nor sub-workflows holding any), so there is nothing to attach "
            "shared memory to: attach the agents, or give them store.context_provider(...)"
        )


def _runs_tools(agent: Any) -> bool:
    return isinstance(getattr(agent, "client", None), FunctionInvocationLayer)


def _providers(agent: Any) -> list[Any] | None:
    providers = getattr(agent, "context_providers", None)
    return providers if isinstance(providers, list) else None


def _own_provider(agent: Any) -> SharedMemoryContextProvider | None:
    return next((p for p in _providers(agent) or [] if isinstance(p, SharedMemoryContextProvider)), None)


def _agent_tools(agent: Any) -> list[Any]:
    options = getattr(agent, "default_options", None)
    tools = options.get("tools") if isinstance(options, dict) else None
    return list(tools or [])


def _clashing_tool(agent: Any) -> str | None:
    for tool in _agent_tools(agent):
        name = _tool_name(tool)
        if name in TOOL_NAMES and not isinstance(tool, MemoryTool):
            return name
    return None


def _foreign_tools(agent: Any, store: FactStore, agent_id: str, group_id: str) -> str | None:
    """Where the memory tools the agent holds are bound, if not to this store, identity and group."""
    for tool in _agent_tools(agent):
        where = foreign_binding(tool, store, agent_id, group_id) if isinstance(tool, MemoryTool) else None
        if where is not None:
            return where
    return None


def _register_in_directory(store: FactStore, agent: Any, name: str, mode: Mode) -> None:
    """The agent directory entry of an attached agent: name, description, model, tools."""
    options = getattr(agent, "default_options", None)
    tools = [n for n in (_tool_name(t) for t in (options or {}).get("tools") or []) if n]
    if mode == "tools":
        tools = [*tools, *TOOL_NAMES]
    client = getattr(agent, "client", None)
    model = (options or {}).get("model") or getattr(client, "model", None) or getattr(client, "model_id", None)
    description = getattr(agent, "description", None)
    register_agent(store, name, description, model, tools)


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
            target: an agent, a list of agents, an orchestration builder or a workflow.
            group_id: the team's name (required).
            agent_ids: explicit memory ids for some agents, by name (default: ``group_id:name``).
            scaffolding: replaces the default scaffolding of agents with the tools.
            read_only_scaffolding: replaces the scaffolding of agents that only get recall.

        Returns:
            The attachment: the group id and what was done to each agent, by name.

        Raises:
            GroupIdRequired: no ``group_id``.
            ValueError / TypeError: see :func:`~..toolkit.team_identity`; repeated agent names; an agent
                attached elsewhere, with a provider of another store, group or identity, holding memory tools
                bound elsewhere, or with a tool named like a memory tool.
        """
        agents = list(dict.fromkeys(iter_agents(target)))  # one agent listed twice is attached once
        # Validate everything before changing anything: attach is all or nothing.
        names = [agent_identity(agent) for agent in agents]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ValueError(f"agent names must be unique to share memory; repeated: {sorted(duplicates)}")
        group_id, ids = team_identity(group_id, names, agent_ids)
        for agent, name in zip(agents, names, strict=True):
            done = self._attached.get(agent)
            if done is not None and (done.group_id != group_id or done.agent_id != ids[name]):
                raise ValueError(
                    f"agent {name!r} is already attached to group {done.group_id!r} as {done.agent_id!r}; "
                    "detach it first"
                )
            existing = _own_provider(agent)
            if done is None and existing is not None and existing.store is not self.store:
                raise ValueError(
                    f"agent {name!r} already has a shared memory provider of another store; remove it or "
                    "attach the agent with that store"
                )
            if done is None and existing is not None and existing.group_id != group_id:
                raise ValueError(
                    f"agent {name!r} already has a shared memory provider for group {existing.group_id!r}; "
                    "remove it or attach with that group"
                )
            if done is None and existing is not None and existing.agent_id_of(agent) != ids[name]:
                raise ValueError(
                    f"agent {name!r} already has a shared memory provider that names it "
                    f"{existing.agent_id_of(agent)!r}, not {ids[name]!r}; remove it or attach with its agent_ids"
                )
            where = _foreign_tools(agent, self.store, ids[name], group_id) if done is None else None
            if where is not None:
                raise foreign_tool_error(name, where)
            clash = _clashing_tool(agent) if done is None and _providers(agent) is not None else None
            if clash is not None:
                raise ValueError(
                    f"agent {name!r} already has a tool named {clash!r}: rename that tool or do not attach shared "
                    "memory to this agent"
                )
        result: Attachment[AgentAttachment] = Attachment(group_id)
        for agent, name in zip(agents, names, strict=True):
            done = self._attached.get(agent)
            if done is None:
                done = self._attach_one(agent, name, ids[name], group_id, scaffolding, read_only_scaffolding)
                self._attached[agent] = done
            result.agents[name] = done
        return result

    def _attach_one(
        self, agent: Any, name: str, agent_id: str, group_id: str, scaffolding: str | None, read_only: str | None
    ) -> AgentAttachment:
        store = self.store
        providers = _providers(agent)
        if providers is None:
            mode: Mode = "member"
        else:
            existing = _own_provider(agent)
            mode = existing.mode if existing is not None else "tools" if _runs_tools(agent) else "recall"
        join_group(store, group_id, agent_id)
        _register_in_directory(store, agent, agent_id, mode)
        if providers is None or mode == "member":
            return AgentAttachment(name, group_id, "member", agent_id)
        existing = _own_provider(agent)
        if existing is not None:  # e.g. the user gave the agent store.context_provider(...) already
            return AgentAttachment(name, group_id, existing.mode, agent_id, provider=existing, added_provider=False)
        if mode == "recall":  # decided by the client above (an explicit recall provider was kept as it is)
            warn_recall_only(
                name,
                "cannot run tools (it has no agent_framework.FunctionInvocationLayer)",
                "give the agent a chat client with MAF's function-invocation layer (every MAF client has it) if "
                "the model can call functions",
            )
        provider = SharedMemoryContextProvider(
            store,
            group_id,
            agent_ids={name: agent_id},
            mode=mode,
            scaffolding=scaffolding if mode == "tools" else (read_only or READ_ONLY_SCAFFOLDING),
        )
        providers.append(provider)
        return AgentAttachment(name, group_id, mode, agent_id, provider=provider, added_provider=True)

    def detach(self, target: Any) -> list[str]:
        """Undo attach for every agent of ``target``; returns the names of the agents it changed."""
        changed: list[str] = []
        for agent in dict.fromkeys(iter_agents(target)):
            done = self._attached.pop(agent, None)
            holders = [agent]
            if done is None:  # a copy of an attached agent (HandoffBuilder copies its agents when it builds)
                original = self._original_of(agent)
                if original is None:
                    continue
                done = self._attached.pop(original)
                holders.append(original)
            for holder in holders:
                providers = _providers(holder)
                if done.added_provider and providers is not None:
                    providers[:] = [p for p in providers if p is not done.provider]
            changed.append(done.agent_name)
        return changed

    def _original_of(self, agent: Any) -> Any | None:
        """The attached agent whose added provider ``agent`` holds too (a copy made after attach)."""
        providers = _providers(agent) or []
        for original, done in list(self._attached.items()):
            if done.added_provider and any(p is done.provider for p in providers):
                return original
        return None
