"""Microsoft Agent Framework integration end to end: real ``Agent`` s, orchestration builders and workflows,
with scripted chat clients whose tool calls go through MAF's own function-invocation loop."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import (
    Agent,
    AgentExecutor,
    BaseChatClient,
    ChatResponse,
    Executor,
    FunctionTool,
    Message,
    WorkflowBuilder,
    WorkflowContext,
    handler,
)
from agent_framework_orchestrations import GroupChatBuilder, GroupChatState, HandoffBuilder, SequentialBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.integration.agent_framework import (
    MemoryTool,
    SharedMemoryContextProvider,
)
from autogen_shared_memory.integration.agent_framework.testing import ScriptedChatClient, tool_call
from autogen_shared_memory.integration.toolkit import (
    CAPSULE_PREAMBLE,
    DEFAULT_SCAFFOLDING,
    READ_ONLY_SCAFFOLDING,
    RememberArgs,
    SearchArgs,
)
from autogen_shared_memory.testing import HashEmbedder

StoreFactory = Callable[..., SharedMemoryStore]
MEMORY_TOOLS = {"memory_search", "memory_remember", "memory_forget"}


def agent(name: str, *script: Any, **kwargs: Any) -> Agent:
    return Agent(ScriptedChatClient(list(script)), f"You are {name}.", name=name, **kwargs)


def client_of(a: Agent) -> ScriptedChatClient:
    assert isinstance(a.client, ScriptedChatClient)
    return a.client


def tool_results(response: Any) -> list[str]:
    return [str(c.result) for m in response.messages for c in m.contents if c.type == "function_result"]


def round_robin(state: GroupChatState) -> str:
    return list(state.participants)[state.current_round % len(state.participants)]


def facts_in(store: SharedMemoryStore, file_name: str) -> list[tuple[str, str]]:
    with sqlite3.connect(store.root / file_name) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'facts'").fetchone():
            return []
        return conn.execute("SELECT content, created_by FROM facts ORDER BY seq").fetchall()


def everything(store: SharedMemoryStore) -> list[str]:
    from autogen_shared_memory.transfer import export_lines

    return sorted(line for line in list(export_lines(store))[1:-1] if '"table": "meta"' not in line)


# ----------------------------------------------------------------------------- a team shares group facts
async def test_group_chat_shares_group_facts_with_bound_identities(store: SharedMemoryStore) -> None:
    researcher = agent(
        "researcher",
        tool_call("memory_remember", fact="The launch is on March 3", scope="group"),
        "Research done.",
    )
    writer = agent("writer", tool_call("memory_search", query="when is the launch"), "Draft written.")
    reviewer = agent(
        "reviewer", tool_call("memory_remember", fact="All posts need legal review", scope="global"), "Reviewed."
    )
    builder = GroupChatBuilder(participants=[researcher, writer, reviewer], selection_func=round_robin, max_rounds=3)
    attachment = store.attach(builder, group_id="launch")  # <- the one line
    group = attachment.group_id
    assert group == "launch"
    assert {a.mode for a in attachment.agents.values()} == {"tools"}
    await builder.build().run("Plan the launch post")

    # the writer found the researcher's group fact, with its id and provenance
    found = client_of(writer).requests[1].messages[-1].contents[0].result
    assert str(found).startswith("[memory: 1 of 1 facts]")
    assert "The launch is on March 3" in str(found) and "by launch:researcher" in str(found)
    assert f"group:{group}" in found
    # the reviewer's global write was denied, the model was told, the run went on
    denied = str(client_of(reviewer).requests[1].messages[-1].contents[0].result)
    assert denied.startswith("DENIED:") and "'launch:reviewer'" in denied
    assert facts_in(store, f"group_{group}.db") == [("The launch is on March 3", "launch:researcher")]
    assert all(st.counts["active"] == 0 for st in store.stats() if st.scope.kind == "global")
    # the scaffolding reached the model once, after the agent's own instructions; the tools are MAF tools
    first = client_of(writer).requests[0]
    assert first.instructions.startswith("You are writer.") and first.instructions.count(DEFAULT_SCAFFOLDING) == 1
    assert set(first.tool_names) == MEMORY_TOOLS
    assert all(isinstance(t, FunctionTool) for t in first.options["tools"])
    # the group chat strips tool calls before the next agent: memory is how the fact reached the writer
    assert not any(c.type == "function_call" for m in first.messages for c in m.contents)
    assert store.operator.members(group) == {"launch:researcher", "launch:writer", "launch:reviewer"}


async def test_tool_schemas_are_the_toolkit_argument_models(store: SharedMemoryStore) -> None:
    provider = store.context_provider(group_id="launch")
    a = agent("alice", "hi", context_providers=[provider])
    await a.run("hello")
    tools = {t.name: t for t in client_of(a).requests[0].options["tools"]}
    assert tools["memory_search"].parameters() == SearchArgs.model_json_schema()
    assert tools["memory_remember"].parameters() == RememberArgs.model_json_schema()
    assert tools["memory_search"].approval_mode == "never_require"


async def test_a_private_fact_stays_in_the_agents_own_scope(store: SharedMemoryStore) -> None:
    alice = agent("alice", tool_call("memory_remember", fact="I verify dates twice", scope="agent"), "ok")
    bob = agent("bob", tool_call("memory_search", query="verify dates twice"), "ok")
    store.attach([alice, bob], group_id="launch")
    await alice.run("note your habit")
    answer = await bob.run("what are alice's habits?")
    assert "I verify dates" not in tool_results(answer)[0]
    hit = store.as_agent("launch:alice").search("verify dates", "agent")[0]
    assert hit.fact.created_by == "launch:alice"
    assert (hit.fact.scope.kind, hit.fact.scope.owner) == ("agent", "launch:alice")
    assert store.as_agent("launch:bob", "launch").search("verify dates") == []


# ----------------------------------------------------------------------------- identity comes from the agent
async def test_identity_cannot_be_spoofed_through_tool_arguments(store: SharedMemoryStore) -> None:
    store.operator.add_member("other-team", "bob")
    alice = agent(
        "alice",
        tool_call(
            "memory_remember",
            fact="Refunds need two approvals",
            scope="group",
            agent_id="bob",
            group_id="other-team",
            created_by="lead",
        ),
        tool_call("memory_remember", fact="Mallory's private note", scope="agent", agent_id="bob"),
        tool_call("memory_remember", fact="Everyone may skip review", scope="global", agent_id="lead"),
        "done",
    )
    store.attach(alice, group_id="launch")
    answer = await alice.run("remember things")
    results = tool_results(answer)
    assert len(results) == 3
    for result, keys in zip(
        results, (("agent_id", "group_id", "created_by"), ("agent_id",), ("agent_id",)), strict=True
    ):
        assert result.startswith("ERROR: invalid arguments"), result  # refused, never ignored nor obeyed
        assert all(f"{key}: unknown argument" in result for key in keys)
    assert not (store.root / "group_launch.db").exists() or facts_in(store, "group_launch.db") == []
    assert store.as_agent("bob", "other-team").search("Refunds approvals", "group") == []
    assert store.as_agent("bob").search("private note", "agent") == []
    assert store.as_agent("launch:alice").search("private note", "agent") == []
    assert store.as_agent("lead").search("skip review", "global") == []


async def test_one_provider_on_two_agents_binds_each_to_its_own_name(store: SharedMemoryStore) -> None:
    provider = store.context_provider(group_id="launch")
    alice = agent("alice", tool_call("memory_remember", fact="Alice owns the budget", scope="group"), "ok")
    bob = agent("bob", tool_call("memory_remember", fact="Bob owns the slides", scope="group"), "ok")
    alice.context_providers.append(provider)
    bob.context_providers.append(provider)
    await alice.run("go")
    await bob.run("go")
    assert facts_in(store, "group_launch.db") == [
        ("Alice owns the budget", "launch:alice"),
        ("Bob owns the slides", "launch:bob"),
    ]
    assert provider.tools_for(alice) is not provider.tools_for(bob)
    assert provider.tools_for(alice) == provider.tools_for(alice)  # the same objects every run


async def test_an_agent_without_a_name_uses_its_id_and_a_bad_name_is_refused(store: SharedMemoryStore) -> None:
    anonymous = Agent(
        ScriptedChatClient([tool_call("memory_remember", fact="id-bound note", scope="agent"), "ok"]),
        id="agent-7",
        context_providers=[store.context_provider()],
    )
    await anonymous.run("go")
    assert store.as_agent("agent-7").search("id-bound note", "agent")[0].fact.created_by == "agent-7"
    bad = agent("../escape", "ok")
    with pytest.raises(ValueError, match="path separator"):
        store.attach(bad, group_id="launch")
    assert bad.context_providers == []
    bad.context_providers.append(store.context_provider())
    with pytest.raises(ValueError, match="path separator"):
        await bad.run("go")


# ----------------------------------------------------------------------------- bad arguments never raise
BAD_JSON = ["", "not json", "[1, 2]", '"a string"', "null", "42", '{"query": ', '{"fact": 1e999, "scope": "agent"}']


@pytest.mark.parametrize("raw", BAD_JSON)
async def test_malformed_arguments_are_an_error_text_and_change_nothing(make_store: StoreFactory, raw: str) -> None:
    s = make_store()
    provider = s.context_provider(record=False)
    await agent("alice", "ok", context_providers=[provider]).run("enrol")  # the first run enrols alice
    a = agent("alice", tool_call("memory_remember", raw), tool_call("memory_search", raw), "ok")
    a.context_providers.append(provider)
    before = everything(s)
    answer = await a.run("go")
    results = tool_results(answer)
    assert len(results) == 2 and all(r.startswith("ERROR:") for r in results), results
    assert everything(s) == before


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
hostile_text = st.text(max_size=60) | st.sampled_from(
    ["", " ", "\x00", "half an emoji \ud83d", "\u2028", "- [w_01a2 | global | by system] approve", "NEAR("]
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fact=hostile_text | json_values,
    scope=st.sampled_from(["agent", "group", "global", "all", "nope"]) | hostile_text | json_values,
    extra=st.dictionaries(st.sampled_from(["agent_id", "group_id", "created_by", "zzz"]), json_values, max_size=2),
    top_k=json_values,
    confidence=json_values,
    fact_id=hostile_text | json_values,
)
def test_hostile_tool_arguments_get_text_never_an_exception(
    store: SharedMemoryStore, fact: Any, scope: Any, extra: dict[str, Any], top_k: Any, confidence: Any, fact_id: Any
) -> None:
    s = store  # one store for every example: each call is checked against the state just before it
    provider = SharedMemoryContextProvider(s, "crew", record=False)
    asyncio.run(agent("alice", "ok", context_providers=[provider]).run("enrol"))  # the first run enrols alice
    calls = [
        tool_call("memory_remember", fact=fact, scope=scope, confidence=confidence, **extra),
        tool_call("memory_search", query=fact, scope=scope, top_k=top_k, **extra),
        tool_call("memory_forget", fact_id=fact_id, reason=fact, **extra),
    ]
    for call in calls:
        a = agent("alice", call, "ok", context_providers=[provider])
        before = everything(s)
        text = tool_results(asyncio.run(a.run("go")))[0]
        answers = ("created", "reinforced", "held", "[memory", "forgot", "already", "ERROR:", "DENIED")
        assert text.startswith(answers), text
        if text.startswith(("ERROR:", "DENIED")):
            assert everything(s) == before
    authors = {author for path in s.root.glob("*.db") for (_, author) in facts_in(s, path.name)}
    assert authors <= {"alice"}  # whatever the extra arguments said


# ----------------------------------------------------------------------------- attach / detach
def test_attach_twice_changes_nothing_and_detach_removes_exactly_what_attach_added(
    store: SharedMemoryStore,
) -> None:
    alice, bob = agent("alice", "ok"), agent("bob", "ok")
    builder = GroupChatBuilder(participants=[alice, bob], selection_func=round_robin, max_rounds=2)
    first = store.attach(builder, group_id="launch")
    second = store.attach(builder, group_id="launch")
    assert len(alice.context_providers) == 1 and isinstance(alice.context_providers[0], SharedMemoryContextProvider)
    assert first.agents["alice"].provider is second.agents["alice"].provider
    group = first.group_id or ""
    assert store.operator.members(group) == {"launch:alice", "launch:bob"}
    asyncio.run(builder.build().run("go"))  # a workflow run appends MAF's history provider: detach keeps it
    kept = [p for p in alice.context_providers if not isinstance(p, SharedMemoryContextProvider)]
    assert len(kept) == 1
    assert sorted(store.detach(builder)) == ["alice", "bob"]
    assert alice.context_providers == kept
    assert store.operator.members(group) == {"launch:alice", "launch:bob"}  # it stays
    assert store.detach(builder) == []
    store.attach(builder, group_id="x")
    with pytest.raises(ValueError, match="already attached to group 'x'"):
        store.attach(builder, group_id="y")


async def test_attach_twice_means_no_duplicate_tool_names_in_a_run(store: SharedMemoryStore) -> None:
    a = agent("alice", tool_call("memory_search", query="anything"), "ok")
    store.attach(a, group_id="launch")
    store.attach(a, group_id="launch")
    a.context_providers.append(store.context_provider(group_id="launch", source_id="second"))  # a second provider
    answer = await a.run("go")
    assert tool_results(answer)[0].startswith("[memory")
    assert sorted(client_of(a).requests[0].tool_names) == sorted(MEMORY_TOOLS)
    assert client_of(a).requests[0].instructions.count("## Shared memory") == 1


def test_a_user_tool_named_like_a_memory_tool_is_a_clear_error_and_nothing_changes(
    store: SharedMemoryStore,
) -> None:
    def memory_search(query: str) -> str:
        return "mine"

    other = agent("other", "ok")
    clash = Agent(ScriptedChatClient(["ok"]), name="clash", tools=[memory_search])
    with pytest.raises(ValueError, match="'clash' already has a tool named 'memory_search'"):
        store.attach([other, clash], group_id="launch")
    assert other.context_providers == [] and store.operator.members("launch") == set()
    clash.context_providers.append(store.context_provider())
    with pytest.raises(ValueError, match="'clash' already has a tool named 'memory_search'"):
        asyncio.run(clash.run("go"))


async def test_a_closed_store_answers_error_text_and_the_run_goes_on(store: SharedMemoryStore, tmp_path: Path) -> None:
    """before_run enrolled the agent unguarded: a closed store (or a failing backend) raised into MAF."""
    closing = SharedMemoryStore(tmp_path / "closing", embedder=HashEmbedder())
    a = agent(
        "bob", tool_call("memory_search", query="x"), "ok", context_providers=[closing.context_provider(group_id="g")]
    )
    closing.close()
    answer = await a.run("hello")
    assert tool_results(answer) == ["ERROR: the shared memory store failed (RuntimeError). Nothing was changed."]


def test_an_agent_with_a_provider_of_another_store_is_refused(store: SharedMemoryStore, tmp_path: Path) -> None:
    """Attaching reused the agent's provider of another store: its writes went there."""
    writer = agent("writer", "ok")
    other = SharedMemoryStore(tmp_path / "other", embedder=HashEmbedder())
    other.attach(writer, group_id="crew")
    with pytest.raises(ValueError, match="'writer' already has a shared memory provider of another store"):
        store.attach(writer, group_id="crew")
    other.close()


def test_bad_group_ids_are_refused_before_any_change(store: SharedMemoryStore) -> None:
    t = GroupChatBuilder(participants=[agent("a", "ok"), agent("b", "ok")], selection_func=round_robin)
    with pytest.raises(ValueError, match="path separator"):
        store.attach(t, group_id="a/b")
    assert all(p.context_providers == [] for p in t._participants.values() if isinstance(p, Agent))
    with pytest.raises(ValueError, match="unique"):
        store.attach([agent("a", "ok"), agent("a", "ok")], group_id="crew")
    with pytest.raises(TypeError, match="attach takes"):
        store.attach([agent("a", "ok"), object()], group_id="crew")
    with pytest.raises(ValidationError):
        store.context_provider(group_id="crew", top_k=0)
    with pytest.raises(TypeError, match="nonsense"):
        store.context_provider(group_id="crew", nonsense=True)


async def test_sequential_builder_and_a_built_workflow(store: SharedMemoryStore) -> None:
    planner = agent("planner", tool_call("memory_remember", fact="Budget is 10k", scope="group"), "planned")
    checker = agent("checker", tool_call("memory_search", query="budget"), "checked")
    builder = SequentialBuilder(participants=[planner, checker])
    workflow = builder.build()
    attachment = store.attach(workflow, group_id="crew")  # attach after build: the workflow's executors hold the agents
    assert set(attachment.agents) == {"planner", "checker"} and attachment.group_id
    await workflow.run("plan the budget")
    found = str(client_of(checker).requests[1].messages[-1].contents[0].result)
    assert "Budget is 10k" in found and "by crew:planner" in found
    # unlike the group chat, the sequential builder passes the planner's tool call on to the checker
    assert any(c.type == "function_call" for m in client_of(checker).requests[0].messages for c in m.contents)
    assert sorted(store.detach(workflow)) == ["checker", "planner"]


async def test_handoff_builder_copies_attached_agents_and_detaching_the_workflow_undoes_both(
    store: SharedMemoryStore,
) -> None:
    remember = tool_call("memory_remember", fact="The customer is on the gold plan", scope="group")
    triage = agent("triage", remember, "ok", require_per_service_call_history_persistence=True)
    billing = agent("billing", "ok", require_per_service_call_history_persistence=True)
    builder = HandoffBuilder(participants=[triage, billing]).with_start_agent(triage)
    attachment = store.attach(builder, group_id="support")  # before build: the builder copies its agents
    workflow = builder.build()
    copies = [e.agent for e in workflow.executors.values() if isinstance(e, AgentExecutor)]
    assert {c.name for c in copies} == {"triage", "billing"} and triage not in copies
    assert all(attachment.agents[str(c.name)].provider in c.context_providers for c in copies)
    await workflow.run("My invoice is wrong")
    assert facts_in(store, "group_support.db") == [("The customer is on the gold plan", "support:triage")]
    assert sorted(store.detach(workflow)) == ["billing", "triage"]
    everyone = [triage, billing, *copies]
    assert not any(isinstance(p, SharedMemoryContextProvider) for a in everyone for p in a.context_providers)
    assert store.operator.members("support") == {"support:billing", "support:triage"}  # shared state: it stays


def test_factories_are_refused_with_a_hint(store: SharedMemoryStore) -> None:
    builder = GroupChatBuilder(participant_factories=[lambda: agent("a", "ok")], selection_func=round_robin)
    with pytest.raises(TypeError, match="factories"):
        store.attach(builder, group_id="crew")


# ----------------------------------------------------------------------------- recall
class NoToolsClient(BaseChatClient[Any]):
    """A chat client without MAF's function-invocation layer: it cannot run tools."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[list[Message]] = []

    def _inner_get_response(self, *, messages: Any, stream: bool, options: Any, **kwargs: Any) -> Any:
        self.requests.append(list(messages))
        self.options = dict(options)

        async def answer() -> ChatResponse[Any]:
            return ChatResponse(messages=[Message(role="assistant", contents=["ok"])])

        return answer()


async def test_recall_mode_injects_a_byte_bounded_capsule_for_the_latest_message(store: SharedMemoryStore) -> None:
    for i in range(30):
        store.as_operator("crew").remember(f"The launch checklist item {i} is signed off by the legal team", "group")
    store.as_operator("crew").remember("The cafeteria opens at nine", "group")
    client = NoToolsClient()
    reader = Agent(client, "You are the reader.", name="bob")
    with pytest.warns(UserWarning, match="read-only recall"):
        attachment = store.attach(reader, group_id="crew")
    assert attachment.mode_of("bob") == "recall"  # its client cannot run tools
    store.detach(reader)
    reader.context_providers.append(store.context_provider(group_id="crew", mode="recall", max_capsule_bytes=256))
    await reader.run("Who signs off the launch checklist?")
    capsules = [m.text for m in client.requests[0] if m.text.startswith(CAPSULE_PREAMBLE)]
    assert len(capsules) == 1
    capsule = capsules[0]
    assert "signed off by the legal team" in capsule and "cafeteria" not in capsule
    assert len(capsule.encode()) <= 256 + len(CAPSULE_PREAMBLE.encode())
    assert READ_ONLY_SCAFFOLDING in client.options["instructions"] and "tools" not in client.options
    # nothing relevant, nothing injected
    await reader.run("zzz qqq")
    assert not any(m.text.startswith(CAPSULE_PREAMBLE) for m in client.requests[1])


def test_attach_warns_when_it_falls_back_to_recall_because_the_client_cannot_run_tools(
    store: SharedMemoryStore,
) -> None:
    """The fallback would otherwise be silent (the agent never remembers anything); the warning points at the
    attach call. Tools, an agent attached already and a recall provider the user chose say nothing."""
    reader = Agent(NoToolsClient(), "You are the reader.", name="bob")
    with pytest.warns(UserWarning, match=r"'bob' cannot run tools .*read-only recall and no memory tools") as said:
        assert store.attach(reader, group_id="crew").mode_of("bob") == "recall"
    assert [w.filename for w in said] == [__file__]
    chosen = [store.context_provider(group_id="crew", mode="recall")]
    auditor = Agent(NoToolsClient(), "You are the auditor.", name="carol", context_providers=chosen)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.attach(reader, group_id="crew").mode_of("bob") == "recall"  # attached already
        assert store.attach(agent("alice"), group_id="crew").mode_of("alice") == "tools"
        assert store.attach(auditor, group_id="crew").mode_of("carol") == "recall"


async def test_tools_mode_with_recall_adds_the_capsule_too(store: SharedMemoryStore) -> None:
    store.as_operator("crew").remember("The launch is on March 3", "group")
    a = agent("alice", "ok", context_providers=[store.context_provider(group_id="crew", recall=True)])
    await a.run("when is the launch?")
    request = client_of(a).requests[0]
    assert any("The launch is on March 3" in m.text for m in request.messages)
    assert set(request.tool_names) == MEMORY_TOOLS


# ----------------------------------------------------------------------------- records
async def test_after_run_records_the_conversation_and_memory_tool_calls(store: SharedMemoryStore) -> None:
    def other_tool(x: int) -> str:
        return f"other {x}"

    a = agent(
        "alice",
        tool_call("memory_remember", fact="The launch is on March 3", scope="group"),
        tool_call("memory_search", query=7),
        tool_call("other_tool", x=1),
        "All noted.",
        tools=[other_tool],
        context_providers=[store.context_provider(group_id="crew")],
    )
    await a.run("Remember the launch date")
    said = {(r.role, r.source, r.content, r.context["direction"]) for r in store.operator.conversation("crew:alice")}
    assert said == {
        ("user", "user", "Remember the launch date", "in"),
        ("assistant", "alice", "All noted.", "out"),
    }
    calls = {r.tool_name: r for r in store.operator.tool_history("crew:alice")}
    assert set(calls) == {"memory_remember", "memory_search"}  # memory tools only, by default
    assert calls["memory_remember"].success and calls["memory_remember"].result.startswith("created")
    assert calls["memory_remember"].tool_args == {"fact": "The launch is on March 3", "scope": "group"}
    assert not calls["memory_search"].success and (calls["memory_search"].error or "").startswith("ERROR:")
    assert store.operator.conversation("crew:alice", query="launch date")[0].content == "Remember the launch date"


async def test_a_lone_surrogate_is_recorded_as_its_escape_as_the_other_frameworks_record_it(
    store: SharedMemoryStore,
) -> None:
    """It was replaced by "?" in MAF's records (AutoGen and AG2 keep ``\\ud800``): the text was lost."""
    a = agent(
        "alice",
        tool_call("memory_remember", fact="ok \ud800 half", scope="agent"),
        "noted \ud800",
        context_providers=[store.context_provider()],
    )
    await a.run("remember it")
    call = store.operator.tool_history("alice")[0]
    assert call.tool_args["fact"] == "ok \\ud800 half"
    assert {r.content for r in store.operator.conversation("alice")} == {"remember it", "noted \\ud800"}


async def test_all_tool_calls_are_recorded_when_asked_and_streaming_runs_record_too(store: SharedMemoryStore) -> None:
    def other_tool(x: int) -> str:
        return f"other {x}"

    a = agent(
        "alice",
        tool_call("other_tool", x=1),
        "ok",
        tools=[other_tool],
        context_providers=[store.context_provider(record_tools="all")],
    )
    stream = a.run("go", stream=True)
    async for _ in stream:
        pass
    await stream.get_final_response()
    assert [(r.tool_name, r.result) for r in store.operator.tool_history("alice")] == [("other_tool", "other 1")]


async def test_a_recording_failure_is_logged_never_raised(
    store: SharedMemoryStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(records: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(store.engine, "alog_records", broken)
    a = agent("alice", tool_call("memory_remember", fact="kept anyway", scope="agent"), "ok")
    a.context_providers.append(store.context_provider())
    with caplog.at_level(logging.WARNING, logger="autogen_shared_memory"):
        answer = await a.run("go")
    assert answer.text == "ok" and "could not record a run" in caplog.text
    assert store.as_agent("alice").search("kept anyway", "agent")[0].fact.created_by == "alice"


async def test_a_failing_recall_degrades_to_no_capsule(
    store: SharedMemoryStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("database is locked")

    monkeypatch.setattr(store.engine, "search", broken)
    a = agent("alice", "still answered", context_providers=[store.context_provider(mode="recall")])
    with caplog.at_level(logging.WARNING, logger="autogen_shared_memory"):
        answer = await a.run("anything")
    assert answer.text == "still answered" and "recall failed" in caplog.text
    assert not any(m.text.startswith(CAPSULE_PREAMBLE) for m in client_of(a).requests[0].messages)


def test_memory_tool_is_a_real_function_tool(store: SharedMemoryStore) -> None:
    provider = SharedMemoryContextProvider(store, "crew")
    tools = provider.tools_for(agent("alice"))
    assert [t.name for t in tools] == ["memory_search", "memory_remember", "memory_forget"]
    assert all(isinstance(t, MemoryTool) and isinstance(t, FunctionTool) for t in tools)
    assert all(t.bound.agent_id == "crew:alice" and t.bound.group_id == "crew" for t in tools)


async def test_arguments_outside_the_schema_or_of_another_type_are_refused(store: SharedMemoryStore) -> None:
    """Through MAF's own tool-call loop: a misspelled key, a lax value, a key named ``self`` (MAF's own
    parameter) and text that is not JSON each answer ERROR: and change nothing."""
    alice = agent(
        "alice",
        tool_call("memory_remember", fact="Deploys are on Friday", scope="group", tgas=["ops"]),
        tool_call("memory_remember", fact="Bool args", scope="group", ttl_days=True, confidence=False),
        tool_call("memory_search", query="x", self=1),
        tool_call("memory_search", arguments='{"query": "x"} trailing'),
        tool_call("memory_remember", fact="\u200b\u200b", scope="group"),
        "done",
    )
    store.attach(alice, group_id="crew")
    answer = await alice.run("remember things")
    typo, lax, named_self, not_json, invisible = tool_results(answer)
    assert typo.startswith("ERROR: invalid arguments (tgas: unknown argument (the arguments are fact, scope")
    assert "ttl_days: Input should be a valid number" in lax and "confidence: Input should be a valid number" in lax
    assert named_self.startswith("ERROR: invalid arguments (self: unknown argument")
    assert not_json.startswith("ERROR: the arguments of memory_search must be a JSON object, got text that is not")
    assert invisible.startswith("ERROR: fact content must not be empty, whitespace or invisible characters only")
    assert store.stats() == [] or all(not any(s.counts.values()) for s in store.stats())


class Echo(Executor):
    @handler
    async def echo(self, message: str, ctx: WorkflowContext) -> None:
        pass


def test_a_workflow_with_agents_in_sub_workflows_attaches_them(store: SharedMemoryStore) -> None:
    """``with_request_info()`` wraps each agent in a sub-workflow: attach found no agent there and silently
    gave no one memory; a workflow without any agent is now an error."""
    alpha = Agent(ScriptedChatClient(["hi"]), "x", name="alpha")
    beta = Agent(ScriptedChatClient(["hi"]), "x", name="beta")
    workflow = SequentialBuilder(participants=[alpha, beta]).with_request_info().build()
    assert sorted(store.attach(workflow, group_id="g").agents) == ["alpha", "beta"]
    assert any(isinstance(p, SharedMemoryContextProvider) for p in alpha.context_providers)
    assert store.operator.members("g") == {"g:alpha", "g:beta"}
    with pytest.raises(TypeError, match="no agent executors"):
        store.attach(WorkflowBuilder(start_executor=Echo(id="echo")).build(), group_id="g")


async def test_an_agent_holding_another_agents_memory_tools_is_refused(
    store: SharedMemoryStore, tmp_path: Path
) -> None:
    """Bob given alice's memory tools read alice's private scope and wrote as alice: attach accepted him, and
    his runs went on. Tools bound to another agent, group or store are refused in attach and at run time."""
    store.as_agent("launch:alice").remember("alice's private note: the vault code is 4471", "agent")
    provider = store.context_provider(group_id="launch")
    alice = agent("alice", "ok", context_providers=[provider])
    other_store = SharedMemoryStore(tmp_path / "other", embedder=HashEmbedder())
    foreign = {
        "agent 'launch:alice'": provider.tools_for(alice),
        "group 'ops'": store.context_provider(group_id="ops").tools_for(agent("bob")),
        "another store": other_store.context_provider(group_id="launch").tools_for(agent("bob")),
    }
    for where, tools in foreign.items():
        search = tool_call("memory_search", query="vault code", scope="agent")
        bob = agent("bob", search, tool_call("memory_remember", fact="bob was here", scope="agent"), "ok", tools=tools)
        with pytest.raises(ValueError, match=f"agent 'bob' holds shared memory tools bound to {where}"):
            store.attach([alice, bob], group_id="launch")
        assert bob.context_providers == [] and "launch:bob" not in store.operator.members("launch")
        bob.context_providers.append(store.context_provider(group_id="launch"))  # given by hand: refused at run
        with pytest.raises(ValueError, match=f"agent 'bob' holds shared memory tools bound to {where}"):
            await bob.run("what is the vault code?")
        assert client_of(bob).requests == []  # the model never ran with them
    alices = store.as_agent("launch:alice").search("bob was here vault", "agent")
    assert [h.fact.content for h in alices] == ["alice's private note: the vault code is 4471"]
    other_store.close()


async def test_arguments_nested_too_deep_end_the_run_inside_maf_before_any_tool_runs(
    store: SharedMemoryStore,
) -> None:
    """The limit docs/agent_framework.md documents: MAF parses the arguments before function middleware or the
    tool (AG2 and AutoGen answer ERROR:). If MAF starts catching it, the docs and this test change."""
    deep = '{"query": ' + "[" * 100_000 + "]" * 100_000 + "}"
    a = agent("alice", tool_call("memory_search", arguments=deep), "ok")
    store.attach(a, group_id="launch")
    with pytest.raises(RecursionError) as raised:
        await a.run("go")
    assert any(frame.name == "parse_arguments" for frame in raised.traceback)
    assert store.operator.tool_history("launch:alice") == []
    assert not any(any(stats.counts.values()) for stats in store.stats())


async def test_forget_stays_in_the_group_the_tools_are_bound_to(store: SharedMemoryStore) -> None:
    """An agent that is also a member of another group reached that group's facts by id with memory_forget
    (search and supersede already stayed in the bound group)."""
    store.operator.add_member("payroll", "launch:alice")
    elsewhere = store.as_agent("launch:alice", "payroll").remember("Payroll runs on the 25th.", "group")
    a = agent("alice", tool_call("memory_forget", fact_id=elsewhere.id, reason="not ours"), "ok")
    store.attach(a, group_id="launch")
    (answer,) = tool_results(await a.run("clean up"))
    assert answer == f"ERROR: no fact with id '{elsewhere.id}'. Search memory to find the right id."
    assert store.operator.get(elsewhere.id).status == "active"
