"""AG2 (classic ``autogen``) end to end: real ``ConversableAgent`` / ``GroupChat`` / ``GroupChatManager``
classes, with scripted model clients that make real tool calls through AG2's own tool loop."""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any, Literal

import pytest
from autogen import ConversableAgent, GroupChat, GroupChatManager, UserProxyAgent
from autogen.oai.client import PlaceHolderClient
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scripted_agents import agent, model

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.sqlite import scope_file_name
from autogen_shared_memory.integration.ag2 import (
    DEFAULT_SCAFFOLDING,
    READ_ONLY_SCAFFOLDING,
    Attacher,
    asker_of,
)
from autogen_shared_memory.integration.ag2.scripted import ScriptedModelClient, scripted_llm_config, tool_call
from autogen_shared_memory.integration.toolkit import CAPSULE_PREAMBLE, FORGET, REMEMBER, SEARCH, TOOL_NAMES
from autogen_shared_memory.settings import WritePolicy

Mode = Literal["sync", "async"]
StoreFactory = Any


def group(*agents: ConversableAgent, rounds: int) -> tuple[GroupChat, GroupChatManager]:
    chat = GroupChat(list(agents), messages=[], max_round=rounds, speaker_selection_method="round_robin")
    return chat, GroupChatManager(chat, llm_config=False)


def run(mode: Mode, initiator: ConversableAgent, recipient: ConversableAgent, message: str, **kw: Any) -> None:
    if mode == "sync":
        initiator.initiate_chat(recipient, message=message, **kw)
    else:
        asyncio.run(initiator.a_initiate_chat(recipient, message=message, **kw))


def tool_results(chat: GroupChat) -> list[tuple[str, str]]:
    """(executing agent, result) of every tool response in the group chat."""
    return [(m["name"], m["content"]) for m in chat.messages if m.get("role") == "tool"]


def snapshot(store: SharedMemoryStore) -> list[Any]:
    """Every scope's fact counts (scopes without facts left out: a record may create an agent's file)."""
    return sorted((str(st.scope), sorted(st.counts.items())) for st in store.stats() if any(st.counts.values()))


@pytest.fixture
def store(make_store: StoreFactory) -> SharedMemoryStore:
    s: SharedMemoryStore = make_store(policy=WritePolicy(global_writers=["lead"]))
    return s


# ----------------------------------------------------------------------------- the group chat loop
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_group_fact_remembered_by_one_agent_is_recalled_by_another(store: SharedMemoryStore, mode: Mode) -> None:
    alice = agent("alice", tool_call("memory_remember", fact="The launch is on March 3", scope="group"), "Saved.")
    bob = agent("bob", tool_call("memory_search", query="when is the launch"), "March 3.")
    carol = agent("carol", tool_call("memory_remember", fact="Posts need legal review", scope="global"), "Ok.")
    chat, manager = group(alice, bob, carol, rounds=7)
    attachment = store.attach(chat, group_id="crew")
    assert attachment.group_id == "crew"
    assert {attachment.mode_of(n) for n in ("alice", "bob", "carol")} == {"tools"}
    assert store.operator.members("crew") == {"crew:alice", "crew:bob", "crew:carol"}

    run(mode, carol, manager, "Plan the launch post.")  # then alice, bob, carol... each call run by the next
    (ran_remember, remembered), (ran_global, denied), (ran_search, found) = tool_results(chat)
    assert (ran_remember, ran_global, ran_search) == ("bob", "alice", "carol")
    assert remembered.startswith("created fact g_") and f"group:{attachment.group_id}" in remembered
    assert denied.startswith("DENIED:") and "'crew:carol'" in denied
    assert found.startswith("[memory: 1 of 1 facts]") and "The launch is on March 3" in found
    assert "by crew:alice" in found
    # the fact is alice's, in the group's scope; the denied global write left nothing behind
    hit = store.as_agent("crew:bob", attachment.group_id).search("launch", "group")[0]
    assert hit.fact.created_by == "crew:alice"
    assert all(sum(st.counts.values()) == 0 for st in store.stats() if st.scope.kind == "global")
    # what the model saw: the three tools, one system message ending with the scaffolding
    request = model(bob).calls[0]
    assert {t["function"]["name"] for t in request["tools"]} == set(TOOL_NAMES)
    systems = [m for m in request["messages"] if m.get("role") == "system"]
    assert len(systems) == 1 and systems[0]["content"] == f"You are bob.\n\n{DEFAULT_SCAFFOLDING}"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_carols_private_note_lands_in_carols_scope_whoever_executes_it(store: SharedMemoryStore, mode: Mode) -> None:
    """AG2 executes a tool call with the next agent that has the function (here ted), not with carol."""
    carol = agent(
        "carol",
        tool_call("memory_remember", fact="I double-check every date", scope="agent"),
        tool_call("memory_remember", fact="ted's secret is mine now", scope="agent", agent_id="ted"),  # spoof
        "Done.",
    )
    ted = agent("ted", tool_call("memory_search", query="double-check dates"), "Nothing.", then="Ok.")
    chat, manager = group(carol, ted, rounds=8)
    store.attach(chat, group_id="crew")
    run(mode, ted, manager, "Go.")
    executors = [name for name, _ in tool_results(chat)]
    assert executors[:2] == ["ted", "ted"]  # ted ran carol's calls
    facts = store.as_agent("crew:carol").search("double-check every date", "agent")
    assert [h.fact.created_by for h in facts] == ["crew:carol"] and facts[0].fact.scope.owner == "crew:carol"
    assert store.as_agent("crew:carol").search("secret", "agent") == []  # an agent_id argument is refused
    assert tool_results(chat)[1][1].startswith("ERROR: invalid arguments (agent_id: unknown argument")
    assert store.as_agent("crew:ted").search("date secret", "agent") == []  # nothing was written as ted
    # ted's own search (run for ted, by carol) does not see carol's private notes
    assert tool_results(chat)[2][1] == "[memory: no matching facts]"
    # the calls are in carol's tool history, none in ted's
    assert [c.tool_name for c in store.operator.tool_history("crew:carol")] == ["memory_remember", "memory_remember"]
    assert [c.tool_name for c in store.operator.tool_history("crew:ted")] == ["memory_search"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_speaker_given_the_floor_again_runs_its_own_call_for_itself(store: SharedMemoryStore, mode: Mode) -> None:
    # GroupChat may pick the speaker of a tool call to run it ("auto" or "random" selection, say): its own copy
    # of the message has no name; the call still runs for it, and for nobody else.
    alice = agent("alice", tool_call("memory_remember", fact="I prefer tabs", scope="agent"), "Saved.", then="Ok.")
    bob = agent("bob", then="Ok.")
    order = iter([alice, alice, bob])
    chat = GroupChat([alice, bob], messages=[], max_round=4, speaker_selection_method=lambda *_: next(order))
    manager = GroupChatManager(chat, llm_config=False)
    store.attach(chat, group_id="crew")
    run(mode, bob, manager, "Go.")
    assert tool_results(chat) == [
        (
            "alice",
            f"created fact {store.as_agent('crew:alice').search('tabs', 'agent')[0].fact.id} in scope agent:crew:alice",
        )
    ]
    assert store.as_agent("crew:bob").search("tabs", "agent") == []
    # the speaker's own message is told by the very list it sent, not by equal contents
    own = alice.chat_messages[manager][1]
    assert own.get("name") is None and asker_of(own, manager, alice) is alice
    copy = {**own, "tool_calls": [dict(c) for c in own["tool_calls"]]}
    assert isinstance(asker_of(copy, manager, alice), str) and isinstance(asker_of(own, manager, bob), str)
    store.detach(chat)
    assert all(h.__name__ != "note_sent" for h in alice.hook_lists["process_message_before_send"])


def test_a_speaker_cannot_take_another_name_in_a_group_chat(store: SharedMemoryStore) -> None:
    spoof = {**tool_call("memory_remember", fact="mallory wrote this", scope="agent"), "name": "alice"}
    mallory = agent("mallory", spoof, "Done.")
    alice = agent("alice", then="Ok.")
    chat, manager = group(mallory, alice, rounds=4)
    store.attach(chat, group_id="crew")
    alice.initiate_chat(manager, message="Go.")
    assert store.as_agent("crew:alice").search("mallory wrote", "agent") == []  # GroupChat.append names the speaker
    assert store.as_agent("crew:mallory").search("mallory wrote", "agent")[0].fact.created_by == "crew:mallory"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_agent_chat_runs_the_call_for_the_sender(store: SharedMemoryStore, mode: Mode) -> None:
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False)
    carol = agent("carol", tool_call("memory_remember", fact="The user likes short answers", scope="agent"), "Ok.")
    user_system = user.system_message
    attachment = store.attach([user, carol], group_id="desk")
    assert attachment.mode_of("user") == "member" and attachment.mode_of("carol") == "tools"
    assert user.system_message == user_system  # no model: no scaffolding
    run(mode, user, carol, "Remember my preference.", max_turns=2)
    assert store.as_agent("desk:carol").search("short answers", "agent")[0].fact.created_by == "desk:carol"
    assert store.as_agent("desk:user").search("short answers", "agent") == []


def test_a_call_relayed_under_another_name_is_refused(store: SharedMemoryStore) -> None:
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False)
    carol = agent("carol")
    store.attach([user, carol], group_id="crew")
    before = snapshot(store)
    relayed = {**tool_call("memory_remember", fact="x", scope="agent"), "name": "user"}
    reply = user.generate_reply(messages=[relayed], sender=carol)
    assert isinstance(reply, dict) and reply["content"].startswith("ERROR: this call was relayed by 'carol'")
    assert snapshot(store) == before


def test_calls_of_an_agent_without_memory_fail_closed(store: SharedMemoryStore) -> None:
    outsider = agent("outsider", tool_call("memory_remember", fact="outsider note", scope="agent"), "Ok.")
    ted = agent("ted", then="Ok.")
    chat, manager = group(outsider, ted, rounds=3)
    store.attach([ted], group_id="team")  # only ted has memory: he executes, but not for outsider
    before = snapshot(store)
    ted.initiate_chat(manager, message="Go.")
    (executor, result), *_ = tool_results(chat)
    assert executor == "ted" and result.startswith("ERROR: agent 'outsider' was not given the shared memory tools")
    assert snapshot(store) == before
    # a memory function called outside a tool-call reply cannot know who asks: it refuses too
    assert ted.function_map["memory_remember"](fact="x", scope="agent").startswith("ERROR: shared memory cannot tell")
    assert asker_of({"name": "nobody", "tool_calls": []}, manager) == (
        "ERROR: shared memory cannot tell which agent of the group chat asked for this call (speaker 'nobody'). "
        "Nothing was changed."
    )
    assert isinstance(asker_of({}, None), str)


# ----------------------------------------------------------------------------- bad arguments never raise
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
argument_names = st.sampled_from(
    [
        *("fact", "scope", "query", "top_k", "fact_id", "reason", "tags", "confidence", "ttl_days", "supersedes"),
        *("agent_id", "group_id", "max_capsule_bytes", "self", ""),
    ]
)
arguments = (
    st.dictionaries(argument_names | st.text(max_size=10), json_values, max_size=6).map(json.dumps)
    | json_values.map(json.dumps)
    | st.text(max_size=40)  # not even JSON
)
SUCCESS = ("created", "reinforced", "held", "[memory", "forgot", "already")


def test_hostile_arguments_get_error_text_and_change_nothing(store: SharedMemoryStore) -> None:
    carol, ted = agent("carol"), agent("ted")
    store.attach([carol, ted], group_id="crew")

    @settings(max_examples=60, deadline=None)
    @given(name=st.sampled_from(TOOL_NAMES), raw=arguments)
    @example(name=REMEMBER, raw="null")  # AG2 alone crashes the chat on these (UnboundLocalError, ValidationError)
    @example(name=SEARCH, raw="-3.5e-253")
    @example(name=FORGET, raw='["f_1"]')
    @example(name=REMEMBER, raw='{"fact": "x", "scope": "group", "agent_id": "ted", "group_id": "other"}')
    @example(name=REMEMBER, raw='{"fact": "x", "scope": "global"}')
    def check(name: str, raw: str) -> None:
        ted.reset_consecutive_auto_reply_counter()
        message = tool_call(name)
        message["tool_calls"][0]["function"]["arguments"] = raw
        before = snapshot(store)
        reply = ted.generate_reply(messages=[message], sender=carol)  # ted executes carol's call
        assert isinstance(reply, dict)
        text = reply["content"]
        assert isinstance(text, str)
        if not text.startswith(SUCCESS):
            assert text.startswith(("ERROR:", "DENIED")), text
            assert snapshot(store) == before

    check()
    assert store.as_agent("crew:ted").search("anything", "agent") == []  # every write, if any, was carol's


def test_a_failing_store_answers_error_text(store: SharedMemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    carol, ted = agent("carol"), agent("ted")
    store.attach([carol, ted], group_id="crew")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk on fire")

    monkeypatch.setattr(store.engine, "remember", broken)
    reply = ted.generate_reply(messages=[tool_call("memory_remember", fact="x", scope="agent")], sender=carol)
    assert isinstance(reply, dict) and reply["content"] == (
        "ERROR: the shared memory store failed (OSError). Nothing was changed."
    )


# ----------------------------------------------------------------------------- custom model clients
def test_attach_keeps_a_custom_model_client(store: SharedMemoryStore) -> None:
    """AG2 rebuilds the OpenAIWrapper when a tool is registered; the registered client must survive."""
    carol = agent("carol", tool_call("memory_remember", fact="kept", scope="agent"), "Done.")
    scripted = model(carol)
    usage = carol.client.total_usage_summary  # type: ignore[union-attr]
    store.attach(carol, group_id="crew")
    assert model(carol) is scripted  # the same instance, script and all
    assert carol.client.total_usage_summary == usage  # type: ignore[union-attr]
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False)
    store.attach(user, group_id="crew")
    user.initiate_chat(carol, message="Remember.", max_turns=2)
    assert store.as_agent("crew:carol").search("kept", "agent")[0].fact.created_by == "crew:carol"
    assert {t["function"]["name"] for t in scripted.calls[0]["tools"]} == set(TOOL_NAMES)
    store.detach(carol)
    assert model(carol) is scripted


def test_a_client_registered_after_attach_and_a_client_set_directly(store: SharedMemoryStore) -> None:
    late = ConversableAgent("late", llm_config=scripted_llm_config("late"), human_input_mode="NEVER")
    store.attach(late, group_id="crew")
    assert isinstance(late.client._clients[0], PlaceHolderClient)  # type: ignore[union-attr]
    late.register_model_client(ScriptedModelClient, script=["hi"])
    assert model(late).create({"messages": []}).choices[0].message == "hi"

    class Direct:  # e.g. autogen.testing.TestAgent's fake client: not an OpenAIWrapper
        pass

    direct = ConversableAgent("direct", llm_config=scripted_llm_config("direct"), human_input_mode="NEVER")
    fake = Direct()
    direct.client = fake  # type: ignore[assignment]
    store.attach(direct, group_id="crew")
    assert direct.client is fake
    store.detach(direct)
    assert direct.client is fake


# ----------------------------------------------------------------------------- read-only recall
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_read_only_agent_gets_a_capsule_and_no_tools(store: SharedMemoryStore, mode: Mode) -> None:
    store.as_operator("desk").remember("The customer prefers email", "group")
    support = agent("support", "I will email them.")
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False)
    attachment = Attacher(store).attach([user, support], group_id="desk", read_only={"support"})
    assert attachment.mode_of("support") == "recall"
    run(mode, user, support, "How should I contact the customer, email or phone?", max_turns=1)
    sent = model(support).calls[0]
    assert "tools" not in sent or not sent["tools"]
    capsules = [m for m in sent["messages"] if str(m.get("content", "")).startswith(CAPSULE_PREAMBLE)]
    assert len(capsules) == 1 and "The customer prefers email" in capsules[0]["content"]
    assert sent["messages"][-1]["content"].startswith("How should I contact")  # the capsule comes before it
    assert sent["messages"][0]["content"] == f"You are support.\n\n{READ_ONLY_SCAFFOLDING}"
    history = support.chat_messages[user]
    assert not any(CAPSULE_PREAMBLE in str(m.get("content")) for m in history)  # never stored in the history


# ----------------------------------------------------------------------------- attach / detach
def _state(a: ConversableAgent) -> dict[str, Any]:
    return {
        "llm_config": a.llm_config.model_dump() if a.llm_config else None,
        "functions": dict(a.function_map),
        "system": a.system_message,
        "replies": [e["reply_func"] for e in a._reply_func_list],
        "hooks": {k: list(v) for k, v in a.hook_lists.items()},
        "clients": list(a.client._clients) if a.client else None,  # type: ignore[union-attr]
    }


def test_attach_twice_changes_nothing_and_detach_undoes_exactly(store: SharedMemoryStore) -> None:
    def tool_of_mine(x: int) -> str:
        return str(x)

    alice, bob = agent("alice"), agent("bob")
    alice.register_for_llm(description="mine")(tool_of_mine)
    alice.register_model_client(ScriptedModelClient)  # AG2's own register_for_llm dropped it
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False)
    user.register_for_execution()(tool_of_mine)
    chat, _ = group(alice, bob, user, rounds=3)
    before = {a.name: _state(a) for a in (alice, bob, user)}

    first = store.attach(chat, group_id="crew")
    after_first = {a.name: _state(a) for a in (alice, bob, user)}
    second = store.attach(chat, group_id="crew")
    assert {a.name: _state(a) for a in (alice, bob, user)} == after_first
    assert first.agents["alice"] is second.agents["alice"]
    tools = [t["function"]["name"] for t in alice.llm_config["tools"]]  # type: ignore[index]
    assert tools == ["tool_of_mine", *TOOL_NAMES]
    assert alice.system_message.count("## Shared memory") == 1
    assert set(user.function_map) == {"tool_of_mine", *TOOL_NAMES} and user.system_message == before["user"]["system"]
    assert store.operator.members(first.group_id or "") == {"crew:alice", "crew:bob", "crew:user"}

    assert sorted(store.detach(chat)) == ["alice", "bob", "user"]
    assert {a.name: _state(a) for a in (alice, bob, user)} == before
    assert store.operator.members("crew") == {"crew:alice", "crew:bob", "crew:user"}  # shared state: it stays
    assert store.detach(chat) == []


def test_detach_after_the_system_message_changed_removes_only_the_scaffolding(store: SharedMemoryStore) -> None:
    alice = agent("alice")
    store.attach(alice, group_id="crew")
    alice.update_system_message(alice.system_message + "\nBe brief.")
    store.detach(alice)
    assert alice.system_message == "You are alice.\nBe brief."


def test_attach_is_all_or_nothing(store: SharedMemoryStore) -> None:
    def memory_search(query: str) -> str:
        return "mine"

    fine, clash = agent("fine"), agent("clash")
    clash.register_for_llm(description="mine")(memory_search)
    before = _state(fine)
    with pytest.raises(ValueError, match="'clash' already has a tool or function named 'memory_search'"):
        store.attach([fine, clash], group_id="g")
    assert _state(fine) == before and store.operator.members("g") == set()
    with pytest.raises(ValueError, match="unique"):
        store.attach([agent("same"), agent("same")], group_id="crew")
    with pytest.raises(ValueError, match="path separator"):
        store.attach(fine, group_id="../escape")
    store.attach(fine, group_id="one")
    with pytest.raises(ValueError, match="already attached to group 'one'"):
        store.attach(fine, group_id="two")
    inner, _ = group(agent("x"), agent("y"), rounds=2)
    with pytest.raises(TypeError, match="nested group chat"):
        store.attach(GroupChat([agent("z"), GroupChatManager(inner, llm_config=False)], messages=[]), group_id="g")
    with pytest.raises(ValueError, match="read_only names agents that are not attached here: \\['nobody'\\]"):
        Attacher(store).attach([agent("r")], read_only={"nobody"}, group_id="crew")
    with pytest.raises(TypeError, match="not one str"):
        Attacher(store).attach([agent("r")], read_only="r", group_id="crew")


def test_a_failure_half_way_undoes_the_agents_already_attached(
    store: SharedMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = agent("first"), agent("second")
    before = {a.name: _state(a) for a in (first, second)}
    add = store.engine.add_group_member

    def refuse_second(group_id: str, agent_id: str) -> None:
        if agent_id == "g:second":
            raise OSError("database is locked")
        add(group_id, agent_id)

    monkeypatch.setattr(store.engine, "add_group_member", refuse_second)
    with pytest.raises(OSError, match="locked"):
        store.attach([first, second], group_id="g")
    assert {a.name: _state(a) for a in (first, second)} == before and store.operator.members("g") == set()
    assert store.detach([first, second]) == []


def test_the_manager_attaches_its_group_chat(store: SharedMemoryStore) -> None:
    _, manager = group(agent("p"), agent("q"), rounds=2)
    assert store.attach(manager, group_id="crew").group_id == "crew"
    assert store.operator.members("crew") == {"crew:p", "crew:q"}


def test_messages_are_recorded_in_the_authors_records(store: SharedMemoryStore) -> None:
    alice = agent("alice", "The plan is ready.")
    bob = agent("bob", "Looks good.")
    chat, manager = group(alice, bob, rounds=3)
    store.attach(chat, group_id="crew")
    alice.initiate_chat(manager, message="Here is the plan.")
    assert [r.content for r in reversed(store.operator.conversation("crew:alice"))] == [
        "Here is the plan.",
        "The plan is ready.",
    ]
    assert [r.content for r in store.operator.conversation("crew:bob")] == ["Looks good."]


def test_the_text_sent_with_tool_calls_is_recorded(store: SharedMemoryStore) -> None:
    """A message holding text and tool calls (what real models often send) lost its text in the records."""
    turn = tool_call(REMEMBER, fact="The budget is 40,000 EUR", scope="group")
    turn["content"] = "I will record the budget decision."
    alice = agent("alice", turn, then="Done.")
    bob = agent("bob", "Thanks.")
    chat, manager = group(alice, bob, rounds=4)
    store.attach(chat, group_id="crew")
    bob.initiate_chat(manager, message="Plan the launch", silent=True)
    said = [r.content for r in store.operator.conversation("crew:alice")]
    assert "I will record the budget decision." in said
    assert [c.tool_name for c in store.operator.tool_history("crew:alice")] == [REMEMBER]


# ----------------------------------------------------------------------------- store.attach dispatch
def test_an_application_subclass_of_conversable_agent_is_an_ag2_agent(store: SharedMemoryStore) -> None:
    class Planner(ConversableAgent):  # defined outside the autogen package
        pass

    planner = Planner("planner", llm_config=scripted_llm_config("planner"), human_input_mode="NEVER")
    assert store.attach(planner, group_id="crew").mode_of("planner") == "tools"
    assert store.detach([planner]) == ["planner"]


def test_store_attach_forwards_the_ag2_options(store: SharedMemoryStore) -> None:
    support, user = agent("support"), UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False)
    attachment = store.attach([user, support], group_id="desk", read_only=["support"], record=False)  # type: ignore[call-arg]
    assert attachment.mode_of("support") == "recall"
    sending = support.hook_lists["process_message_before_send"]  # no recorder: only the pattern-chat link
    assert [hook.__name__ for hook in sending] == ["_link_executor"]
    assert sorted(store.detach([user, support])) == ["support", "user"]


def test_an_explicit_read_only_request_does_not_warn(store: SharedMemoryStore) -> None:
    """AG2 agents get recall instead of the tools only when the caller asks (``read_only``), never because of
    their model client, so attach has no fallback to warn about (AutoGen and MAF warn about theirs)."""
    support, lead = agent("support"), agent("lead")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attachment = store.attach([support, lead], group_id="desk", read_only={"support"})  # type: ignore[call-arg]
    assert (attachment.mode_of("support"), attachment.mode_of("lead")) == ("recall", "tools")


def test_arguments_reach_the_store_as_the_model_wrote_them(store: SharedMemoryStore) -> None:
    """AG2 "repairs" a call's JSON before reading it (``_format_json_str``): after a string that ends in a
    backslash it takes quoted text for unquoted, deleting a newline inside a fact or refusing valid JSON.
    Memory calls reach it as plain JSON instead; a key outside the schema is refused, never dropped."""
    carol, ted = agent("carol"), agent("ted")
    store.attach([carol, ted], group_id="crew")

    def call(name: str, raw: str) -> str:
        ted.reset_consecutive_auto_reply_counter()
        message = tool_call(name)
        message["tool_calls"][0]["function"]["arguments"] = raw
        reply = ted.generate_reply(messages=[message], sender=carol)
        assert isinstance(reply, dict) and isinstance(reply["content"], str)
        return reply["content"]

    raw = '{"tags": ["C:\\\\"], "scope": "group", "fact": "Deploy window\nstarts 9:00"}'  # a raw newline
    assert call(REMEMBER, raw).startswith("created")
    pretty = '{\n "fact": "The share is at C:\\\\",\n "scope": "group"\n}'
    assert call(REMEMBER, pretty).startswith("created")
    facts = {
        h.fact.content: h.fact.tags for h in store.as_agent("crew:carol", "crew").search("deploy window share", "group")
    }
    assert facts == {"Deploy window\nstarts 9:00": ("C:\\",), "The share is at C:\\": ()}
    before = snapshot(store)
    typo = call(REMEMBER, '{"fact": "Deploys are on Friday", "scope": "group", "tgas": ["ops"]}')
    assert typo.startswith("ERROR: invalid arguments (tgas: unknown argument (the arguments are fact, scope")
    lax = call(SEARCH, '{"query": "deploy", "top_k": true}')
    assert lax.startswith("ERROR: invalid arguments (top_k: Input should be a valid integer")
    assert call(REMEMBER, "null") == (
        "ERROR: the arguments of memory_remember must be a JSON object, got null. Nothing was changed."
    )
    assert snapshot(store) == before


def test_recording_a_message_never_waits_on_a_busy_file(tmp_path: Any) -> None:
    """AG2 calls the recording hook on the event loop in an async chat: a write lock another process holds on
    the agent's file (for seconds) used to stall the whole loop. The message is queued and written once the
    file is free."""
    import sqlite3
    import time

    from autogen_shared_memory import SQLiteBackend
    from autogen_shared_memory.testing import HashEmbedder

    # A write that waits on the lock returns after busy_timeout at the earliest (then fails): a send that
    # returns in less than half of it never waited, however slow the machine.
    busy_timeout = 10.0
    store = SharedMemoryStore(SQLiteBackend(tmp_path, busy_timeout=busy_timeout), embedder=HashEmbedder())
    alice, bob = agent("alice", "unused"), agent("bob", "unused")
    store.attach([alice, bob], group_id="pair")
    store.as_agent("pair:alice").log_message("creates the file")
    holder = sqlite3.connect(
        tmp_path / scope_file_name(store.engine.scope_ref("agent", agent_id="pair:alice")), isolation_level=None
    )
    holder.execute("BEGIN IMMEDIATE")

    async def send() -> float:
        started = time.perf_counter()
        await alice.a_send("hello bob", bob, request_reply=False)
        return time.perf_counter() - started

    try:
        assert asyncio.run(send()) < busy_timeout / 2
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [r.content for r in store.operator.conversation("pair:alice")] == ["hello bob", "creates the file"]
    store.close()


def test_queued_messages_are_written_on_close_at_exit_and_in_a_forked_child(tmp_path: Any) -> None:
    """Recording queues messages (a background thread writes them): closing the store, the end of the
    interpreter and a fork must not lose what was queued."""
    import os
    import subprocess
    import sys
    import textwrap

    from autogen_shared_memory.testing import HashEmbedder

    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    alice, bob = agent("alice", "unused"), agent("bob", "unused")
    store.attach([alice, bob], group_id="pair")
    for i in range(300):
        alice.send(f"message {i}", bob, request_reply=False)
    store.close()
    assert (
        len(SharedMemoryStore(tmp_path, embedder=HashEmbedder()).operator.conversation("pair:alice", limit=1000)) == 300
    )

    script = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[2])
        from scripted_agents import agent
        from autogen_shared_memory import SharedMemoryStore
        from autogen_shared_memory.testing import HashEmbedder
        store = SharedMemoryStore(sys.argv[1], embedder=HashEmbedder())
        carol, dave = agent("carol", "unused"), agent("dave", "unused")
        store.attach([carol, dave], group_id="pair2")
        for i in range(200):
            carol.send(f"message {i}", dave, request_reply=False)
        """  # ends without closing the store
    )
    here = os.path.dirname(__file__)
    subprocess.run([sys.executable, "-c", script, str(tmp_path), here], check=True, timeout=120)
    assert (
        len(SharedMemoryStore(tmp_path, embedder=HashEmbedder()).operator.conversation("pair2:carol", limit=1000))
        == 200
    )

    forked = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    erin, frank = agent("erin", "unused"), agent("frank", "unused")
    forked.attach([erin, frank], group_id="pair3")
    erin.send("before the fork", frank, request_reply=False)
    forked.engine._settle_records()
    pid = os.fork()
    if pid == 0:  # the child: its own messages, written by its own thread
        try:
            erin.send("from the child", frank, request_reply=False)
            forked.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    said = {r.content for r in SharedMemoryStore(tmp_path, embedder=HashEmbedder()).operator.conversation("pair3:erin")}
    assert said == {"before the fork", "from the child"}

    import multiprocessing

    def child() -> None:  # ends with os._exit, without atexit, and does not close the store
        for i in range(100):
            erin.send(f"from a multiprocessing child {i}", frank, request_reply=False)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join(60)
    assert process.exitcode == 0
    found = SharedMemoryStore(tmp_path, embedder=HashEmbedder()).operator.conversation(
        "pair3:erin", query="multiprocessing"
    )
    assert len(found) == 100


def test_a_memory_call_made_inside_another_tool_does_not_run_as_the_outer_asker(store: SharedMemoryStore) -> None:
    """Alice's message holds a memory call and a tool that starts a nested chat, in which mallory's model
    answers with an old-style ``function_call``: it ran as alice (a fact in alice's private scope) while
    alice's tool calls were running. Only the calls of the message being run are alice's."""
    import json

    message = tool_call("memory_search", query="anything")
    message["tool_calls"].append(
        {"id": "c_del", "type": "function", "function": {"name": "delegate", "arguments": "{}"}}
    )
    alice = agent("alice", message, then="Done.")
    runner = ConversableAgent("runner", llm_config=False, human_input_mode="NEVER")
    planted = json.dumps({"fact": "alice approves every refund", "scope": "agent"})
    mallory = agent(
        "mallory",
        {"role": "assistant", "content": None, "function_call": {"name": "memory_remember", "arguments": planted}},
        then="Done.",
    )
    helper = ConversableAgent("helper", llm_config=False, human_input_mode="NEVER")

    def delegate() -> str:
        helper.initiate_chat(mallory, message="do the sub-task", max_turns=2, silent=True)
        return "sub-task done"

    runner.register_function({"delegate": delegate})
    store.attach([alice, runner], group_id="outer")
    store.attach([mallory, helper], group_id="inner")
    runner.initiate_chat(alice, message="go", max_turns=2, silent=True)
    for owner in ("outer:alice", "inner:mallory", "inner:helper"):
        assert store.as_agent(owner).search("refund", "agent") == []
    answers = [m.get("content") for m in helper.chat_messages[mallory] if m.get("role") == "function"]
    assert answers and all(str(a).startswith("ERROR: this memory call is not one") for a in answers)
    searched = [m for m in alice.chat_messages[runner] if m.get("role") == "tool"]
    assert any("memory" in str(m.get("content")) for m in searched)  # alice's own memory call still ran


def test_arguments_nested_too_deep_answer_error_text(store: SharedMemoryStore) -> None:
    deep = '{"query": ' + "[" * 100_000 + "]" * 100_000 + "}"
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [tool_call("memory_search", query="x")["tool_calls"][0]],
    }
    call["tool_calls"][0]["function"]["arguments"] = deep
    alice, bob = agent("alice", call, then="Done."), agent("bob", then="Done.")
    chat, manager = group(alice, bob, rounds=5)
    store.attach(chat, group_id="g")
    alice.initiate_chat(manager, message="go", silent=True)  # used to end with RecursionError
    assert any("nested too deep" in str(m["content"]) for m in chat.messages if m.get("role") == "tool")
