"""Group membership across attach and detach, for the three frameworks: attach makes the agents members, and
detach leaves the membership (shared state: the same team attached elsewhere may rely on it)."""

from __future__ import annotations

from pathlib import Path

from agent_framework import Agent
from autogen import ConversableAgent
from autogen_agentchat.agents import AssistantAgent

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.integration.agent_framework.testing import ScriptedChatClient
from autogen_shared_memory.integration.autogen.testing import scripted_client
from autogen_shared_memory.testing import HashEmbedder


def autogen_agent() -> AssistantAgent:
    return AssistantAgent("planner", model_client=scripted_client())


def ag2_agent() -> ConversableAgent:
    return ConversableAgent("planner", llm_config=False)


def maf_agent() -> Agent:
    return Agent(ScriptedChatClient([]), "x", name="planner")


def test_detach_leaves_the_membership_another_process_relies_on(tmp_path: Path) -> None:
    """Detach removed a membership that attach had added, while another store instance (another process)
    had attached the same agent to the same group: that team's group calls were then denied."""
    for make in (autogen_agent, ag2_agent, maf_agent):
        root = tmp_path / make.__name__
        here, there = (SharedMemoryStore(root, embedder=HashEmbedder()) for _ in range(2))
        short_job, service = make(), make()
        here.attach(short_job, group_id="launch")
        there.attach(service, group_id="launch")
        here.detach(short_job)
        assert there.operator.members("launch") == {"launch:planner"}, make.__name__
        there.as_agent("launch:planner", "launch").remember("The launch is on March 3", "group")
        here.close()
        there.close()


def test_detach_keeps_a_membership_trusted_code_added(tmp_path: Path) -> None:
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    store.operator.add_member("ops", "ops:planner")  # trusted code's decision, before any attach
    for make in (autogen_agent, ag2_agent, maf_agent):
        agent = make()
        store.attach(agent, group_id="ops")
        store.detach(agent)
        assert store.operator.members("ops") == {"ops:planner"}, make.__name__
    store.close()
