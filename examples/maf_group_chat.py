"""A Microsoft Agent Framework group chat (researcher, writer, reviewer) sharing one long-term memory.

MAF's ``GroupChatBuilder`` gives every agent its own session and strips tool calls from the transcript the
next agent sees: what one agent learned reaches another only through the shared memory. One line attaches
the store: every agent gets memory_search / memory_remember / memory_forget bound to its own name and the
team's group, plus the prompt scaffolding, and each run is recorded in the agent's records.

Offline by default: each agent's model is scripted (``ScriptedChatClient``) and makes real tool calls that
MAF's own tool loop runs. With ``--model`` (and ``--base-url``) the same team runs against a real
OpenAI-compatible endpoint (needs ``pip install agent-framework-openai``; the key is read from
``$OPENAI_API_KEY``).

    python examples/maf_group_chat.py
    python examples/maf_group_chat.py --model llama3.1 --base-url http://localhost:11434/v1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from _common import add_root_arguments, memory_root
from agent_framework import Agent, Message
from agent_framework_orchestrations import GroupChatBuilder, GroupChatState

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.sqlite import scope_file_name
from autogen_shared_memory.integration.agent_framework.testing import ScriptedChatClient, tool_call

ROLES = {
    "researcher": "You are the researcher. Find the facts the team needs and remember them for the team.",
    "writer": "You are the writer. Search memory for what the team knows, then write the press release.",
    "reviewer": "You are the reviewer. Remember the publishing rules, review the draft, say TERMINATE when done.",
}

# Each agent speaks in turn; one run of an agent may take several model turns (a tool call, then text).
SCRIPTS: dict[str, list[Any]] = {
    "researcher": [
        tool_call("memory_remember", fact="The product launch is on March 3, 2027.", scope="group", tags=["launch"]),
        tool_call("memory_remember", fact="My source for launch dates is the PM's roadmap doc.", scope="agent"),
        "Research done: the launch is on March 3, 2027.",
        "Nothing to add.",
    ],
    "writer": [
        tool_call("memory_search", query="When is the launch?"),
        "Draft: 'On March 3, 2027 we launch...'",
        tool_call("memory_search", query="what does a press release need before publishing?"),
        "Final draft: 'On March 3, 2027 we launch...' (legal sign-off requested for March 1).",
    ],
    "reviewer": [
        tool_call("memory_remember", fact="Press releases need legal sign-off two days ahead.", scope="group"),
        tool_call(
            "memory_remember", fact="Every announcement must avoid forward-looking revenue claims.", scope="global"
        ),
        "Reviewed: get legal sign-off two days ahead.",
        "Approved. TERMINATE",
    ],
}


def chat_client(args: argparse.Namespace, name: str) -> Any:
    """The scripted client (offline, default) or a real OpenAI-compatible endpoint when ``--model`` is given."""
    if not args.model:
        return ScriptedChatClient(SCRIPTS[name])
    try:
        from agent_framework.openai import OpenAIChatCompletionClient
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise SystemExit("a real model needs: pip install agent-framework-openai") from exc
    return OpenAIChatCompletionClient(
        model=args.model,
        base_url=args.base_url,
        api_key=os.environ.get("OPENAI_API_KEY", "not-needed-for-local-servers"),
    )


def round_robin(state: GroupChatState) -> str:
    return list(state.participants)[state.current_round % len(state.participants)]


def terminated(conversation: list[Message]) -> bool:
    return bool(conversation) and "TERMINATE" in conversation[-1].text


def report(store: SharedMemoryStore, names: list[str]) -> None:  # names: the agents' memory ids
    """What each agent said and did with memory (from its records), then every fact per scope file."""
    print("\n== what the agents said (their recorded answers) ==")
    said = [r for name in names for r in store.operator.conversation(name) if r.context.get("direction") == "out"]
    for record in sorted(said, key=lambda r: r.created_at):
        print(f"[{record.agent_id}] {record.content}")
    print("\n== what the agents did with memory (their recorded tool calls) ==")
    calls = sorted((c for name in names for c in store.operator.tool_history(name)), key=lambda c: c.created_at)
    for call in calls:
        result = (call.result or "").replace("\n", "\n       ")
        print(f"[{call.agent_id}] {call.tool_name}({json.dumps(call.tool_args)})\n    -> {result}")
    print("\n== what the agents remembered ==")
    for stats in store.stats():
        path = store.root / scope_file_name(stats.scope)
        with sqlite3.connect(path) as conn:
            facts = conn.execute("SELECT id, created_by, status, content FROM facts ORDER BY seq").fetchall()
        print(f"{path.name}  ({stats.scope}, {sum(stats.counts.values())} facts)")
        for fact_id, by, status, content in facts:
            print(f"   {fact_id}  by {by:<11} {status:<9} {content}")
    print("\n== db files written ==")
    for path in sorted(Path(store.root).glob("*.db")):
        print(f"   {path}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_root_arguments(parser)
    parser.add_argument("--model", help="use a real OpenAI-compatible model instead of the scripted one")
    parser.add_argument("--base-url", help="endpoint of that model, e.g. http://localhost:11434/v1 (Ollama)")
    args = parser.parse_args()
    store = SharedMemoryStore(memory_root(args, "maf-crew-"))  # no agent may write global

    agents = [Agent(chat_client(args, name), role, name=name) for name, role in ROLES.items()]
    builder = GroupChatBuilder(
        participants=agents, selection_func=round_robin, termination_condition=terminated, max_rounds=6
    )
    attachment = store.attach(builder, group_id="launch-press")  # <- the one line
    print(f"group id: {attachment.group_id}; modes: { {n: a.mode for n, a in attachment.agents.items()} }")

    await builder.build().run("Write the press release for the launch.")
    report(store, [a.agent_id for a in attachment.agents.values()])  # launch-press:researcher...


if __name__ == "__main__":
    asyncio.run(main())
