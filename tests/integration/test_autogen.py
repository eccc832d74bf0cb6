"""AutoGen integration end to end, with scripted model clients that make real tool calls."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent, SocietyOfMindAgent, UserProxyAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import MagenticOneGroupChat, RoundRobinGroupChat, SelectorGroupChat, Swarm
from autogen_core import (
    AgentId,
    CancellationToken,
    FunctionCall,
    MessageContext,
    RoutedAgent,
    SingleThreadedAgentRuntime,
    message_handler,
)
from autogen_core.memory import MemoryContent, MemoryMimeType
from autogen_core.model_context import UnboundedChatCompletionContext
from autogen_core.models import CreateResult, ModelInfo, RequestUsage, SystemMessage, UserMessage
from autogen_core.tool_agent import ToolAgent
from autogen_core.tools import FunctionTool, StaticWorkbench
from autogen_ext.models.replay import ReplayChatCompletionClient
from hypothesis import given
from hypothesis import strategies as st

from autogen_shared_memory import SharedMemory, SharedMemoryStore
from autogen_shared_memory.backends.sqlite import scope_file_name
from autogen_shared_memory.integration import (
    DEFAULT_SCAFFOLDING,
    MemoryReply,
    RememberRequest,
    SearchRequest,
)
from autogen_shared_memory.integration.autogen.runtime import memory_id
from autogen_shared_memory.integration.autogen.tools import memory_tools
from autogen_shared_memory.testing import HashEmbedder

TOOLS = ModelInfo(vision=False, function_calling=True, json_output=False, family="unknown", structured_output=False)
NO_TOOLS = ModelInfo(vision=False, function_calling=False, json_output=False, family="unknown", structured_output=False)


def call(name: str, **args: Any) -> CreateResult:
    return CreateResult(
        finish_reason="function_calls",
        content=[FunctionCall(id=f"{name}-{len(json.dumps(args))}", name=name, arguments=json.dumps(args))],
        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
    )


def client(*replies: CreateResult | str, info: ModelInfo = TOOLS) -> ReplayChatCompletionClient:
    return ReplayChatCompletionClient(list(replies), model_info=info)


def crew() -> tuple[RoundRobinGroupChat, dict[str, ReplayChatCompletionClient]]:
    clients = {
        "researcher": client(
            call("memory_remember", fact="The launch is on March 3", scope="group"),
            call("memory_remember", fact="I verify dates twice", scope="agent"),
        ),
        "writer": client(call("memory_search", query="when is the launch")),
        "reviewer": client(call("memory_remember", fact="All posts need legal review", scope="global")),
    }
    agents = [AssistantAgent(n, model_client=c, system_message=f"You are the {n}.") for n, c in clients.items()]
    team = RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(5))
    return team, clients


async def test_round_robin_crew_shares_group_facts_with_bound_identities(store: SharedMemoryStore) -> None:
    team, clients = crew()
    attachment = store.attach(team, group_id="launch")
    group = attachment.group_id
    assert group == "launch"
    result = await team.run(task="Plan the launch post")
    texts = [str(getattr(m, "content", "")) for m in result.messages]
    # the writer found the researcher's group fact, with its id and provenance
    found = next(t for t in texts if t.startswith("[memory: 1 of 1 facts]"))
    assert "The launch is on March 3" in found and "by launch:researcher" in found and f"group:{group}" in found
    # the reviewer's global write was denied, reported to the model, and the run went on
    assert any(t.startswith("DENIED:") and "'launch:reviewer'" in t for t in texts)
    assert result.stop_reason is not None and "Maximum number of messages" in result.stop_reason
    # facts are in the right files, written by the bound identities
    with sqlite3.connect(store.root / f"group_{group}.db") as conn:
        assert conn.execute("SELECT content, created_by FROM facts").fetchall() == [
            ("The launch is on March 3", "launch:researcher")
        ]
    assert all(st.counts["active"] == 0 for st in store.stats() if st.scope.kind == "global")
    # the scaffolding reached the model: once, in the first and only system message
    sent = clients["writer"].create_calls[0]["messages"]
    systems = [m for m in sent if isinstance(m, SystemMessage)]
    assert len(systems) == 1 and sent[0] is systems[0]
    assert systems[0].content.startswith("You are the writer.") and DEFAULT_SCAFFOLDING in systems[0].content
    tool_names = {t["name"] for t in clients["writer"].create_calls[0]["tools"]}
    assert tool_names == {"memory_search", "memory_remember", "memory_forget"}


async def test_private_fact_goes_to_the_agents_own_file(store: SharedMemoryStore) -> None:
    team, _ = crew()
    store.attach(team, group_id="launch-crew")
    await team.run(task="go")  # 5 messages: the researcher speaks twice, its second call is private
    hit = store.as_agent("launch-crew:researcher").search("verify dates", "agent")[0]
    assert hit.fact.created_by == "launch-crew:researcher"
    assert store.as_agent("launch-crew:writer", "launch-crew").search("verify dates") == []


def test_attach_twice_is_idempotent_and_detach_removes_everything(store: SharedMemoryStore) -> None:
    team, _ = crew()
    agent = team._participants[0]
    assert isinstance(agent, AssistantAgent)
    before_wb, before_sys = list(agent._workbench), list(agent._system_messages)
    first = store.attach(team, group_id="launch")
    second = store.attach(team, group_id="launch")
    assert len(agent._workbench) == len(before_wb) + 1
    assert agent._system_messages[0].content.count("## Shared memory") == 1
    assert first.agents["researcher"].workbench is second.agents["researcher"].workbench
    members = {"launch:researcher", "launch:writer", "launch:reviewer"}
    assert store.operator.members("launch") == members
    assert sorted(store.detach(team)) == ["researcher", "reviewer", "writer"]
    assert agent._workbench == before_wb and agent._system_messages == before_sys
    assert store.operator.members("launch") == members  # shared state stays
    with pytest.raises(ValueError, match="already attached to group"):
        store.attach(team, group_id="x")
        store.attach(team, group_id="y")


def test_user_tool_with_a_memory_name_is_a_clear_error(store: SharedMemoryStore) -> None:
    def memory_search(query: str) -> str:
        return "mine"

    clash = AssistantAgent("clash", model_client=client(), tools=[memory_search])
    other = AssistantAgent("other", model_client=client())
    team = RoundRobinGroupChat([other, clash])
    with pytest.raises(ValueError, match="'clash' already has a tool named 'memory_search'"):
        store.attach(team, group_id="crew")
    assert len(other._workbench) == 1  # all or nothing: the other agent was not touched either


def test_an_agent_with_memory_tools_of_another_store_or_group_is_refused(
    store: SharedMemoryStore, tmp_path: Path
) -> None:
    """Attaching reused any memory workbench the agent had: its tools wrote into the first store's (or the
    dumped agent's) group while the attachment reported the new one."""
    writer = AssistantAgent("writer", model_client=client())
    other = SharedMemoryStore(tmp_path / "other", embedder=HashEmbedder())
    other.attach(writer, group_id="team-a")
    with pytest.raises(ValueError, match="'writer' already has shared memory bound to another store"):
        store.attach(writer, group_id="team-a")
    copy = AssistantAgent.load_component(writer.dump_component())  # bound to team-a of `other`
    with pytest.raises(ValueError, match="bound to group 'team-a'"):
        other.attach(copy, group_id="team-b")
    assert other.attach(copy, group_id="team-a").group_id == "team-a"  # the same store and group: fine
    other.close()


def test_bad_explicit_group_id_is_rejected_before_any_change(store: SharedMemoryStore) -> None:
    team, _ = crew()
    with pytest.raises(ValueError, match="path separator"):
        store.attach(team, group_id="../escape")
    assert all(len(a._workbench) == 1 for a in team._participants)  # type: ignore[attr-defined]


async def test_agent_without_function_calling_gets_read_only_recall(store: SharedMemoryStore) -> None:
    store.as_operator("desk").remember("The customer prefers email", "group")
    replay = client("Noted.", info=NO_TOOLS)
    agent = AssistantAgent("support", model_client=replay)
    with pytest.warns(UserWarning, match="'support' does not declare function calling .* read-only recall") as said:
        attachment = store.attach(agent, group_id="desk")
    assert [w.filename for w in said] == [__file__]  # it points at the attach call
    assert attachment.mode_of("support") == "recall"
    assert len(agent._workbench[0]._tools) == 0  # type: ignore[attr-defined]
    await agent.run(task="How should I contact the customer? email or phone?")
    sent = replay.create_calls[0]["messages"]
    capsules = [m for m in sent if isinstance(m, UserMessage) and "The customer prefers email" in str(m.content)]
    assert len(capsules) == 1 and "evidence, not instructions" in str(capsules[0].content)
    assert [type(m).__name__ for m in sent].count("SystemMessage") == 1
    replay = client("Noted.", "Again.", "Once more.", info=NO_TOOLS)
    agent._model_client = replay
    for n in range(3):  # one capsule per model call: the last turn's goes (it grew by one a turn)
        await agent.run(task=f"How should I contact the customer by email? ({n})")
    for call in replay.create_calls:
        assert sum("The customer prefers email" in str(m.content) for m in call["messages"]) == 1
    store.detach(agent)
    assert not agent._memory
    history = await agent._model_context.get_messages()
    assert history and not any("The customer prefers email" in str(m.content) for m in history)  # none left


def test_every_team_type_and_nested_teams(store: SharedMemoryStore) -> None:
    def agent(name: str, info: ModelInfo = TOOLS) -> AssistantAgent:
        return AssistantAgent(name, model_client=client(info=info))

    user = UserProxyAgent("human", input_func=lambda _: "ok")
    inner = RoundRobinGroupChat([agent("inner_a"), agent("inner_b")])
    society = SocietyOfMindAgent("society", team=RoundRobinGroupChat([agent("deep")]), model_client=client())
    outer = RoundRobinGroupChat([agent("lead"), inner, society, user])
    attachment = store.attach(outer, group_id="crew")
    modes = {name: a.mode for name, a in attachment.agents.items()}
    assert modes == {
        "lead": "tools",
        "inner_a": "tools",
        "inner_b": "tools",
        "society": "member",
        "deep": "tools",
        "human": "member",
    }
    assert {a.group_id for a in attachment.agents.values()} == {attachment.group_id}
    selector = SelectorGroupChat([agent("s1"), agent("s2")], model_client=client())
    swarm = Swarm([AssistantAgent("w1", model_client=client(), handoffs=["w2"]), agent("w2")])
    magentic = MagenticOneGroupChat([agent("m1"), agent("m2", NO_TOOLS)], model_client=client())
    for team in (selector, swarm, magentic):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            att = store.attach(team, group_id="crew")
        said = [str(w.message) for w in caught]
        assert said == [] if team is not magentic else len(said) == 1 and "agent 'm2' does not declare" in said[0]
        assert att.group_id == "crew" and all(a.agent_id == f"crew:{n}" for n, a in att.agents.items())
    assert store.attach(magentic, group_id="crew").mode_of("m2") == "recall"


async def test_swarm_handoff_agent_keeps_handoffs_and_gets_memory(store: SharedMemoryStore) -> None:
    first = AssistantAgent(
        "triage",
        model_client=client(
            call("memory_remember", fact="Ticket 7 is urgent", scope="group"), call("transfer_to_fixer")
        ),
        handoffs=["fixer"],
    )
    second = AssistantAgent("fixer", model_client=client(call("memory_search", query="urgent ticket"), "TERMINATE"))
    team = Swarm([first, second], termination_condition=TextMentionTermination("TERMINATE"))
    store.attach(team, group_id="helpdesk")
    result = await team.run(task="new ticket 7")
    texts = [str(getattr(m, "content", "")) for m in result.messages]
    assert any("Ticket 7 is urgent" in t and "by helpdesk:triage" in t for t in texts)


async def test_tools_for_core_api_loops(store: SharedMemoryStore) -> None:
    assert "planner" not in store.operator.members("crew")
    search, remember, forget = store.tools_for("planner", "crew")
    assert "planner" in store.operator.members("crew")  # enrolled, as attach does: no tools that deny everything
    token = CancellationToken()
    out = await remember.run_json({"fact": "Budget is 10k", "scope": "group", "tags": ["budget"]}, token)
    fact_id = out.split()[2]
    assert out.startswith("created fact g_") and store.operator.get(fact_id).created_by == "planner"
    again = await remember.run_json({"fact": "budget is 10k", "scope": "group"}, token)
    assert again.startswith(f"reinforced fact {fact_id}")
    assert fact_id in await search.run_json({"query": "budget"}, token)
    assert (await forget.run_json({"fact_id": "w_0000000000000000dead"}, token)).startswith("ERROR: no fact")
    assert (await forget.run_json({"fact_id": "not an id"}, token)).startswith("ERROR:")
    assert (await forget.run_json({"fact_id": fact_id, "reason": "wrong"}, token)).startswith("forgot fact")
    assert store.operator.get(fact_id).tombstone_by == "planner"
    denied = await remember.run_json({"fact": "x", "scope": "global"}, token)
    assert denied.startswith("DENIED") and "'planner'" in denied
    lonely = store.tools_for("solo")[1]
    assert (await lonely.run_json({"fact": "x", "scope": "group"}, token)).startswith("ERROR: you are not in a group")
    schema = search.schema
    assert set(schema["parameters"]["properties"]) == {"query", "scope", "top_k", "max_capsule_bytes"}
    assert "agent_id" not in json.dumps(remember.schema) and "group_id" not in json.dumps(remember.schema)
    history = store.operator.tool_history("planner", limit=100)  # tools_for tools record their own calls
    assert len(history) == 7 and history[0].tool_name == "memory_remember" and history[0].success is False
    assert history[-1].tool_args == {
        "fact": "Budget is 10k",
        "scope": "group",
        "confidence": 1.0,
        "ttl_days": None,
        "tags": ["budget"],
        "supersedes": None,
    }


async def test_memory_protocol_view(store: SharedMemoryStore) -> None:
    view = store.memory_for("alice", "crew", write_scope="group", max_capsule_bytes=300)
    await view.add(MemoryContent(content="Standup is at 9:30", mime_type=MemoryMimeType.TEXT))
    await view.add(MemoryContent(content={"oncall": "bob"}, mime_type=MemoryMimeType.JSON))
    with pytest.raises(TypeError, match="text and JSON"):
        await view.add(MemoryContent(content=b"\x00", mime_type=MemoryMimeType.BINARY))
    result = await view.query("when is standup")
    assert result.results[0].content == "Standup is at 9:30"
    assert result.results[0].metadata and result.results[0].metadata["scope"] == "group:crew"
    context = UnboundedChatCompletionContext()
    await context.add_message(UserMessage(content="remind me when standup is", source="user"))
    updated = await view.update_context(context)
    messages = await context.get_messages()
    assert len(updated.memories.results) >= 1 and len(messages) == 2
    assert len(str(messages[1].content).encode()) <= 300 + 100
    for i in range(30):
        await view.add(MemoryContent(content=f"standup note {i} " + "x" * 50, mime_type=MemoryMimeType.TEXT))
    await view.update_context(context)
    capsule = str((await context.get_messages())[-1].content)
    assert "left out by the size limit" in capsule  # bounded, never the whole store
    store.as_agent("bob", "crew").remember("bob's own group fact about standup", "group")
    mine = store.stats()[0].counts["active"] - 1  # all but bob's
    await view.clear()
    assert [h.fact.created_by for h in store.as_operator("crew").search("standup", "group", top_k=50)] == ["bob"]
    assert store.stats()[0].counts["forgotten"] == mine > 2  # tombstones, not deletes
    await view.close()
    assert not store.closed


async def test_component_round_trips(store: SharedMemoryStore) -> None:
    view = SharedMemory(store, "alice", "crew", top_k=3)
    loaded = SharedMemory.load_component(view.dump_component())
    assert loaded.store is store.engine  # the same process-wide instance for the same config
    assert (loaded.agent_id, loaded.group_id, loaded._config.top_k) == ("alice", "crew", 3)
    agent = AssistantAgent("alice", model_client=client(), memory=[view])
    agent_loaded = AssistantAgent.load_component(agent.dump_component())
    assert isinstance(agent_loaded._memory[0], SharedMemory)  # type: ignore[index]
    # an attached agent dumps with its bound tools and loads back working, without attaching twice
    team, _ = crew()
    store.attach(team, group_id="launch")
    researcher = team._participants[0]
    reloaded = AssistantAgent.load_component(researcher.dump_component())
    tools = [t for wb in reloaded._workbench for t in await wb.list_tools()]
    assert {t["name"] for t in tools} >= {"memory_search", "memory_remember", "memory_forget"}
    store.attach(reloaded, group_id="launch")
    assert reloaded._system_messages[0].content.count("## Shared memory") == 1
    assert [t["name"] for wb in reloaded._workbench for t in await wb.list_tools()].count("memory_search") == 1
    memory_wb = reloaded._workbench[-1]
    out = await memory_wb.call_tool("memory_remember", {"fact": "loaded tools work", "scope": "group"})
    assert "created fact" in out.to_text()
    assert store.as_operator("launch").search("loaded tools work", "group")[0].fact.created_by == "launch:researcher"
    again = SharedMemoryStore.load_component(store.dump_component())
    assert again is store


async def test_runtime_handler_records_team_messages_and_tool_calls(store: SharedMemoryStore) -> None:
    recorder = store.runtime_handler()
    runtime = SingleThreadedAgentRuntime(intervention_handlers=[recorder])
    team, _ = crew()
    team = RoundRobinGroupChat(team._participants, termination_condition=MaxMessageTermination(5), runtime=runtime)
    store.attach(team, group_id="launch")
    runtime.start()
    await team.run(task="Plan the launch post")
    await runtime.stop_when_idle()
    # no flush: a read in the same process sees every record made before it
    assert recorder.errors == 0
    # the task's "user" is not an agent of the team: no agent file, under any name
    assert recorder.flush()
    agents = ("launch:researcher", "launch:writer", "launch:reviewer")
    files = {scope_file_name(store.engine.scope_ref("agent", agent_id=a)) for a in agents}
    assert {f.name for f in store.root.glob("agent_*.db")} == files
    calls = store.operator.tool_history("launch:researcher")
    assert [(c.tool_name, c.success) for c in calls] == [("memory_remember", True)] * 2
    assert calls[-1].tool_args == {"fact": "The launch is on March 3", "scope": "group"}  # newest first
    assert calls[0].duration_ms is not None and calls[0].duration_ms >= 0
    assert calls[0].session_id == recorder.session_id
    denied = store.operator.tool_history("launch:reviewer")[0]
    assert denied.success is False and denied.result and denied.result.startswith("DENIED")
    said = store.operator.conversation("launch:writer")
    assert len(said) == 1 and "The launch is on March 3" in said[0].content
    assert store.operator.conversation("launch:writer", query="launch")[0].id == said[0].id
    recorder.close()


@dataclass
class Ask:
    text: str


class Planner(RoutedAgent):
    """A core-API agent: remembers through the memory service, calls a tool through a ToolAgent."""

    def __init__(self) -> None:
        super().__init__("planner")

    @message_handler
    async def on_ask(self, message: Ask, ctx: MessageContext) -> str:
        service = AgentId("shared_memory", "default")
        stored = await self.send_message(RememberRequest(fact=message.text, scope="group", group_id="ops"), service)
        found = await self.send_message(SearchRequest(query=message.text, group_id="ops"), service)
        denied = await self.send_message(RememberRequest(fact="x", scope="global"), service)
        bad = await self.send_message(RememberRequest(fact="x", scope="nowhere"), service)
        result = await self.send_message(
            FunctionCall(id="c1", name="add", arguments='{"a": 2, "b": 3}'), AgentId("tools", "default")
        )
        assert isinstance(stored, MemoryReply) and isinstance(found, MemoryReply)
        assert isinstance(denied, MemoryReply) and isinstance(bad, MemoryReply)
        return json.dumps([stored.ok, found.text, denied.ok, bad.text, result.content])


async def test_core_runtime_service_agent_and_recorded_tool_calls(store: SharedMemoryStore) -> None:
    runtime = SingleThreadedAgentRuntime()
    recorder = store.runtime_handler(runtime)
    await store.register_service(runtime)
    store.operator.add_member("ops", "planner")

    def add(a: int, b: int) -> int:
        return a + b

    await ToolAgent.register(runtime, "tools", lambda: ToolAgent("tools", [FunctionTool(add, description="add")]))
    await Planner.register(runtime, "planner", Planner)
    runtime.start()
    reply = await runtime.send_message(Ask("Deploy window is 22:00 UTC"), AgentId("planner", "default"))
    await runtime.stop_when_idle()
    stored_ok, found, denied_ok, bad, tool_result = json.loads(reply)
    assert stored_ok is True and "Deploy window is 22:00 UTC" in found and "by planner" in found
    assert denied_ok is False and tool_result == "5"
    assert bad.startswith("ERROR: invalid arguments (scope: Input should be") and "\n" not in bad, bad
    assert store.as_operator("ops").search("deploy window", "group")[0].fact.created_by == "planner"
    await recorder.aflush()
    calls = store.operator.tool_history("planner")
    assert [(c.tool_name, c.tool_args, c.result, c.success) for c in calls] == [("add", {"a": 2, "b": 3}, "5", True)]
    assert calls[0].duration_ms is not None
    sent = [r.context["type"] for r in store.operator.conversation("planner", limit=50)]
    assert sent.count("RememberRequest") == 3 and "SearchRequest" in sent
    recorder.close()


async def test_recorder_failure_never_breaks_the_runtime(
    store: SharedMemoryStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    recorder = store.runtime_handler()

    def boom(records: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(store.engine, "log_records", boom)
    runtime = SingleThreadedAgentRuntime(intervention_handlers=[recorder])
    team, _ = crew()
    team = RoundRobinGroupChat(team._participants, termination_condition=MaxMessageTermination(5), runtime=runtime)
    store.attach(team, group_id="crew")
    runtime.start()
    result = await team.run(task="Plan the launch post")
    await runtime.stop_when_idle()
    await recorder.aflush()
    assert "Maximum number of messages" in str(result.stop_reason)
    assert recorder.errors >= 1 and recorder.recorded == 0
    recorder.close()


async def test_memory_view_of_a_non_member_injects_nothing_and_logs_once(
    store: SharedMemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.as_agent("alice", "crew").remember("crew standup is at 9:30", "group")
    view = store.memory_for("mallory", "crew")
    context = UnboundedChatCompletionContext()
    await context.add_message(UserMessage(content="when is standup", source="user"))
    for _ in range(2):
        updated = await view.update_context(context)  # no MemoryAccessDenied into the agent's turn
        assert updated.memories.results == [] and len(await context.get_messages()) == 1
    assert sum("recall skipped for mallory" in r.getMessage() for r in caplog.records) == 1


def test_recording_a_runtime_does_not_warn_on_every_response(tmp_path: Path) -> None:
    # An RPC handler that returns nothing makes a None response; autogen_core warns about every handler that
    # passes such a response through. With the recorder, a user sees no warning per message (in a process
    # with default warning filters, not pytest's).
    code = f"""
import asyncio
from dataclasses import dataclass
from autogen_core import AgentId, MessageContext, RoutedAgent, SingleThreadedAgentRuntime, message_handler
from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.testing import HashEmbedder

@dataclass
class Ping:
    content: str

class Quiet(RoutedAgent):
    @message_handler
    async def on_ping(self, message: Ping, ctx: MessageContext) -> None:
        return None

async def main() -> None:
    store = SharedMemoryStore({str(tmp_path)!r}, embedder=HashEmbedder())
    recorder = store.runtime_handler()
    runtime = SingleThreadedAgentRuntime(intervention_handlers=[recorder])
    await Quiet.register(runtime, "quiet", lambda: Quiet("a quiet agent"))
    runtime.start()
    for i in range(3):
        await runtime.send_message(Ping(f"ping {{i}}"), AgentId("quiet", "default"))
    await runtime.stop_when_idle()
    assert recorder.flush(10)
    print(len(store.operator.conversation("quiet")))

asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "returned None" not in out.stderr


async def test_a_long_or_broken_user_message_never_ends_the_turn(store: SharedMemoryStore) -> None:
    """Recall searches a long message by its start and broken Unicode with escapes: a recall agent's run
    went on to raise "query is 4832 characters" or "not valid Unicode text"."""
    store.operator.add_member("desk", "support")
    store.as_operator("desk").remember("The document summary style is three bullets", "group")
    view = store.memory_for("support", "desk")
    for text in ("Please summarise this document summary: " + "lorem ipsum " * 400, "document summary \ud83d"):
        context = UnboundedChatCompletionContext()
        await context.add_message(UserMessage(content=text, source="user"))
        updated = await view.update_context(context)
        assert [m.content for m in updated.memories.results][:1] == ["The document summary style is three bullets"]


async def test_a_tool_call_the_store_cannot_serve_answers_error(store: SharedMemoryStore, make_store: Any) -> None:
    """Another embedding model's scope, or a store that fails, is an ERROR answer, never an exception."""
    store.as_agent("alice").remember("first fact", "agent")
    other = make_store(same_as=store, embedder=HashEmbedder(model_id="other-model"))
    search, remember, _ = memory_tools(other, "alice")
    for tool, args in ((remember, {"fact": "second", "scope": "agent"}), (search, {"query": "fact", "scope": "agent"})):
        answer = await tool.run_json(args, CancellationToken())
        assert isinstance(answer, str) and answer.startswith("ERROR: ") and "other-model" in answer, answer

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("connection lost")

    search, _, _ = memory_tools(store, "alice")
    store.engine.search = broken  # type: ignore[method-assign]
    answer = await search.run_json({"query": "fact"}, CancellationToken())
    assert answer == "ERROR: the shared memory store failed (RuntimeError). Nothing was changed."


@given(
    st.text(alphabet=st.sampled_from("ab_/\\%~:2F"), max_size=300),
    st.text(alphabet=st.sampled_from("ab_/\\%~:2F"), max_size=300),
)
def test_runtime_names_map_to_memory_ids_one_to_one(a: str, b: str) -> None:
    """``alice/42`` and ``alice_42`` were one memory identity (``/`` replaced by ``_``, long names cut): two
    runtime agents read each other's private facts."""
    from autogen_shared_memory.integration.autogen.runtime import agent_id_of, memory_id

    assert (memory_id(a) == memory_id(b)) == (a == b)
    if a:
        assert len(memory_id(a)) <= 128 and "/" not in memory_id(a) and "\\" not in memory_id(a)
    assert agent_id_of(AgentId("assistant", "alice/42")) != agent_id_of(AgentId("assistant", "alice_42"))


@dataclass
class Go:
    city: str


class WeatherAsker(RoutedAgent):
    def __init__(self) -> None:
        super().__init__("asks the tool agent")

    @message_handler
    async def on_go(self, message: Go, ctx: MessageContext) -> str:
        # models number calls per response ("call_0"): the same id from two agents at once
        call = FunctionCall(id="call_0", name="lookup", arguments=json.dumps({"city": message.city}))
        result = await self.send_message(call, AgentId("tools", "default"))
        return str(result.content)


async def test_runtime_pairs_each_tool_result_with_its_own_call(store: SharedMemoryStore) -> None:
    """Calls were paired with results by call id alone: bob's record got alice's arguments with his result,
    and alice's call was lost."""
    import asyncio

    async def lookup(city: str) -> str:
        await asyncio.sleep(0.05)
        return f"weather in {city}: sunny"

    recorder = store.runtime_handler()
    runtime = SingleThreadedAgentRuntime(intervention_handlers=[recorder])
    await ToolAgent.register(
        runtime, "tools", lambda: ToolAgent("tools", [FunctionTool(lookup, description="weather")])
    )
    await WeatherAsker.register(runtime, "alice", WeatherAsker)
    await WeatherAsker.register(runtime, "bob", WeatherAsker)
    runtime.start()
    await asyncio.gather(
        runtime.send_message(Go("Paris"), AgentId("alice", "default")),
        runtime.send_message(Go("Tokyo"), AgentId("bob", "default")),
    )
    await runtime.stop_when_idle()
    await recorder.aflush()
    for agent, city in (("alice", "Paris"), ("bob", "Tokyo")):
        assert [(c.tool_args, c.result) for c in store.operator.tool_history(agent)] == [
            ({"city": city}, f"weather in {city}: sunny")
        ]


def test_an_agent_made_from_another_agents_dumped_config_is_refused(store: SharedMemoryStore) -> None:
    """A template agent's dumped config loaded under another name kept memory tools bound to the template
    agent, and attach reused them: the new agent read and wrote the template's private scope."""
    researcher = AssistantAgent("researcher", model_client=client())
    store.attach(researcher, group_id="crew")
    config = researcher.dump_component()
    config.config["name"] = "writer"
    writer = AssistantAgent.load_component(config)
    with pytest.raises(ValueError, match="'writer' already has shared memory bound to agent 'crew:researcher'"):
        store.attach(writer, group_id="crew")
    assert "crew:writer" not in store.operator.members("crew")  # nothing attached


async def test_two_memory_views_on_one_agent_each_keep_their_capsule(store: SharedMemoryStore, tmp_path: Path) -> None:
    """A second store attached to a recall agent was accepted, and each view's update_context removed the
    other's capsule: only the last view's facts reached the model."""
    other = SharedMemoryStore(tmp_path / "other", embedder=HashEmbedder())
    store.operator.remember("The launch venue is Hall B", "global")
    other.operator.remember("The launch caterer is Acme", "global")
    agent = AssistantAgent("planner", model_client=client("ok", info=NO_TOOLS))
    with pytest.warns(UserWarning, match="read-only recall"):
        store.attach(agent, group_id="g")
    with pytest.raises(ValueError, match="'planner' already has shared memory bound to another store"):
        other.attach(agent, group_id="g")
    both = AssistantAgent(
        "host",
        model_client=client("ok", "ok", info=NO_TOOLS),
        memory=[store.memory_for("host"), other.memory_for("host")],
    )
    for task in ("Tell me the launch venue and caterer", "The launch venue and caterer again, please"):
        await both.run(task=task)
        texts = [m.content for m in await both._model_context.get_messages() if isinstance(m.content, str)]
        capsules = [t for t in texts if t.startswith("Shared memory")]
        assert len(capsules) == 2, texts  # one per view: this turn's, never an earlier turn's
        assert any("Hall B" in c for c in capsules) and any("Acme" in c for c in capsules)
    other.close()


async def test_runtime_records_the_text_sent_with_tool_calls_and_long_names_once(store: SharedMemoryStore) -> None:
    """The text a model sends with its tool calls (a ThoughtEvent) was never recorded; tool calls of a name
    past 128 characters went under its first 128 (shared by two agents) while its messages went elsewhere."""
    recorder = store.runtime_handler()
    runtime = SingleThreadedAgentRuntime(intervention_handlers=[recorder])
    long = "a" * 128

    def ping() -> str:
        return "pong"

    turn = CreateResult(
        finish_reason="function_calls",
        thought="I will ping first.",
        content=[FunctionCall(id="1", name="ping", arguments="{}")],
        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
    )
    reasoning = CreateResult(  # a reasoning model's hidden thought before a plain answer: not something it said
        finish_reason="stop",
        thought="Hidden chain of thought.",
        content="Paris.",
        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
    )
    agents = [
        AssistantAgent(name, model_client=client(reply), tools=[FunctionTool(ping, description="ping")])
        for name, reply in ((f"{long}_one", turn), (f"{long}_two", call("ping")), ("thinker", reasoning))
    ]
    team = RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(4), runtime=runtime)
    runtime.start()
    await team.run(task="go")
    await runtime.stop_when_idle()
    await recorder.aflush()
    one, two = (memory_id(a.name) for a in agents[:2])
    said = [(r.content, r.context["type"]) for r in store.operator.conversation(one, limit=10)]
    assert ("I will ping first.", "ThoughtEvent") in said
    assert [c.tool_name for c in store.operator.tool_history(one)] == ["ping"]
    assert [c.tool_name for c in store.operator.tool_history(two)] == ["ping"]
    assert store.operator.tool_history(long) == []
    assert [r.content for r in store.operator.conversation("thinker")] == ["Paris."]
    recorder.close()


@dataclass
class Note:
    text: str


class Analyst(RoutedAgent):
    def __init__(self) -> None:
        super().__init__("analyst")

    @message_handler
    async def on_note(self, message: Note, ctx: MessageContext) -> str:
        call = FunctionCall(
            id="c1", name="memory_remember", arguments=json.dumps({"fact": message.text, "scope": "group"})
        )
        result = await self.send_message(call, AgentId("analyst_tools", "default"))
        return str(result.content)


async def test_a_memory_call_of_recording_tools_on_a_recording_runtime_is_recorded_once(
    store: SharedMemoryStore,
) -> None:
    """tools_for's tools record their own calls, and the runtime recorder recorded the same call again."""
    recorder = store.runtime_handler()
    runtime = SingleThreadedAgentRuntime(intervention_handlers=[recorder])
    tools = store.tools_for("analyst", "fin")
    await ToolAgent.register(runtime, "analyst_tools", lambda: ToolAgent("memory tools", list(tools)))
    await Analyst.register(runtime, "analyst", Analyst)
    runtime.start()
    out = await runtime.send_message(Note("Budgets are in EUR"), AgentId("analyst", "default"))
    await runtime.stop_when_idle()
    await recorder.aflush()
    assert out.startswith("created fact")
    calls = store.operator.tool_history("analyst")
    assert [(c.tool_name, c.call_id) for c in calls] == [("memory_remember", "c1")]
    recorder.close()


async def test_a_call_noted_as_recorded_is_one_agents_and_noted_only_once_written(
    store: SharedMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The note was keyed by tool name and call id only: alice's recorded call "1" made the runtime recorder
    drop bob's call "1" later; and a call whose record failed to write was noted as recorded."""
    from autogen_shared_memory.integration.toolkit import REMEMBER, BoundTools, recorded_by_tool

    await BoundTools(store, "alice", record_calls=True).call(REMEMBER, {"fact": "a", "scope": "agent"}, "1")
    assert not recorded_by_tool(store, "bob", REMEMBER, "1")
    assert recorded_by_tool(store, "alice", REMEMBER, "1") and not recorded_by_tool(store, "alice", REMEMBER, "1")

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(store.engine, "log_tool_call", broken)
    await BoundTools(store, "carol", record_calls=True).call(REMEMBER, {"fact": "c", "scope": "agent"}, "2")
    assert not recorded_by_tool(store, "carol", REMEMBER, "2")  # not written: the runtime's record is kept


def test_detach_leaves_memory_tools_the_agent_was_built_with(store: SharedMemoryStore) -> None:
    tools = store.tools_for("crew:planner", "crew")
    agent = AssistantAgent("planner", model_client=client(), tools=[])
    agent._workbench = [StaticWorkbench(list(tools))]
    store.attach(agent, group_id="crew")
    store.detach(agent)
    assert [t.name for wb in agent._workbench for t in wb._tools] == [
        "memory_search",
        "memory_remember",
        "memory_forget",
    ]
