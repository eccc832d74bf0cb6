"""One attacher for every framework: the adapter protocol and the generic :class:`Attacher` behind ``store.attach``.

A framework adapter only knows its framework: which targets it claims, the agents of a target, how to bind
one agent to its memory identity and how to take that back. Everything else ``store.attach`` promises is
done here, once, for every framework:

* agent names are unique within what is attached (two agents named alike would share one identity);
* the group id and each agent's memory identity come from :func:`~.toolkit.team_identity`;
* an agent attached already (by this store) is attached again only to the same group and identity, and
  then nothing changes; anything the adapter says is bound elsewhere is refused before anything changes;
* attach is all or nothing: an agent whose binding fails leaves no trace, and the agents bound before it
  are unbound (their group membership taken back if this attach added it);
* what was done to each agent (the adapter's record) is kept, weakly, so that ``detach`` undoes exactly
  that; each attached agent becomes a group member and an entry of the agent directory.

Adapters are found by registration (:mod:`autogen_shared_memory.adapters`): a module named in the built-in
table or in the ``autogen_shared_memory.adapters`` entry point group defines ``Adapter``, a class whose
instances are :class:`FrameworkAdapter` s (``Adapter(store)``: one per store) and whose static ``claims``
tells whether a target belongs to it.
"""

from __future__ import annotations

import importlib.metadata
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ..facts import as_engine
from .toolkit import Attachment, Mode, join_group, register_agent, team_identity

if TYPE_CHECKING:
    from ..facts import FactStore

__all__ = [
    "AdapterBase",
    "AttachedAgent",
    "Attacher",
    "Binding",
    "FrameworkAdapter",
    "bound_elsewhere",
    "private_attribute",
    "set_private_attribute",
]


class AttachedAgent(Protocol):
    """What an adapter's ``bind`` returns: its record of what it did to one agent (``unbind`` takes it back)."""

    agent_name: str
    group_id: str | None
    agent_id: str
    mode: Mode


R = TypeVar("R", bound=AttachedAgent)


@dataclass(frozen=True)
class Binding:
    """Who one agent is in shared memory, as the attacher decided it, and the caller's options."""

    store: FactStore
    name: str  # the agent's name in its framework
    agent_id: str  # its memory identity (its name qualified by the group, or as agent_ids maps it)
    group_id: str
    scaffolding: str | None = None  # the caller's replacement for the default scaffolding
    read_only_scaffolding: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)  # framework options (checked by check_options)


class FrameworkAdapter(Protocol[R]):
    """What the generic :class:`Attacher` needs of a framework. :class:`AdapterBase` implements the optional
    part (everything but ``claims``, ``agents``, ``bind`` and ``unbind``)."""

    @staticmethod
    def claims(target: Any) -> bool:
        """Whether ``target`` (a team, an agent or a list of agents) belongs to this framework."""

    def agents(self, target: Any) -> list[Any]:
        """The agents of ``target`` (each once); ``TypeError`` for a target the adapter cannot look into."""

    def agent_name(self, agent: Any) -> str:
        """The agent's name, unique within what is attached: its memory identity is made from it."""

    def check_options(self, names: list[str], options: Mapping[str, Any]) -> None:
        """Refuse options the framework does not take, or that name agents not being attached."""

    def check(self, agent: Any, binding: Binding) -> None:
        """Refuse (``ValueError``) an agent not yet attached by this store that cannot be bound as ``binding``
        says: memory bound elsewhere, a tool named like a memory tool. Changes nothing."""

    def bind(self, agent: Any, binding: Binding) -> R:
        """Give the agent its memory; on failure, take back whatever it added before raising."""

    def unbind(self, agent: Any, record: R) -> None:
        """Remove what ``bind`` added (and only that)."""

    def describe(self, agent: Any, record: R) -> tuple[Any, Any, list[str]]:
        """The agent's directory entry: its description, model and tool names."""

    def holds(self, agent: Any, record: R) -> bool:
        """Whether ``agent``, not attached itself, holds what ``record`` added to another agent (a copy the
        framework made of an attached agent): detaching it detaches the original."""

    def attached(self, target: Any, ids: Mapping[str, str]) -> None:
        """Called when every agent of ``target`` is attached (``ids``: memory ids by agent name)."""

    def detached(self, target: Any) -> None:
        """Called when every agent of ``target`` is detached."""


class AdapterBase(Generic[R]):
    """The optional part of :class:`FrameworkAdapter`: no options, no extra checks, nothing held by copies,
    nothing to do per team; the directory entry is the agent's ``description`` alone."""

    def __init__(self, store: FactStore) -> None:
        self.store = as_engine(store)

    def agent_name(self, agent: Any) -> str:
        name: str = agent.name
        return name

    def check_options(self, names: list[str], options: Mapping[str, Any]) -> None:
        if options:
            raise TypeError(f"attach got options this framework does not take: {sorted(options)}")

    def check(self, agent: Any, binding: Binding) -> None:
        return None

    def describe(self, agent: Any, record: R) -> tuple[Any, Any, list[str]]:
        return getattr(agent, "description", None), None, []

    def holds(self, agent: Any, record: R) -> bool:
        return False

    def attached(self, target: Any, ids: Mapping[str, str]) -> None:
        return None

    def detached(self, target: Any) -> None:
        return None


def bound_elsewhere(store: FactStore, binding: Binding, bound: tuple[Any, str | None, str]) -> str | None:
    """Where memory an agent already holds is bound, if not where ``binding`` binds it: memory of another
    store, group or identity would act as that agent or team.

    Args:
        store: the attaching store.
        binding: the identity attach gives the agent.
        bound: the store, group id and agent id the agent's memory (tools, view, provider) is bound to.

    Returns:
        ``"another store"``, ``"group '...'"``, ``"agent '...'"``, or None when it is bound to this binding.
    """
    if bound[0] is not store:
        return "another store"
    if bound[1] != binding.group_id:
        return f"group {bound[1]!r}"
    if bound[2] != binding.agent_id:
        return f"agent {bound[2]!r}"
    return None


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def private_attribute(obj: Any, name: str, written_for: str) -> Any:
    """A private attribute of a framework object, or a clear error when this framework version has none.

    Args:
        obj: the framework object.
        name: the attribute (``_participants``).
        written_for: the distribution and version the adapter's access was written for
            (``"autogen-agentchat 0.7.5"``).

    Returns:
        The attribute's value.

    Raises:
        RuntimeError: the object has no such attribute (the installed version changed it).
    """
    try:
        return getattr(obj, name)
    except AttributeError:
        distribution = written_for.split()[0]
        raise RuntimeError(
            f"shared memory cannot attach: {type(obj).__name__} has no {name!r} (read by the adapter written for "
            f"{written_for}; installed: {distribution} {_version(distribution)})"
        ) from None


def set_private_attribute(obj: Any, name: str, value: Any, written_for: str) -> None:
    """Set a private attribute a framework object has (never create one the framework would not read).

    Args:
        obj: the framework object.
        name: the attribute.
        value: its new value.
        written_for: as for :func:`private_attribute`.

    Raises:
        RuntimeError: the object has no such attribute.
    """
    private_attribute(obj, name, written_for)
    setattr(obj, name, value)


class Attacher(Generic[R]):
    """Attaches a store to the agents of one framework through its adapter, and remembers (weakly: agents may
    be garbage collected) what it did to each, so that detach undoes exactly that."""

    def __init__(self, store: FactStore, adapter: FrameworkAdapter[R]) -> None:
        self.store = as_engine(store)
        self.adapter = adapter
        self._attached: weakref.WeakKeyDictionary[Any, R] = weakref.WeakKeyDictionary()

    def record_of(self, agent: Any) -> R | None:
        """What this attacher did to ``agent`` (None: not attached here).

        Args:
            agent: a framework agent.

        Returns:
            The adapter's record, or None.
        """
        return self._attached.get(agent)

    def attach(
        self,
        target: Any,
        group_id: str | None = None,
        *,
        agent_ids: Mapping[str, str] | None = None,
        scaffolding: str | None = None,
        read_only_scaffolding: str | None = None,
        **options: Any,
    ) -> Attachment[R]:
        """Give every agent of ``target`` shared memory as a member of ``group_id`` (all or nothing; a second
        attach changes nothing).

        Args:
            target: a team, an agent or a list of agents of the adapter's framework.
            group_id: the team's name (required).
            agent_ids: explicit memory ids for some agents, by name (default: ``group_id:name``).
            scaffolding: replaces the default scaffolding of agents with the tools.
            read_only_scaffolding: replaces the scaffolding of agents that only get recall.
            **options: the framework's own options (AG2: ``read_only``, ``record``).

        Returns:
            The attachment: the group id and the adapter's record of each agent, by name.

        Raises:
            GroupIdRequired: no ``group_id``.
            ValueError / TypeError: see :func:`~.toolkit.team_identity`; repeated agent names; an agent
                attached to another group or identity, or one the adapter refuses (memory bound elsewhere, a
                tool named like a memory tool); options the framework does not take.
        """
        adapter = self.adapter
        agents = adapter.agents(target)
        names = [adapter.agent_name(agent) for agent in agents]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ValueError(f"agent names must be unique to share memory; repeated: {sorted(duplicates)}")
        group_id, ids = team_identity(group_id, names, agent_ids)
        adapter.check_options(names, options)
        bindings = [
            Binding(self.store, name, ids[name], group_id, scaffolding, read_only_scaffolding, options)
            for name in names
        ]
        # Validate everything before changing anything: attach is all or nothing.
        for agent, binding in zip(agents, bindings, strict=True):
            done = self._attached.get(agent)
            if done is None:
                adapter.check(agent, binding)
            elif done.group_id != group_id or done.agent_id != binding.agent_id:
                raise ValueError(
                    f"agent {binding.name!r} is already attached to group {done.group_id!r} as {done.agent_id!r}; "
                    "detach it first"
                )
        result: Attachment[R] = Attachment(group_id)
        added: list[tuple[Any, str, bool]] = []  # (agent, its id, whether this attach made it a group member)
        try:
            for agent, binding in zip(agents, bindings, strict=True):
                done = self._attached.get(agent)
                if done is None:
                    joined = join_group(self.store, group_id, binding.agent_id)
                    added.append((agent, binding.agent_id, joined))
                    done = adapter.bind(agent, binding)
                    self._attached[agent] = done
                    register_agent(self.store, binding.agent_id, *adapter.describe(agent, done))
                result.agents[binding.name] = done
            adapter.attached(target, ids)
        except BaseException:
            for agent, agent_id, joined in reversed(added):
                record = self._attached.pop(agent, None)
                if record is not None:
                    adapter.unbind(agent, record)
                if joined:  # detach leaves a membership (shared state); a failed attach adds none
                    self.store.remove_group_member(group_id, agent_id)
            raise
        return result

    def detach(self, target: Any) -> list[str]:
        """Undo attach for every agent of ``target`` (group memberships stay: see :func:`~.toolkit.join_group`).

        Args:
            target: what was attached (or a copy the framework made of it).

        Returns:
            The names of the agents it changed.
        """
        changed: list[str] = []
        for agent in self.adapter.agents(target):
            holders = [agent]
            done = self._attached.pop(agent, None)
            if done is None:  # a copy of an attached agent, made after attach
                original = next((a for a, r in list(self._attached.items()) if self.adapter.holds(agent, r)), None)
                if original is None:
                    continue
                done = self._attached.pop(original)
                holders.append(original)
            for holder in holders:
                self.adapter.unbind(holder, done)
            changed.append(done.agent_name)
        self.adapter.detached(target)
        return changed
