"""AG2 — a GroupChat (researcher, writer, reviewer) sharing group facts, with one private note and one denied
global write.

One line attaches the store: every agent gets memory_search / memory_remember / memory_forget, the prompt
scaffolding and group membership. AG2 runs a tool call with the *next* agent that has the function (the
writer runs the researcher's call, and so on): each call still runs as the agent whose model made it,
which the output shows. Offline by default: each agent's model is scripted (``ScriptedModelClient``) and
makes real tool calls through AG2's own tool loop. With ``--model`` and ``--base-url`` the same chat runs
against a real OpenAI-compatible endpoint (needs ``pip install 'autogen[openai]'``; the key is read from
``$OPENAI_API_KEY``).

    python examples/ag2_group_chat.py
    python examples/ag2_group_chat.py --model llama3.1 --base-url http://localhost:11434/v1
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from _common import add_model_arguments, memory_root, report
from autogen import ConversableAgent, GroupChat, GroupChatManager, UserProxyAgent

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.integration.ag2.scripted import ScriptedModelClient, scripted_llm_config, tool_call

# Round robin: researcher, writer, reviewer, ...; each tool call is run by the next agent in that order.
SCRIPTS: dict[str, list[Any]] = {
    "researcher": [
        tool_call("memory_remember", fact="The product launch is on March 3, 2027.", scope="group", tags=["launch"]),
        tool_call("memory_remember", fact="My source for launch dates is the PM's roadmap doc.", scope="agent"),
        "Research done.",
    ],
    "writer": [
        tool_call("memory_search", query="When is the launch, and what does a press release need?"),
        "Draft: 'On March 3, 2027 we launch...' (legal sign-off requested for March 1).",
    ],
    "reviewer": [
        tool_call("memory_remember", fact="Press releases need legal sign-off two days ahead.", scope="group"),
        tool_call("memory_remember", fact="Announcements must avoid forward-looking revenue claims.", scope="global"),
        "Approved. TERMINATE",
    ],
}


def make_agent(name: str, script: list[Any], args: argparse.Namespace) -> ConversableAgent:
    system = f"You are the {name} of a launch team. Keep answers short; say TERMINATE when the post is approved."
    if args.model:  # a real OpenAI-compatible endpoint
        entry = {"model": args.model, "api_key": os.environ.get("OPENAI_API_KEY", "not-needed-for-local-servers")}
        if args.base_url:
            entry["base_url"] = args.base_url
        try:
            return ConversableAgent(name, system_message=system, llm_config=[entry], human_input_mode="NEVER")
        except ImportError as exc:  # pragma: no cover - optional dependency
            raise SystemExit("a real model needs: pip install 'autogen[openai]'") from exc
    config = scripted_llm_config(name)
    agent = ConversableAgent(name, system_message=system, llm_config=config, human_input_mode="NEVER")
    agent.register_model_client(ScriptedModelClient, script=script, then="Nothing to add.")
    return agent


def print_memory_calls(messages: list[dict[str, Any]]) -> None:
    """Each memory call with the agent whose model asked and the agent that ran it."""
    print("\n== what the agents did with memory ==")
    asked: dict[str, tuple[str, str, str]] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            asked[call["id"]] = (message["name"], call["function"]["name"], call["function"]["arguments"])
        for response in message.get("tool_responses") or []:
            asker, name, arguments = asked[response["tool_call_id"]]
            result = str(response["content"]).replace("\n", "\n       ")
            print(f"[{asker}] {name}({arguments})  (run by {message['name']})\n    -> {result}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    args = parser.parse_args()
    store = SharedMemoryStore(memory_root(args, "ag2-"))  # no agent may write global

    agents = [make_agent(name, script, args) for name, script in SCRIPTS.items()]
    chat = GroupChat(agents, messages=[], max_round=14, speaker_selection_method="round_robin")
    manager = GroupChatManager(
        chat, llm_config=False, is_termination_msg=lambda m: "TERMINATE" in str(m.get("content") or "")
    )
    attachment = store.attach(chat, group_id="launch-press")  # <- the one line
    print(f"group id: {attachment.group_id}; modes: { {n: a.mode for n, a in attachment.agents.items()} }")

    pm = UserProxyAgent("pm", human_input_mode="NEVER", code_execution_config=False)
    pm.initiate_chat(manager, message="Write the press release for the launch.")

    print_memory_calls(chat.messages)
    report(store)


if __name__ == "__main__":
    main()
