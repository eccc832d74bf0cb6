"""Crew 2 — two teams in two separate processes share global facts: one team's policy binds the other.

Process 1 runs the compliance team: its ``compliance_officer`` is allowed to write the global scope and
records a policy. Process 2 runs the reporting team: it finds that policy in global memory and writes a
report that respects it; its own attempt to write global memory is refused. The processes share nothing
but the memory directory.

    python examples/two_teams_two_processes.py
    python examples/two_teams_two_processes.py --model llama3.1 --base-url http://localhost:11434/v1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys

from _common import add_model_arguments, memory_root, model_client, report, tool_call
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
from autogen_agentchat.messages import TextMessage, ToolCallExecutionEvent
from autogen_agentchat.teams import RoundRobinGroupChat

from autogen_shared_memory import SharedMemoryStore, WritePolicy

GLOBAL_WRITERS = ["compliance_officer"]  # the deployment's choice: only this agent writes global facts
OFFICERS = {"compliance_officer": "compliance_officer"}  # agent name -> its memory id in every team

TEAMS = {
    "compliance": {
        "compliance_officer": [
            tool_call(
                "memory_remember",
                fact="Reports must never include customer email addresses.",
                scope="global",
                tags=["policy", "pii"],
            ),
            "Policy recorded. TERMINATE",
        ],
        "auditor": [
            tool_call(
                "memory_remember",
                fact="The Q3 audit found two reports that leaked customer emails.",
                scope="group",
            ),
        ],
    },
    "reporting": {
        "analyst": [
            tool_call("memory_search", query="rules for customer data in reports", scope="global"),
            "Noted: a global policy forbids customer email addresses in reports.",
        ],
        "writer": [
            tool_call("memory_remember", fact="Reports may include customer emails when useful.", scope="global"),
            "Weekly report: 14 tickets closed; top customer: ACME (contact details omitted per policy). TERMINATE",
        ],
    },
}


async def run_team(team_name: str, args: argparse.Namespace) -> None:
    store = SharedMemoryStore(args.root, policy=WritePolicy(global_writers=GLOBAL_WRITERS))
    agents = [
        AssistantAgent(name, model_client=model_client(args, script), system_message=f"You are the {name}.")
        for name, script in TEAMS[team_name].items()
    ]
    team = RoundRobinGroupChat(
        agents, termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(8)
    )
    # each agent's memory identity is "<group>:<name>"; the compliance officer, the deployment's one global
    # writer, keeps one identity across teams, mapped explicitly
    officers = {name: memory_id for name, memory_id in OFFICERS.items() if name in TEAMS[team_name]}
    attachment = store.attach(team, group_id=f"{team_name}-team", agent_ids=officers)
    result = await team.run(task="Do your part for this week's customer report.")
    print(f"\n######## process {os.getpid()}: team {team_name!r} (group {attachment.group_id})")
    for message in result.messages:
        if isinstance(message, ToolCallExecutionEvent):
            for res in message.content:
                print(f"[{message.source}] {res.name} -> {res.content}")
        elif isinstance(message, TextMessage) and message.source != "user":
            print(f"[{message.source}] says: {message.content}")
    if team_name == "reporting":
        final = next(m.content for m in reversed(result.messages) if isinstance(m, TextMessage))
        leaked = re.search(r"[\w.+-]+@[\w-]+\.\w+", final)
        print(f"policy from the other process respected: {'NO' if leaked else 'yes'}")
    report(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    parser.add_argument("--team", choices=sorted(TEAMS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.team:  # a child process: run one team
        asyncio.run(run_team(args.team, args))
        return
    root = memory_root(args, "two-teams-")
    extra = [a for a in sys.argv[1:] if a != "--root" and a != args.root]
    for team in ("compliance", "reporting"):  # two separate OS processes, one after the other
        subprocess.run([sys.executable, __file__, "--team", team, "--root", root, *extra], check=True)


if __name__ == "__main__":
    main()
