"""AG2 pattern-based group chats (``initiate_group_chat`` / ``a_initiate_group_chat`` with ``AutoPattern``,
``DefaultPattern``, ``RoundRobinPattern``): every tool call runs in AG2's ``GroupToolExecutor``, and each
memory call must still run for the agent whose model asked (scripted model clients, real AG2 machinery)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import weakref
from typing import Any, Literal

import pytest
from autogen import ConversableAgent, UserProxyAgent
from autogen.agentchat import a_initiate_group_chat, initiate_group_chat
from autogen.agentchat.group import AgentTarget, TerminateTarget
from autogen.agentchat.group.group_tool_executor import GroupToolExecutor
from autogen.agentchat.group.patterns import AutoPattern, DefaultPattern, RoundRobinPattern
from autogen.agentchat.group.patterns.pattern import Pattern
from scripted_agents import agent as scripted_agent
from scripted_agents import model

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.integration.ag2 import DEFAULT_SCAFFOLDING, READ_ONLY_SCAFFOLDING
from autogen_shared_memory.integration.ag2.scripted import scripted_llm_config, tool_call
from autogen_shared_memory.integration.toolkit import CAPSULE_PREAMBLE, TOOL_NAMES

Mode = Literal["sync", "async"]
Kind = Literal["auto", "default", "round_robin"]
StoreFactory = Any
EXECUTOR = "_Group_Tool_Executor"


def agent(name: str, *script: str | dict[str, Any], then: str | None = "Done.") -> ConversableAgent:
    return scripted_agent(name, *script, then=then)


def pattern(kind: Kind, agents: list[ConversableAgent], user: ConversableAgent | None = None) -> Pattern:
    """A pattern in which the agents speak in list order, then the chat ends."""
    if kind == "round_robin":  # the pattern sets the handoffs; max_rounds ends the chat
        return RoundRobinPattern(initial_agent=agents[0], agents=agents, user_agent=user)
    for speaker, after in itertools.pairwise(agents):
        speaker.handoffs.set_after_work(AgentTarget(after))
    agents[-1].handoffs.set_after_work(TerminateTarget())
    if kind == "auto":  # the manager's model is never asked: every agent has its own after-work
        manager = {"llm_config": scripted_llm_config("manager")}
        return AutoPattern(initial_agent=agents[0], agents=agents, user_agent=user, group_manager_args=manager)
    return DefaultPattern(initial_agent=agents[0], agents=agents, user_agent=user)


def run(mode: Mode, p: Pattern, message: str, rounds: int) -> list[dict[str, Any]]:
    if mode == "sync":
        result, _, _ = initiate_group_chat(p, messages=message, max_rounds=rounds)
    else:
        result, _, _ = asyncio.run(a_initiate_group_chat(p, messages=message, max_rounds=rounds))
    return result.chat_history


def tool_results(history: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(executing agent, result) of every tool response."""
    return [(m["name"], m["content"]) for m in history if m.get("role") == "tool"]


def snapshot(store: SharedMemoryStore) -> list[Any]:
    return sorted((str(st.scope), sorted(st.counts.items())) for st in store.stats() if any(st.counts.values()))


@pytest.fixture
def store(make_store: StoreFactory) -> SharedMemoryStore:
    s: SharedMemoryStore = make_store()
    return s


@pytest.mark.parametrize("kind", ["auto", "default", "round_robin"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_each_memory_call_runs_for_the_agent_that_asked(store: SharedMemoryStore, mode: Mode, kind: Kind) -> None:
    alice = agent("alice", tool_call("memory_remember", fact="The launch is on March 3", scope="group"), "Saved.")
    bob = agent(
        "bob",
        tool_call("memory_remember", fact="Launch posts need legal review", scope="group"),
        tool_call("memory_search", query="when is the launch"),
        "March 3, after legal review.",
    )
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False)
    p = pattern(kind, [alice, bob], user)
    attachment = store.attach(p, group_id="crew")  # the pattern: its agents and its user agent
    group_id = attachment.group_id
    assert group_id == "crew"
    assert store.operator.members(group_id) == {"crew:alice", "crew:bob", "crew:user"}
    assert attachment.mode_of("user") == "member"

    history = run(mode, p, "Plan the launch post.", rounds=9)
    results = tool_results(history)
    assert [name for name, _ in results] == [EXECUTOR] * 3  # AG2 ran every call in its tool executor
    (_, alice_wrote), (_, bob_wrote), (_, found) = results
    assert alice_wrote.startswith("created fact g_") and f"group:{group_id}" in alice_wrote
    assert bob_wrote.startswith("created fact g_")
    assert found.startswith("[memory: 2 of 2 facts]") and "by crew:alice" in found and "by crew:bob" in found
    # each fact is its asker's: author, stated_by, the audit trail's actor; each call in the asker's records
    for author, text in (("crew:alice", "March 3"), ("crew:bob", "legal review")):
        (hit,) = store.as_agent(author, group_id).search(text, "group", top_k=1)
        assert hit.fact.created_by == author and hit.fact.stated_by == (author,)
        assert [e.actor for e in store.as_agent(author, group_id).history(hit.fact.id)] == [author]
    assert [c.tool_name for c in store.operator.tool_history("crew:alice")] == ["memory_remember"]
    assert sorted(c.tool_name for c in store.operator.tool_history("crew:bob")) == ["memory_remember", "memory_search"]
    assert store.operator.tool_history(EXECUTOR) == []
    # what bob's model saw: the three tools, the scaffolding, alice's call's result
    request = model(bob).calls[0]
    assert set(TOOL_NAMES) <= {t["function"]["name"] for t in request["tools"]}
    systems = [m for m in request["messages"] if m.get("role") == "system"]
    assert systems[0]["content"] == f"You are bob.\n\n{DEFAULT_SCAFFOLDING}"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_read_only_agent_gets_its_capsule_and_its_calls_are_refused(store: SharedMemoryStore, mode: Mode) -> None:
    store.as_operator("desk").remember("The customer prefers email", "group")
    writer = agent("writer", "How should we contact the customer?")
    reader = agent("reader", tool_call("memory_remember", fact="reader was here", scope="group"), "Email them.")
    store.attach([writer, reader], group_id="desk", read_only={"reader"})  # the agents list works too
    before = snapshot(store)
    history = run(mode, pattern("default", [writer, reader]), "A customer wrote.", rounds=6)
    ((executor, refused),) = tool_results(history)
    assert executor == EXECUTOR
    assert refused.startswith("ERROR: agent 'reader' was not given the shared memory tools")
    assert snapshot(store) == before and store.operator.tool_history("desk:reader") == []
    request = model(reader).calls[0]
    assert not {t["function"]["name"] for t in request.get("tools") or []} & set(TOOL_NAMES)
    systems = [m for m in request["messages"] if m.get("role") == "system"]
    assert systems[0]["content"] == f"You are reader.\n\n{READ_ONLY_SCAFFOLDING}"
    capsule = request["messages"][-2]["content"]
    assert capsule.startswith(CAPSULE_PREAMBLE) and "The customer prefers email" in capsule


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_calls_of_an_agent_without_memory_fail_closed(store: SharedMemoryStore, mode: Mode) -> None:
    """The executor has the memory functions (copied from the attached agents), but runs them for no one else."""
    alice = agent("alice", "Hello.")
    outsider = agent("outsider", tool_call("memory_remember", fact="outsider note", scope="agent"), "Ok.")
    store.attach([alice], group_id="team")
    before = snapshot(store)
    history = run(mode, pattern("default", [alice, outsider]), "Go.", rounds=5)
    ((executor, refused),) = tool_results(history)
    assert executor == EXECUTOR and refused.startswith("ERROR: agent 'outsider' was not given the shared memory tools")
    assert snapshot(store) == before
    assert store.operator.tool_history("team:alice") == [] and store.operator.tool_history(EXECUTOR) == []


def test_a_speaker_cannot_take_another_name(store: SharedMemoryStore) -> None:
    spoof = {**tool_call("memory_remember", fact="mallory wrote this", scope="agent"), "name": "alice"}
    mallory, alice = agent("mallory", spoof, "Done."), agent("alice", "Ok.")
    p = pattern("default", [mallory, alice])
    store.attach(p, group_id="crew")
    ((_, created),) = tool_results(run("sync", p, "Go.", rounds=6))
    assert created.startswith("created fact")  # GroupChat.append named the message after its speaker
    assert store.as_agent("crew:alice").search("mallory wrote", "agent") == []
    assert store.as_agent("crew:mallory").search("mallory wrote", "agent")[0].fact.created_by == "crew:mallory"


def test_an_asker_that_cannot_be_told_gets_error_and_nothing_changes(store: SharedMemoryStore) -> None:
    alice, bob = agent("alice"), agent("bob")
    p = pattern("default", [alice, bob])
    store.attach(p, group_id="team")
    *_, executor, chat, manager, _, _, _, _ = p.prepare_group_chat(max_rounds=5, messages="Go.")
    assert isinstance(executor, GroupToolExecutor)
    remember = tool_call("memory_remember", fact="whose is this", scope="agent")

    def execute(message: dict[str, Any], sender: Any = manager) -> str:
        executor.reset_consecutive_auto_reply_counter()
        reply = executor.generate_reply(messages=[message], sender=sender)
        assert isinstance(reply, dict)
        return str(reply["content"])

    before = snapshot(store)
    # not yet linked (no attached agent has talked to this chat): the executor does not know the asker
    assert execute({**remember, "name": "alice"}).startswith("ERROR: shared memory cannot tell which agent")
    assert snapshot(store) == before
    alice.send("Starting.", manager, request_reply=False)
    assert execute({**remember, "name": "alice"}).startswith("created fact")  # linked: runs for alice
    # the async twin (AG2 0.14 runs the sync one in async chats too) is wrapped the same way
    (a_reply,) = [e["reply_func"] for e in executor._reply_func_list if asyncio.iscoroutinefunction(e["reply_func"])]
    for name, expected in [("alice", "created fact"), ("nobody", "ERROR:")]:
        message = {**tool_call("memory_remember", fact=f"async {name}", scope="agent"), "name": name}
        _, reply = asyncio.run(a_reply(executor, messages=[message], sender=manager))
        assert reply["content"].startswith(expected)
    before = snapshot(store)
    chat.agents.append(agent("bob"))  # a second 'bob' in the chat: ambiguous
    for message, sender in [
        ({**remember, "name": "nobody"}, manager),
        ({**remember, "name": EXECUTOR}, manager),  # never the executor's own identity
        (remember, manager),  # no name
        ({**remember, "name": "bob"}, manager),
        ({**remember, "name": "alice"}, None),  # no sender
    ]:
        assert execute(message, sender).startswith("ERROR:"), message
    assert snapshot(store) == before
    assert [c.tool_name for c in store.operator.tool_history("team:alice")] == ["memory_remember"] * 2
    assert store.operator.tool_history("team:bob") == []


def test_attach_a_pattern_twice_changes_nothing_and_detach_undoes_it(store: SharedMemoryStore) -> None:
    alice = agent("alice", tool_call("memory_search", query="anything"), "Ok.")
    bob = agent("bob", "Ok.")
    p = pattern("round_robin", [alice, bob])
    first = store.attach(p, group_id="crew")
    assert store.attach(p, group_id="crew").group_id == first.group_id
    assert store.attach([alice, bob], group_id=first.group_id).agents.keys() == {"alice", "bob"}
    *_, executor, _, manager, _, _, _, _ = p.prepare_group_chat(max_rounds=5, messages="Go.")
    original = [entry["reply_func"] for entry in executor._reply_func_list]
    alice.send("Starting.", manager, request_reply=False)
    wrapped = [entry["reply_func"] for entry in executor._reply_func_list]
    assert len(wrapped) == len(original) and all(w != o for w, o in zip(wrapped, original, strict=True))
    bob.send("Me too.", manager, request_reply=False)  # wrapped once only
    assert [entry["reply_func"] for entry in executor._reply_func_list] == wrapped
    assert sorted(store.detach(p)) == ["alice", "bob"]
    assert [entry["reply_func"] for entry in executor._reply_func_list] == original
    assert store.operator.members("crew") == {"crew:alice", "crew:bob"}  # shared state: it stays
    assert not set(TOOL_NAMES) & set(alice.function_map) and alice.system_message == "You are alice."


def test_concurrent_pattern_chats_keep_their_askers_apart(store: SharedMemoryStore) -> None:
    """Two async pattern chats at once on one store: each call runs for its own asker."""

    def team(prefix: str) -> Pattern:
        first = agent(f"{prefix}1", tool_call("memory_remember", fact=f"{prefix} first note", scope="agent"))
        second = agent(f"{prefix}2", tool_call("memory_remember", fact=f"{prefix} second note", scope="agent"))
        p = pattern("default", [first, second])
        store.attach(p, group_id="crew")
        return p

    async def both() -> None:
        await asyncio.gather(*(a_initiate_group_chat(team(x), messages="Go.", max_rounds=8) for x in ("a", "b")))

    asyncio.run(both())
    for name in ("a1", "a2", "b1", "b2"):
        notes = store.as_agent(f"crew:{name}").search("note", "agent")
        assert [(h.fact.content, h.fact.created_by) for h in notes] == [
            (f"{name[0]} {'first' if name[1] == '1' else 'second'} note", f"crew:{name}")
        ]
        assert [c.tool_name for c in store.operator.tool_history(f"crew:{name}")] == ["memory_remember"]


def test_the_store_does_not_keep_a_finished_chat_alive(store: SharedMemoryStore) -> None:
    def chat() -> weakref.ref[GroupToolExecutor]:
        alice, bob = agent("alice"), agent("bob")
        p = pattern("default", [alice, bob])
        store.attach(p, group_id="crew")
        *_, executor, _, manager, _, _, _, _ = p.prepare_group_chat(max_rounds=5, messages="Go.")
        alice.send("Starting.", manager, request_reply=False)  # the executor is wrapped
        return weakref.ref(executor)

    executor = chat()
    gc.collect()
    assert executor() is None  # the store (alive) holds its chats' executors weakly
