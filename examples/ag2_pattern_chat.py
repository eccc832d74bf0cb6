"""AG2 — a pattern-based group chat (``initiate_group_chat``): researcher, writer and reviewer share group
facts, with one private note and one denied global write.

In a pattern chat AG2 runs every tool call in its ``GroupToolExecutor``, an agent that
``initiate_group_chat`` creates. ``store.attach(pattern, group_id=...)`` gives the pattern's agents the memory
tools, the scaffolding and group membership, and makes that executor run each memory call as the agent whose model
made it, which the output shows. Offline by default: each agent's model is scripted
(``ScriptedModelClient``) and makes real tool calls through AG2's own tool loop. With ``--model`` and
``--base-url`` the same chat runs against a real OpenAI-compatible endpoint (needs
``pip install 'autogen[openai]'``; the key is read from ``$OPENAI_API_KEY``).

    python examples/ag2_pattern_chat.py
    python examples/ag2_pattern_chat.py --model llama3.1 --base-url http://localhost:11434/v1
"""

from __future__ import annotations

import argparse

from _common import add_model_arguments, memory_root, report
from ag2_group_chat import SCRIPTS, make_agent, print_memory_calls
from autogen import UserProxyAgent
from autogen.agentchat import initiate_group_chat
from autogen.agentchat.group import AgentTarget, TerminateTarget
from autogen.agentchat.group.patterns import DefaultPattern

from autogen_shared_memory import SharedMemoryStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    args = parser.parse_args()
    store = SharedMemoryStore(memory_root(args, "ag2-pattern-"))  # no agent may write global

    researcher, writer, reviewer = (make_agent(name, script, args) for name, script in SCRIPTS.items())
    researcher.handoffs.set_after_work(AgentTarget(writer))  # the researcher, then the writer, then the reviewer
    writer.handoffs.set_after_work(AgentTarget(reviewer))
    reviewer.handoffs.set_after_work(TerminateTarget())
    pm = UserProxyAgent("pm", human_input_mode="NEVER", code_execution_config=False)
    pattern = DefaultPattern(initial_agent=researcher, agents=[researcher, writer, reviewer], user_agent=pm)

    attachment = store.attach(pattern, group_id="launch-press")  # <- the one line
    print(f"group id: {attachment.group_id}; modes: { {n: a.mode for n, a in attachment.agents.items()} }")
    result, _, _ = initiate_group_chat(pattern, messages="Write the press release for the launch.", max_rounds=16)

    print_memory_calls(result.chat_history)
    report(store)


if __name__ == "__main__":
    main()
