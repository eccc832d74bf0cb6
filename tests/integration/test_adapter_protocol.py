"""Framework adapters behind one protocol: a third-party adapter, found through the entry point group, is
attached by the same generic attacher as the built-in ones, with the same rules (unique names, the group and
identities, "bound elsewhere", all or nothing, the undo registry); and the façade imports no adapter."""

from __future__ import annotations

import asyncio
import importlib.metadata
import subprocess
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.adapters import ENTRY_POINT_GROUP, framework_of
from autogen_shared_memory.integration.attacher import AdapterBase, Attacher, Binding, bound_elsewhere
from autogen_shared_memory.integration.autogen.testing import scripted_client
from autogen_shared_memory.integration.toolkit import BoundTools, Mode
from autogen_shared_memory.testing import HashEmbedder

MODULE = "toyframe_shared_memory"  # the third-party adapter module the entry point names


class ToyAgent:
    """An agent of a framework the package knows nothing about: a name, a description, a list of tools."""

    def __init__(self, name: str, *, fragile: bool = False) -> None:
        self.name = name
        self.description = f"the {name}"
        self.tools: list[Any] = []
        self.fragile = fragile  # its framework refuses to take tools (bind fails for it)


class ToyTeam:
    def __init__(self, *agents: ToyAgent) -> None:
        self.agents = list(agents)


@dataclass
class ToyRecord:
    agent_name: str
    group_id: str | None
    mode: Mode
    agent_id: str
    tools: BoundTools | None = None
    teams: list[str] = field(default_factory=list)


class ToyAdapter(AdapterBase[ToyRecord]):
    """The whole adapter a third party writes: claims, agents, bind, unbind (and a "bound elsewhere" check)."""

    @staticmethod
    def claims(target: Any) -> bool:
        first = target[0] if isinstance(target, (list, tuple)) and target else target
        return isinstance(first, (ToyAgent, ToyTeam))

    def agents(self, target: Any) -> list[Any]:
        if isinstance(target, ToyTeam):
            return list(target.agents)
        return [target] if isinstance(target, ToyAgent) else list(target)

    def check(self, agent: Any, binding: Binding) -> None:
        for tool in agent.tools:
            where = bound_elsewhere(self.store, binding, (tool.store, tool.group_id, tool.agent_id))
            if where is not None:
                raise ValueError(f"agent {binding.name!r} holds memory bound to {where}")

    def bind(self, agent: Any, binding: Binding) -> ToyRecord:
        if agent.fragile:
            raise RuntimeError(f"toyframe refuses tools for {agent.name}")
        tools = BoundTools(self.store, binding.agent_id, binding.group_id)
        agent.tools.append(tools)
        return ToyRecord(agent.name, binding.group_id, "tools", binding.agent_id, tools)

    def unbind(self, agent: Any, record: ToyRecord) -> None:
        agent.tools = [t for t in agent.tools if t is not record.tools]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SharedMemoryStore]:
    with SharedMemoryStore(tmp_path / "memory", embedder=HashEmbedder()) as s:
        yield s


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """``toyframe`` installed as a package would be: its module, and its entry point in the adapters group."""
    module = types.ModuleType(MODULE)
    module.Adapter = ToyAdapter  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, MODULE, module)
    installed = importlib.metadata.entry_points

    def entry_points(**selection: Any) -> Any:
        if selection.get("group") == ENTRY_POINT_GROUP:
            point = importlib.metadata.EntryPoint(name="toyframe", value=MODULE, group=ENTRY_POINT_GROUP)
            return importlib.metadata.EntryPoints([point])
        return installed(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def _state(*agents: ToyAgent) -> dict[str, list[Any]]:
    return {a.name: list(a.tools) for a in agents}


@pytest.mark.usefixtures("registered")
def test_a_registered_adapter_attaches_through_the_generic_attacher(store: SharedMemoryStore) -> None:
    alice, bob = ToyAgent("alice"), ToyAgent("bob")
    team = ToyTeam(alice, bob)
    assert framework_of(team) == "toyframe"
    attachment = store.attach(team, group_id="crew", agent_ids={"bob": "robert"})
    assert isinstance(store._attacher(team), Attacher) and isinstance(store._attacher(team).adapter, ToyAdapter)
    assert {n: (r.agent_id, r.mode) for n, r in attachment.agents.items()} == {
        "alice": ("crew:alice", "tools"),
        "bob": ("robert", "tools"),
    }
    assert store.operator.members("crew") == {"crew:alice", "robert"}
    assert {a.agent_id: a.description for a in store.for_agent("reader").list_agents()} == {
        "crew:alice": "the alice",
        "robert": "the bob",
    }
    # the tools bind writes to the identity attach chose
    answer = asyncio.run(alice.tools[0].call("memory_remember", {"fact": "The launch is on March 3", "scope": "group"}))
    assert answer.startswith("created fact")
    assert store.as_agent("robert", "crew").search("launch")[0].fact.created_by == "crew:alice"

    again = store.attach(team, group_id="crew", agent_ids={"bob": "robert"})  # a second attach changes nothing
    assert again.agents == attachment.agents and [len(a.tools) for a in (alice, bob)] == [1, 1]
    with pytest.raises(ValueError, match="'alice' is already attached to group 'crew' as 'crew:alice'"):
        store.attach(alice, group_id="other")

    assert store.detach(team) == ["alice", "bob"]  # the undo registry: exactly what attach added
    assert _state(alice, bob) == {"alice": [], "bob": []}
    assert store.detach(team) == []
    assert store.operator.members("crew") == {"crew:alice", "robert"}  # detach leaves the membership


@pytest.mark.usefixtures("registered")
def test_a_failing_bind_leaves_every_agent_as_it_was(store: SharedMemoryStore) -> None:
    alice, bob, carol = ToyAgent("alice"), ToyAgent("bob"), ToyAgent("carol", fragile=True)
    with pytest.raises(RuntimeError, match="toyframe refuses tools for carol"):
        store.attach(ToyTeam(alice, bob, carol), group_id="crew")
    assert _state(alice, bob, carol) == {"alice": [], "bob": [], "carol": []}  # all or nothing
    assert store.operator.members("crew") == set()
    assert store.detach(ToyTeam(alice, bob, carol)) == []  # nothing left in the undo registry
    # an agent attached before keeps what it had: only this attach's work is taken back
    store.attach(alice, group_id="crew")
    kept = list(alice.tools)
    with pytest.raises(RuntimeError, match="refuses"):
        store.attach(ToyTeam(alice, bob, carol), group_id="crew")
    assert alice.tools == kept and bob.tools == [] and store.operator.members("crew") == {"crew:alice"}


@pytest.mark.usefixtures("registered")
def test_names_must_be_unique_and_memory_bound_elsewhere_is_refused(store: SharedMemoryStore, tmp_path: Path) -> None:
    first, second, other = ToyAgent("alice"), ToyAgent("alice"), ToyAgent("bob")
    with pytest.raises(ValueError, match=r"agent names must be unique to share memory; repeated: \['alice'\]"):
        store.attach(ToyTeam(first, other, second), group_id="crew")
    assert _state(first, other, second) == {"alice": [], "bob": []} and second.tools == []
    assert store.operator.members("crew") == set()

    with SharedMemoryStore(tmp_path / "elsewhere", embedder=HashEmbedder()) as elsewhere:
        elsewhere.attach(other, group_id="crew")
        foreign = list(other.tools)
        with pytest.raises(ValueError, match="'bob' holds memory bound to another store"):
            store.attach(ToyTeam(first, other), group_id="crew")
        assert first.tools == [] and other.tools == foreign
    dan = ToyAgent("dan")
    dan.tools.append(BoundTools(store.engine, "launch:dan", "crew"))  # given by hand: this store, another group
    with pytest.raises(ValueError, match="'dan' holds memory bound to group 'crew'"):
        store.attach([first, dan], group_id="launch")
    dan.tools = [BoundTools(store.engine, "launch:carol", "launch")]  # another agent's tools
    with pytest.raises(ValueError, match="'dan' holds memory bound to agent 'launch:carol'"):
        store.attach([first, dan], group_id="launch")
    assert first.tools == [] and store.operator.members("launch") == set()
    dan.tools = [BoundTools(store.engine, "launch:dan", "launch")]  # its own: kept, and attached
    assert store.attach([first, dan], group_id="launch").agents["dan"].agent_id == "launch:dan"


def test_an_unregistered_framework_is_named_in_the_error(store: SharedMemoryStore) -> None:
    with pytest.raises(TypeError, match="attach takes an agentchat team or agent, got ToyAgent"):
        store.attach(ToyAgent("alice"), group_id="crew")  # nothing claims it: the AutoGen adapter says so


def test_options_a_framework_does_not_take_are_refused(store: SharedMemoryStore) -> None:
    agent = AssistantAgent("writer", model_client=scripted_client())
    with pytest.raises(TypeError, match=r"options this framework does not take: \['read_only'\]"):
        store.attach(agent, group_id="crew", read_only=True)
    assert store.operator.members("crew") == set()


def test_a_private_attribute_the_framework_version_lacks_is_a_clear_error(store: SharedMemoryStore) -> None:
    """Private framework attributes are read in one function each, guarded: a version without one fails
    before attach changes anything, naming the attribute and the version the adapter was written for."""
    writer = AssistantAgent("writer", model_client=scripted_client())
    del writer._workbench
    with pytest.raises(RuntimeError, match=r"AssistantAgent has no '_workbench' .*written for autogen-agentchat 0\.7"):
        store.attach(writer, group_id="crew")
    assert store.operator.members("crew") == set() and not hasattr(writer, "_workbench")


def test_the_facade_loads_no_framework_integration_until_one_is_attached() -> None:
    """The layering test reads the imports; this runs them: opening a store, storing and searching import no
    adapter, nor the generic attacher."""
    code = (
        "import sys, tempfile\n"
        "from autogen_shared_memory import SharedMemoryStore\n"
        "from autogen_shared_memory.testing import HashEmbedder\n"
        "with tempfile.TemporaryDirectory() as root, SharedMemoryStore(root, embedder=HashEmbedder()) as store:\n"
        "    store.as_agent('a').remember('The launch is on March 3', 'agent')\n"
        "    store.as_agent('a').search('launch')\n"
        "print(sorted(m for m in sys.modules if m.startswith('autogen_shared_memory.integration')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
