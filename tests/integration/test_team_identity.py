"""Team identity in the three frameworks: a team's memory lives under the name its application gives it.

Two unrelated teams whose agents have the same common names (two customers' chats) share neither their group
nor any agent's private scope; a team whose roster or type changes keeps its memory; attach without a team
name is a clear error; sharing an agent's memory across teams is said explicitly (``agent_ids``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent
from autogen import ConversableAgent, UserProxyAgent
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.integration.ag2.scripted import ScriptedModelClient, scripted_llm_config
from autogen_shared_memory.integration.ag2.scripted import tool_call as ag2_call
from autogen_shared_memory.integration.agent_framework.testing import ScriptedChatClient
from autogen_shared_memory.integration.agent_framework.testing import tool_call as maf_call
from autogen_shared_memory.integration.autogen.testing import scripted_client
from autogen_shared_memory.integration.autogen.testing import tool_call as autogen_call
from autogen_shared_memory.integration.toolkit import GroupIdRequired, team_identity
from autogen_shared_memory.testing import HashEmbedder

NOTE = "The refund override code is 4471."  # the writer's private note, in the first customer's team
RULE = "Refunds above 500 EUR need the manager's approval."  # that team's group fact
ASK = "refund override code approval"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SharedMemoryStore]:
    s = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    yield s
    s.close()


# Each framework: ``team(store, group_id, script, **attach_options)`` builds a two-agent team ("writer" and
# "reviewer", or AG2's "assistant" and "user_proxy"), attaches it and returns a coroutine function that runs
# its first agent through ``script`` (its model's turns) and returns the results of its memory tool calls.
Run = Callable[[], Any]


def autogen_team(store: SharedMemoryStore, group_id: str, script: list[Any], **options: Any) -> Run:
    writer = AssistantAgent("writer", model_client=scripted_client(*script))
    reviewer = AssistantAgent("reviewer", model_client=scripted_client("ok"))
    store.attach(RoundRobinGroupChat([writer, reviewer]), group_id=group_id, **options)

    async def run() -> list[str]:
        results = []
        for _ in script:
            result = await writer.run(task="go")
            results += [str(m.content) for m in result.messages if type(m).__name__ == "ToolCallSummaryMessage"]
        return results

    return run


def maf_team(store: SharedMemoryStore, group_id: str, script: list[Any], **options: Any) -> Run:
    writer = Agent(ScriptedChatClient([*script, "done"]), "You write.", name="writer")
    reviewer = Agent(ScriptedChatClient(["ok"]), "You review.", name="reviewer")
    store.attach([writer, reviewer], group_id=group_id, **options)

    async def run() -> list[str]:
        answer = await writer.run("go")
        return [str(c.result) for m in answer.messages for c in m.contents if c.type == "function_result"]

    return run


def ag2_team(store: SharedMemoryStore, group_id: str, script: list[Any], **options: Any) -> Run:
    assistant = ConversableAgent("assistant", llm_config=scripted_llm_config(), human_input_mode="NEVER")
    assistant.register_model_client(ScriptedModelClient, script=script, then="done")
    user = UserProxyAgent("user_proxy", human_input_mode="NEVER", code_execution_config=False)
    store.attach([assistant, user], group_id=group_id, **options)

    async def run() -> list[str]:
        await user.a_initiate_chat(assistant, message="go", max_turns=len(script) + 1, silent=True)
        return [str(m["content"]) for m in user.chat_messages[assistant] if m.get("role") == "tool"]

    return run


TEAMS: dict[str, tuple[Callable[..., Run], Callable[..., Any], str]] = {
    "autogen": (autogen_team, autogen_call, "writer"),
    "maf": (maf_team, maf_call, "writer"),
    "ag2": (ag2_team, ag2_call, "assistant"),
}


@pytest.mark.parametrize("framework", sorted(TEAMS))
async def test_unrelated_teams_with_the_same_agent_names_share_nothing(
    store: SharedMemoryStore, framework: str
) -> None:
    make, call, name = TEAMS[framework]
    acme = make(
        store,
        "support-acme",
        [call("memory_remember", fact=NOTE, scope="agent"), call("memory_remember", fact=RULE, scope="group")],
    )
    assert all(r.startswith("created fact") for r in await acme()), framework
    globex = make(
        store,
        "support-globex",
        [call("memory_search", query=ASK), call("memory_search", query=ASK, scope="agent")],
    )
    assert await globex() == ["[memory: no matching facts]"] * 2, framework  # not the note, not the rule
    # the note is the acme writer's, the rule acme's: keyed by the team, whatever the agents are called
    (note,) = store.as_agent(f"support-acme:{name}").search(NOTE, "agent")
    assert note.fact.created_by == f"support-acme:{name}" and note.fact.scope.owner == f"support-acme:{name}"
    assert store.as_agent(name).search(NOTE, "agent") == []  # no bare-name scope any team could share
    assert store.operator.members("support-globex") == {f"support-globex:{n}" for n in (name, other(framework))}


def other(framework: str) -> str:
    return "user_proxy" if framework == "ag2" else "reviewer"


@pytest.mark.parametrize("framework", sorted(TEAMS))
async def test_a_teams_memory_survives_a_change_of_roster(store: SharedMemoryStore, framework: str) -> None:
    make, call, _ = TEAMS[framework]
    first = make(
        store,
        "support-acme",
        [call("memory_remember", fact=NOTE, scope="agent"), call("memory_remember", fact=RULE, scope="group")],
    )
    await first()
    # the same team, rebuilt (another process, a new reviewer, another team type): the same name, its memory
    again = make(store, "support-acme", [call("memory_search", query=ASK)])
    (found,) = await again()
    assert NOTE in found and RULE in found, framework


def test_an_autogen_team_of_another_type_and_roster_keeps_its_group(store: SharedMemoryStore) -> None:
    store.as_operator("support-acme").remember(RULE, "group")
    writer = AssistantAgent("writer", model_client=scripted_client())
    editor = AssistantAgent("editor", model_client=scripted_client())
    team = SelectorGroupChat([writer, editor], model_client=scripted_client())
    attachment = store.attach(team, group_id="support-acme")
    assert attachment.group_id == "support-acme"
    assert store.as_agent("support-acme:editor", "support-acme").search(RULE, "group")


@pytest.mark.parametrize("framework", sorted(TEAMS))
def test_attach_without_a_team_name_is_a_clear_error_and_changes_nothing(
    store: SharedMemoryStore, framework: str
) -> None:
    targets = {
        "autogen": lambda: RoundRobinGroupChat([AssistantAgent("writer", model_client=scripted_client())]),
        "maf": lambda: [Agent(ScriptedChatClient([]), "x", name="writer")],
        "ag2": lambda: [ConversableAgent("assistant", llm_config=False)],
    }
    with pytest.raises(GroupIdRequired, match=r'store\.attach\(team, group_id="support-acme"\)') as raised:
        store.attach(targets[framework]())
    assert isinstance(raised.value, TypeError)
    assert not list(store.root.glob("*.db"))  # nothing enrolled, no directory entry
    with pytest.raises(ValueError, match="holds ':'"):
        store.attach(targets[framework](), group_id="support:acme")


@pytest.mark.parametrize("framework", sorted(TEAMS))
async def test_sharing_an_agents_memory_across_teams_is_explicit(store: SharedMemoryStore, framework: str) -> None:
    make, call, name = TEAMS[framework]
    mapped = {name: "alice"}  # the same person serves both customers, with one private memory
    acme = make(store, "support-acme", [call("memory_remember", fact=NOTE, scope="agent")], agent_ids=mapped)
    await acme()
    globex = make(store, "support-globex", [call("memory_search", query=ASK)], agent_ids=mapped)
    (found,) = await globex()
    assert NOTE in found and "by alice" in found, framework
    with pytest.raises(ValueError, match=r"agent_ids names agents that are not attached here: \['nobody'\]"):
        make(store, "support-acme", [], agent_ids={"nobody": "x"})


def test_team_identity_rules() -> None:
    assert team_identity("support-acme", ["writer", "reviewer"], {"reviewer": "alice"}) == (
        "support-acme",
        {"writer": "support-acme:writer", "reviewer": "alice"},
    )
    with pytest.raises(ValueError, match="is 129 characters; the limit is 128: use a shorter group_id or name"):
        team_identity("g" * 100, ["n" * 28])
    assert team_identity("g" * 100, ["n" * 27])[1]["n" * 27] == "g" * 100 + ":" + "n" * 27
    with pytest.raises(ValueError, match="path separator"):
        team_identity("crew", ["../escape"])
