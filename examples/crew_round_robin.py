"""Crew 1 — a RoundRobinGroupChat (researcher, writer, reviewer) sharing group facts and one private fact.

One line attaches the store, with the team's name: every agent gets memory_search / memory_remember /
memory_forget bound to its memory identity (``launch-press:researcher``...) and the team's group, plus the
prompt scaffolding. Offline by default: each agent's model is scripted (``scripted_client``, in
``autogen_shared_memory.integration.autogen.testing``) and makes real tool calls. With ``--model`` and
``--base-url`` the same crew runs against a real OpenAI-compatible endpoint (e.g. a local Ollama).

    python examples/crew_round_robin.py
    python examples/crew_round_robin.py --model llama3.1 --base-url http://localhost:11434/v1
"""

from __future__ import annotations

import argparse
import asyncio

from _common import add_model_arguments, memory_root, model_client, report, tool_call
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.messages import ToolCallExecutionEvent, ToolCallRequestEvent
from autogen_agentchat.teams import RoundRobinGroupChat

from autogen_shared_memory import SharedMemoryStore

# Three rounds; each agent speaks once per round (one scripted model turn each).
SCRIPTS = {
    "researcher": [
        tool_call("memory_remember", fact="The product launch is on March 3, 2027.", scope="group", tags=["launch"]),
        tool_call("memory_remember", fact="My source for launch dates is the PM's roadmap doc.", scope="agent"),
        "Research done.",
    ],
    "writer": [
        tool_call("memory_search", query="When is the launch?"),
        tool_call("memory_search", query="what does a press release need before publishing?"),
        "Draft: 'On March 3, 2027 we launch...' (legal sign-off requested for March 1).",
    ],
    "reviewer": [
        tool_call("memory_remember", fact="Press releases need legal sign-off two days ahead.", scope="group"),
        tool_call(
            "memory_remember",
            fact="Every announcement must avoid forward-looking revenue claims.",
            scope="global",
        ),
        "Approved. TERMINATE",
    ],
}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    args = parser.parse_args()
    store = SharedMemoryStore(memory_root(args, "crew-"))  # no agent may write global

    agents = [
        AssistantAgent(name, model_client=model_client(args, script), system_message=f"You are the {name}.")
        for name, script in SCRIPTS.items()
    ]
    team = RoundRobinGroupChat(
        agents, termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(12)
    )
    attachment = store.attach(team, group_id="launch-press")  # <- the one line
    print(f"group id: {attachment.group_id}; modes: { {n: a.mode for n, a in attachment.agents.items()} }")

    result = await team.run(task="Write the press release for the launch.")
    print("\n== what the agents did with memory ==")
    calls = {}
    for message in result.messages:
        if isinstance(message, ToolCallRequestEvent):
            for call in message.content:
                calls[call.id] = (message.source, call.name, call.arguments)
        elif isinstance(message, ToolCallExecutionEvent):
            for res in message.content:
                source, name, arguments = calls[res.call_id]
                result = res.content.replace("\n", "\n       ")
                print(f"[{source}] {name}({arguments})\n    -> {result}")
    report(store)


if __name__ == "__main__":
    asyncio.run(main())
