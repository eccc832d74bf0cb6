"""Group membership across attach and detach, for the three frameworks on one store: detach removes only
the membership attach added, and only when no other attachment still relies on it."""

from __future__ import annotations

from pathlib import Path

from agent_framework import Agent
from autogen import ConversableAgent
from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.replay import ReplayChatCompletionClient

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.integration.agent_framework.testing import ScriptedChatClient
from autogen_shared_memory.testing import HashEmbedder


def autogen_agent() -> AssistantAgent:
    return AssistantAgent("planner", model_client=ReplayChatCompletionClient([]))


def ag2_agent() -> ConversableAgent:
    return ConversableAgent("planner", llm_config=False)


def maf_agent() -> Agent:
    return Agent(ScriptedChatClient([]), "x", name="planner")


def test_detach_keeps_a_membership_attach_did_not_add_and_one_another_attachment_needs(tmp_path: Path) -> None:
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    store.add_group_member("ops", "planner")  # trusted code's decision, before any attach
    for make in (autogen_agent, ag2_agent, maf_agent):
        agent = make()
        store.attach(agent, group_id="ops")
        store.detach(agent)
        assert store.group_members("ops") == {"planner"}, make.__name__
    store.remove_group_member("ops", "planner")
    first, second, third = autogen_agent(), ag2_agent(), maf_agent()  # three live attachments of one name
    for agent in (first, second, third):
        store.attach(agent, group_id="crew")
    store.detach(first)
    store.detach(third)
    assert store.group_members("crew") == {"planner"}  # the AG2 agent still runs in the group
    store.detach(second)
    assert store.group_members("crew") == set()  # attach added it: the last detach removes it
    store.close()
