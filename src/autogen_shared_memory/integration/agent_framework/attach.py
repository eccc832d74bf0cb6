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
built workflow. This module is the MAF adapter (:class:`Adapter`); the generic :class:`~..attacher.Attacher`
does what every framework shares, so that ``detach`` removes exactly what attach added, and attaching twice
changes nothing. An agent that holds memory tools bound to another agent, group or store
(``provider.tools_for(other_agent)`` in its ``tools``) is refused: those tools would act as the other agent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agent_framework import AgentExecutor, BaseAgent, Executor, FunctionInvocationLayer, Workflow, WorkflowExecutor

from ..attacher import AdapterBase, Binding, private_attribute
from ..attacher import Attacher as GenericAttacher
from ..toolkit import READ_ONLY_SCAFFOLDING, TOOL_NAMES, Mode, warn_recall_only
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


# The private attributes of agent-framework-orchestrations 1.4.0 builders attach reads, one function each:
# a builder has no public list of its participants before build(). A version without them fails with an
# error naming the attribute, not with an AttributeError from the middle of an attach.
_WRITTEN_FOR = "agent-framework-orchestrations 1.4.0"


def _builder_participants(builder: Any) -> Any:
    return private_attribute(builder, "_participants", _WRITTEN_FOR)


def _builder_participant_factories(builder: Any) -> Any:
    # optional: only the builders that take factories (GroupChatBuilder) have it
    return getattr(builder, "_participant_factories", None)


def _is_builder(target: Any) -> bool:
    """An orchestration builder (``SequentialBuilder``, ``GroupChatBuilder``...: the package's ``*Builder``)."""
    kind = type(target)
    return kind.__module__.startswith("agent_framework_orchestrations") and kind.__name__.endswith("Builder")


def _participants(builder: Any) -> list[Any]:
    participants = _builder_participants(builder)
    found = list(participants.values()) if isinstance(participants, dict) else list(participants)
    if not found and _builder_participant_factories(builder):
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


class Adapter(AdapterBase[AgentAttachment]):
    """The Microsoft Agent Framework adapter: agents, lists, orchestration builders and workflows; an agent
    with ``context_providers`` gets a :class:`SharedMemoryContextProvider`, any other agent is a member."""

    @staticmethod
    def claims(target: Any) -> bool:
        """Whether ``target`` is a MAF agent, workflow or orchestration builder (or a list whose first item is).

        Args:
            target: anything given to ``store.attach``.

        Returns:
            True for MAF objects.
        """
        first = target[0] if isinstance(target, (list, tuple)) and target else target
        return isinstance(first, (BaseAgent, Workflow)) or _is_builder(first)

    def agents(self, target: Any) -> list[Any]:
        return list(dict.fromkeys(iter_agents(target)))  # one agent listed twice is attached once

    def agent_name(self, agent: Any) -> str:
        return agent_identity(agent)

    def check(self, agent: Any, binding: Binding) -> None:
        name, existing = binding.name, _own_provider(agent)
        if existing is not None and existing.store is not self.store:
            raise ValueError(
                f"agent {name!r} already has a shared memory provider of another store; remove it or "
                "attach the agent with that store"
            )
        if existing is not None and existing.group_id != binding.group_id:
            raise ValueError(
                f"agent {name!r} already has a shared memory provider for group {existing.group_id!r}; "
                "remove it or attach with that group"
            )
        if existing is not None and existing.agent_id_of(agent) != binding.agent_id:
            raise ValueError(
                f"agent {name!r} already has a shared memory provider that names it "
                f"{existing.agent_id_of(agent)!r}, not {binding.agent_id!r}; remove it or attach with its agent_ids"
            )
        where = _foreign_tools(agent, self.store, binding.agent_id, binding.group_id)
        if where is not None:
            raise foreign_tool_error(name, where)
        clash = _clashing_tool(agent) if _providers(agent) is not None else None
        if clash is not None:
            raise ValueError(
                f"agent {name!r} already has a tool named {clash!r}: rename that tool or do not attach shared "
                "memory to this agent"
            )

    def bind(self, agent: Any, binding: Binding) -> AgentAttachment:
        name, agent_id, group_id = binding.name, binding.agent_id, binding.group_id
        providers = _providers(agent)
        if providers is None:
            return AgentAttachment(name, group_id, "member", agent_id)
        existing = _own_provider(agent)
        if existing is not None:  # e.g. the user gave the agent store.context_provider(...) already
            return AgentAttachment(name, group_id, existing.mode, agent_id, provider=existing, added_provider=False)
        mode: Literal["tools", "recall"] = "tools" if _runs_tools(agent) else "recall"
        if mode == "recall":
            warn_recall_only(
                name,
                "cannot run tools (it has no agent_framework.FunctionInvocationLayer)",
                "give the agent a chat client with MAF's function-invocation layer (every MAF client has it) if "
                "the model can call functions",
            )
        read_only = binding.read_only_scaffolding or READ_ONLY_SCAFFOLDING
        provider = SharedMemoryContextProvider(
            self.store,
            group_id,
            agent_ids={name: agent_id},
            mode=mode,
            scaffolding=binding.scaffolding if mode == "tools" else read_only,
        )
        providers.append(provider)
        return AgentAttachment(name, group_id, mode, agent_id, provider=provider, added_provider=True)

    def unbind(self, agent: Any, record: AgentAttachment) -> None:
        providers = _providers(agent)
        if record.added_provider and providers is not None:
            providers[:] = [p for p in providers if p is not record.provider]

    def holds(self, agent: Any, record: AgentAttachment) -> bool:
        """A copy of an attached agent (``HandoffBuilder`` copies its agents when it builds) holds the
        provider attach added to the original."""
        return record.added_provider and any(p is record.provider for p in _providers(agent) or [])

    def describe(self, agent: Any, record: AgentAttachment) -> tuple[Any, Any, list[str]]:
        """The directory entry: description, model, the agent's tools (and the memory tools it was given)."""
        options = getattr(agent, "default_options", None)
        tools = [n for n in (_tool_name(t) for t in (options or {}).get("tools") or []) if n]
        if record.mode == "tools":
            tools = [*tools, *TOOL_NAMES]
        client = getattr(agent, "client", None)
        model = (options or {}).get("model") or getattr(client, "model", None) or getattr(client, "model_id", None)
        return getattr(agent, "description", None), model, tools


class Attacher(GenericAttacher[AgentAttachment]):
    """The generic attacher with the MAF adapter (what ``store.attach`` uses for MAF objects)."""

    def __init__(self, store: FactStore) -> None:
        super().__init__(store, Adapter(store))
