"""Three frameworks, three processes, one memory: an AutoGen team, a Microsoft Agent Framework workflow and an
AG2 group chat share one group and the global scope.

The script starts three OS processes at the same time, one per framework, on the same store (SQLite files
under one directory, or one PostgreSQL schema with ``--dsn``):

* AutoGen: a ``RoundRobinGroupChat`` (autogen_researcher, autogen_lead) on a recording runtime;
* Microsoft Agent Framework: a ``SequentialBuilder`` workflow (maf_writer, maf_lead);
* AG2: a ``GroupChat`` (ag2_reviewer, ag2_lead).

Each team gets the memory in one line, ``store.attach(team, group_id="launch")``, and every process opens
the store with the same policy: the three ``*_lead`` agents may write the global scope, nobody else may.

Phase 1, the three processes at once: each team's first agent remembers a fact for the group, a private
note for itself, and tries to write a global rule (the policy denies it); its lead writes a global rule
(allowed). The processes wait for each other. Phase 2, at once again: each first agent searches memory for
what the *other* teams recorded in the group, each lead for the global rules. The parent then reads the
store (the facts and each agent's recorded tool calls), prints who wrote what, who recalled what (with the
author and scope of every fact recalled) and the denied writes, checks that every agent recalled the other
frameworks' facts with the right provenance and that no private note was seen by anyone but its owner, and
exits 1 on any mismatch.

Offline by default: each framework's scripted model client (AutoGen's ``scripted_client``, MAF's
``ScriptedChatClient``, AG2's ``ScriptedModelClient``) makes real tool calls, run by the framework's own
tool loop. With ``--model`` (and ``--base-url``) the three teams use a real OpenAI-compatible endpoint
instead (needs ``pip install "autogen-ext[openai]" agent-framework-openai "autogen[openai]"``; the key is
read from ``$OPENAI_API_KEY``). The agents' system messages then tell them what to remember and search; the
checks stay the same, so a model that does not make the calls it is asked for fails them. Only the offline
path is tested.

    python examples/three_frameworks.py
    python examples/three_frameworks.py --dsn postgresql://user:pw@db-host/memory
    python examples/three_frameworks.py --model llama3.1 --base-url http://localhost:11434/v1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import add_model_arguments, memory_root

from autogen_shared_memory import ScopeRef, SharedMemoryStore, WritePolicy
from autogen_shared_memory.core.types import Filters

GROUP = "launch"  # one group for the three teams
# the deployment's policy, the same in every process; attach gives each agent the memory id "<group>:<name>"
GLOBAL_WRITERS = [f"{GROUP}:{lead}" for lead in ("autogen_lead", "maf_lead", "ag2_lead")]


def memory_id(name: str) -> str:
    """The memory identity attach gives the agent called ``name`` in the group."""
    return f"{GROUP}:{name}"


TIMEOUT = 240.0  # seconds, for the whole run


@dataclass(frozen=True)
class Team:
    name: str  # the framework, short
    label: str  # what the process runs
    member: str  # remembers a group fact and a private note; its global write is denied
    lead: str  # a configured global writer
    group_fact: str
    private_note: str
    denied_global: str
    global_rule: str
    member_query: str  # phase 2: the other teams' group facts
    lead_query: str  # phase 2: the other leads' global rules


TEAMS = {
    "autogen": Team(
        "AutoGen",
        "AutoGen RoundRobinGroupChat",
        member="autogen_researcher",
        lead="autogen_lead",
        group_fact="The product launch is on March 3, 2027.",
        private_note="My source for the launch date is the PM's roadmap doc.",
        denied_global="Launch dates may be announced before the legal review.",
        global_rule="Public dates are written as ISO 8601 dates, e.g. 2027-03-03.",
        member_query="Where is the launch venue, and what is the launch budget?",
        lead_query="rules for press releases and announcements",
    ),
    "maf": Team(
        "MAF",
        "Microsoft Agent Framework SequentialBuilder workflow",
        member="maf_writer",
        lead="maf_lead",
        group_fact="The launch venue is Hall B of the Lisbon congress centre.",
        private_note="My draft of the launch press release is in drafts/launch-v2.md.",
        denied_global="Press releases may skip legal sign-off for small launches.",
        global_rule="Press releases need legal sign-off two days before publishing.",
        member_query="When is the product launch, and what is its budget?",
        lead_query="rules for public dates and revenue claims",
    ),
    "ag2": Team(
        "AG2",
        "AG2 GroupChat",
        member="ag2_reviewer",
        lead="ag2_lead",
        group_fact="The launch budget is capped at 40,000 EUR.",
        private_note="I still have to read the launch venue contract myself.",
        denied_global="Reviewers may skip the budget check for small launches.",
        global_rule="Announcements must avoid forward-looking revenue claims.",
        member_query="When and where is the product launch?",
        lead_query="rules for dates in press releases",
    ),
}
TASKS = {
    1: "Phase 1: record what you know in shared memory.",
    2: "Phase 2: catch up on what the other teams recorded in shared memory.",
}


def scripts(team: Team, tool_call: Callable[..., Any]) -> dict[str, list[Any]]:
    """The scripted model turns of the team's two agents, with the framework's own ``tool_call``."""
    return {
        team.member: [
            tool_call("memory_remember", fact=team.group_fact, scope="group"),  # phase 1
            tool_call("memory_remember", fact=team.private_note, scope="agent"),
            tool_call("memory_remember", fact=team.denied_global, scope="global"),
            "Recorded the team fact and my note; the global rule was refused.",
            tool_call("memory_search", query=team.member_query),  # phase 2
            "Caught up on the other teams' facts.",
        ],
        team.lead: [
            tool_call("memory_remember", fact=team.global_rule, scope="global"),  # phase 1
            "Global rule recorded. TERMINATE",
            tool_call("memory_search", query=team.lead_query, scope="global"),  # phase 2
            "Caught up on the other teams' rules. TERMINATE",
        ],
    }


def instructions(team: Team, name: str) -> str:
    """What a real model is told (the scripted ones follow their scripts)."""
    intro = f"You are {name}, on the {team.label} team; two other teams share the launch memory with you."
    if name == team.member:
        return (
            f"{intro} In phase 1 use memory_remember three times: {team.group_fact!r} with scope 'group', "
            f"{team.private_note!r} with scope 'agent', and {team.denied_global!r} with scope 'global' (it may be "
            f"refused); then say so in one sentence. In phase 2 call memory_search with the query "
            f"{team.member_query!r} and sum up in one sentence what the other teams found."
        )
    return (
        f"{intro} In phase 1 use memory_remember to store {team.global_rule!r} with scope 'global', then say "
        f"TERMINATE. In phase 2 call memory_search with the query {team.lead_query!r} and scope 'global', sum up "
        "the other teams' rules in one sentence and say TERMINATE."
    )


# ---------------------------------------------------------------------------------------------- child processes
def open_store(args: argparse.Namespace) -> SharedMemoryStore:
    if args.dsn:
        from autogen_shared_memory.backends.postgres import PostgresBackend

        return SharedMemoryStore(
            PostgresBackend(args.dsn, schema=args.schema), policy=WritePolicy(global_writers=GLOBAL_WRITERS)
        )
    return SharedMemoryStore(args.root, policy=WritePolicy(global_writers=GLOBAL_WRITERS))


def wait_for_the_others(args: argparse.Namespace) -> None:
    """Tell the parent this process finished phase 1, and wait until all three have."""
    Path(args.barrier, args.framework).touch()
    if sys.stdin.readline().strip() != "go":
        raise SystemExit(f"{args.framework}: the parent stopped the run")


def say(framework: str, text: str) -> None:
    print(f"[{framework} pid {os.getpid()}] {text}", flush=True)


async def run_autogen(team: Team, args: argparse.Namespace) -> None:
    from _common import model_client, tool_call
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination
    from autogen_agentchat.messages import TextMessage
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_core import SingleThreadedAgentRuntime

    store = open_store(args)
    recorder = store.runtime_handler()  # records the tool calls (the parent reads them)
    runtime = SingleThreadedAgentRuntime(intervention_handlers=[recorder])
    turns = scripts(team, tool_call)
    agents = [
        AssistantAgent(
            name,
            model_client=model_client(args, turns[name]),
            system_message=instructions(team, name),
            max_tool_iterations=5,  # several tool calls, then a text, in one turn
        )
        for name in (team.member, team.lead)
    ]
    stop = TextMentionTermination("TERMINATE", sources=[team.lead]) | MaxMessageTermination(20)
    chat = RoundRobinGroupChat(agents, termination_condition=stop, runtime=runtime)
    attachment = store.attach(chat, group_id=GROUP)  # <- the one line
    say("autogen", f"{team.label}: attached {list(attachment.agents)} to group {attachment.group_id!r}")
    runtime.start()
    for phase in (1, 2):
        if phase == 2:
            await asyncio.to_thread(wait_for_the_others, args)
        result = await chat.run(task=TASKS[phase])
        await recorder.aflush()
        for message in result.messages:
            if isinstance(message, TextMessage) and message.source != "user":
                say("autogen", f"phase {phase} [{message.source}] {message.content}")
    await runtime.stop_when_idle()
    await recorder.aflush()
    store.close()


async def run_maf(team: Team, args: argparse.Namespace) -> None:
    from agent_framework import Agent
    from agent_framework_orchestrations import SequentialBuilder

    from autogen_shared_memory.integration.agent_framework.testing import ScriptedChatClient, tool_call

    def chat_client(name: str, script: list[Any]) -> Any:
        if not args.model:
            return ScriptedChatClient(script)
        try:
            from agent_framework.openai import OpenAIChatCompletionClient
        except ImportError as exc:  # pragma: no cover - optional dependency
            raise SystemExit("a real model needs: pip install agent-framework-openai") from exc
        api_key = os.environ.get("OPENAI_API_KEY", "not-needed-for-local-servers")
        return OpenAIChatCompletionClient(model=args.model, base_url=args.base_url, api_key=api_key)

    store = open_store(args)
    turns = scripts(team, tool_call)
    agents = [Agent(chat_client(name, turns[name]), instructions(team, name), name=name) for name in turns]
    builder = SequentialBuilder(participants=agents)
    attachment = store.attach(builder, group_id=GROUP)  # <- the one line
    say("maf", f"{team.label}: attached {list(attachment.agents)} to group {attachment.group_id!r}")
    for phase in (1, 2):
        if phase == 2:
            await asyncio.to_thread(wait_for_the_others, args)
        started = time.time()
        await builder.build().run(TASKS[phase])
        said = [
            r
            for name in turns
            for r in store.operator.conversation(memory_id(name))
            if r.context.get("direction") == "out"
        ]
        for record in sorted(said, key=lambda r: r.created_at):
            if record.created_at >= started:
                say("maf", f"phase {phase} [{record.agent_id}] {record.content}")
    store.close()


def run_ag2(team: Team, args: argparse.Namespace) -> None:
    from autogen import ConversableAgent, GroupChat, GroupChatManager, UserProxyAgent

    from autogen_shared_memory.integration.ag2.scripted import ScriptedModelClient, scripted_llm_config, tool_call

    logging.getLogger("autogen.oai.client").setLevel(logging.WARNING)  # its "custom model client" notices

    def make_agent(name: str, script: list[Any]) -> ConversableAgent:
        system = instructions(team, name)
        if args.model:
            entry = {"model": args.model, "api_key": os.environ.get("OPENAI_API_KEY", "not-needed-for-local-servers")}
            if args.base_url:
                entry["base_url"] = args.base_url
            try:
                return ConversableAgent(name, system_message=system, llm_config=[entry], human_input_mode="NEVER")
            except ImportError as exc:  # pragma: no cover - optional dependency
                raise SystemExit("a real model needs: pip install 'autogen[openai]'") from exc
        agent = ConversableAgent(
            name, system_message=system, llm_config=scripted_llm_config(name), human_input_mode="NEVER"
        )
        agent.register_model_client(ScriptedModelClient, script=script, then="Nothing to add.")
        return agent

    store = open_store(args)
    agents_by_name = {name: make_agent(name, script) for name, script in scripts(team, tool_call).items()}
    chat = GroupChat(list(agents_by_name.values()), messages=[], max_round=16, speaker_selection_method="round_robin")
    manager = GroupChatManager(
        chat, llm_config=False, is_termination_msg=lambda m: "TERMINATE" in str(m.get("content") or "")
    )
    attachment = store.attach(chat, group_id=GROUP)  # <- the one line
    say("ag2", f"{team.label}: attached {list(attachment.agents)} to group {attachment.group_id!r}")
    pm = UserProxyAgent("pm", human_input_mode="NEVER", code_execution_config=False)
    for phase in (1, 2):
        if phase == 2:
            wait_for_the_others(args)
        with contextlib.redirect_stdout(io.StringIO()):  # AG2 prints every message: keep the output short
            pm.initiate_chat(manager, message=TASKS[phase])
        for message in chat.messages:
            if (
                message.get("name") in agents_by_name
                and message.get("role") != "tool"
                and not message.get("tool_calls")
            ):
                say("ag2", f"phase {phase} [{message['name']}] {message.get('content')}")
    store.close()


def run_child(args: argparse.Namespace) -> None:
    team = TEAMS[args.framework]
    if args.framework == "autogen":
        asyncio.run(run_autogen(team, args))
    elif args.framework == "maf":
        asyncio.run(run_maf(team, args))
    else:
        run_ag2(team, args)


# ---------------------------------------------------------------------------------------------- the parent
@dataclass
class Child:
    framework: str
    proc: subprocess.Popen[str]
    output: str = ""
    errors: str = ""


def run_processes(common: list[str]) -> dict[str, Child]:
    """Start the three processes together; let them start phase 2 once all three finished phase 1."""
    with tempfile.TemporaryDirectory(prefix="three-frameworks-barrier-") as where, contextlib.ExitStack() as files:
        barrier = Path(where)
        children: dict[str, Child] = {}
        streams = {}
        for framework in TEAMS:
            out, err = (files.enter_context(tempfile.TemporaryFile("w+")) for _ in range(2))
            command = [sys.executable, __file__, "--framework", framework, "--barrier", str(barrier), *common]
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=out, stderr=err, text=True)
            children[framework], streams[framework] = Child(framework, proc), (out, err)
        deadline = time.monotonic() + TIMEOUT
        ready = False
        while time.monotonic() < deadline:
            ready = all((barrier / framework).exists() for framework in TEAMS)
            if ready or any(child.proc.poll() is not None for child in children.values()):
                break
            time.sleep(0.05)
        for child in children.values():
            assert child.proc.stdin is not None
            try:
                child.proc.stdin.write("go\n" if ready else "stop\n")
                child.proc.stdin.close()
            except BrokenPipeError:  # that process is gone already
                pass
        for child in children.values():
            try:
                child.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()
            for stream in streams[child.framework]:
                stream.seek(0)
            child.output, child.errors = (stream.read() for stream in streams[child.framework])
    return children


CAPSULE_LINE = re.compile(r'^- \[(?P<id>[^ |]+) \| (?P<scope>[^|]+?) \| by (?P<by>[^|\]]+?) [|\]].*?\] "(?P<text>.*)"$')


def recalled(result: str) -> list[tuple[str, str, str]]:
    """(scope, author, content) of every fact in a capsule (its text is quoted, a quote in it escaped)."""
    return [
        (m["scope"], m["by"], m["text"].replace('\\"', '"'))
        for m in (CAPSULE_LINE.match(line.strip()) for line in result.splitlines())
        if m
    ]


def verify(store: SharedMemoryStore, children: dict[str, Child]) -> list[str]:
    """Print who wrote what and who recalled what; return what did not happen as it should."""
    problems: list[str] = []
    owner = {memory_id(name): fw for fw, team in TEAMS.items() for name in (team.member, team.lead)}
    private = {memory_id(team.member): team.private_note for team in TEAMS.values()}
    denied = {team.denied_global for team in TEAMS.values()}

    def expect(ok: bool, what: str) -> str:
        if not ok:
            problems.append(what)
        return "ok" if ok else "BAD"

    print("\n== who wrote what (each agent's recorded memory_remember calls) ==")
    for fw, team in TEAMS.items():
        print(f"process {children[fw].proc.pid} ({team.label}):")
        member, lead = memory_id(team.member), memory_id(team.lead)
        wanted = [
            (member, team.group_fact, "group", f"created fact g_\\S+ in scope group:{GROUP}"),
            (member, team.private_note, "agent", f"created fact a_\\S+ in scope agent:{member}"),
            (member, team.denied_global, "global", "DENIED:"),
            (lead, team.global_rule, "global", "created fact \\S+ in scope global"),
        ]
        for agent, fact, scope, result in wanted:
            calls = [
                c
                for c in store.operator.tool_history(agent, tool_name="memory_remember")
                if c.tool_args.get("fact") == fact
            ]
            answer = (calls[0].result or "") if calls else "(no such call recorded)"
            ok = len(calls) == 1 and re.match(result, answer) is not None
            mark = expect(ok, f"{agent} remember {fact!r}: {len(calls)} call(s), answer {answer[:70]!r}")
            outcome = "DENIED" if answer.startswith("DENIED") else answer.split(" in scope")[0]
            print(f"   {mark:<3} {agent:<26} {scope:<6} {outcome:<35} {fact}")

    print("\n== who recalled what (each agent's recorded memory_search, phase 2) ==")
    for fw, team in TEAMS.items():
        others = [t for f, t in TEAMS.items() if f != fw]
        for agent, expected in (
            (memory_id(team.member), [(f"group:{GROUP}", memory_id(t.member), t.group_fact) for t in others]),
            (memory_id(team.lead), [("global", memory_id(t.lead), t.global_rule) for t in others]),
        ):
            searches = store.operator.tool_history(agent, tool_name="memory_search")
            if len(searches) != 1:
                expect(False, f"{agent} made {len(searches)} memory_search calls, expected 1")
                continue
            hits = recalled(searches[0].result or "")
            print(f"{agent} ({team.name}) searched {searches[0].tool_args.get('query')!r}, recalled:")
            for scope, by, text in hits:
                mark = "  <- another process" if owner.get(by, fw) != fw else ""
                source = TEAMS[owner[by]].name if by in owner else "?"
                print(f"   {scope:<25} by {by:<26} {f'({source})':<10} {text}{mark}")
            for scope, by, text in expected:
                expect((scope, by, text) in hits, f"{agent} did not recall {text!r} as {scope} by {by}")
            for by, note in private.items():
                expect(by == agent or all(text != note for _, _, text in hits), f"{agent} saw {by}'s private note")
            expect(not denied & {text for _, _, text in hits}, f"{agent} recalled a denied global write")

    print("\n== private notes stay private (a search for the exact note, as each of the six agents) ==")
    for by, note in private.items():
        seen_by = [
            agent
            for agent in owner
            if any(hit.fact.content == note for hit in store.as_agent(agent, GROUP).search(note, top_k=20))
        ]
        mark = expect(seen_by == [by], f"{by}'s private note is visible to {seen_by}")
        print(f"   {mark:<3} {'agent:' + by:<32} visible to {', '.join(seen_by) or 'nobody'}: {note}")

    print("\n== the global scope (what the policy let through) ==")
    scope = ScopeRef("global")  # trusted code reads the whole scope, any status
    facts = store.backend.get(scope, store.backend.select_ids(scope, Filters(include_inactive=True), 1000))
    written = {fact.content: fact.created_by for fact in facts}
    for team in TEAMS.values():
        expect(written.get(team.global_rule) == memory_id(team.lead), f"the global rule of {team.lead} is missing")
    expect(len(facts) == len(TEAMS), f"the global scope holds {len(facts)} facts, expected {len(TEAMS)}")
    for fact in facts:
        print(f"   {fact.id}  by {fact.created_by:<20} {fact.status:<7} {fact.content}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    parser.add_argument("--dsn", help="a PostgreSQL DSN: share one database instead of SQLite files")
    parser.add_argument("--schema", default=f"three_{uuid.uuid4().hex[:8]}", help="PostgreSQL schema (with --dsn)")
    parser.add_argument("--framework", choices=sorted(TEAMS), help=argparse.SUPPRESS)
    parser.add_argument("--barrier", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.framework:  # a child process: one framework's team
        run_child(args)
        return

    if args.dsn:  # a fresh schema unless --schema names one
        common = ["--dsn", args.dsn, "--schema", args.schema]
    else:
        args.root = memory_root(args, "three-frameworks-")
        if any(Path(args.root).glob("*.db")):
            raise SystemExit(f"{args.root} already holds a memory: the checks need a fresh one (a new --root)")
        common = ["--root", args.root]
    if args.model:
        common += ["--model", args.model] + (["--base-url", args.base_url] if args.base_url else [])
    where = f"PostgreSQL schema {args.schema}" if args.dsn else args.root
    print(f"three processes, one group {GROUP!r}, global writers {GLOBAL_WRITERS}, memory in {where}")
    print("phase 1 (remember) runs in the three processes at once, phase 2 (recall) once all three finished it")
    started = time.perf_counter()
    children = run_processes(common)
    failed = [child for child in children.values() if child.proc.returncode != 0]
    for child in children.values():
        print(f"\n######## process {child.proc.pid}: {TEAMS[child.framework].label} (exit {child.proc.returncode})")
        print(child.output, end="")
        if child in failed:
            print(child.errors[-3000:], end="", file=sys.stderr)
    if failed:
        raise SystemExit(f"failed: {', '.join(child.framework for child in failed)}")
    print(f"\nthe three processes ran in {time.perf_counter() - started:.1f} s")

    store = open_store(args)
    try:
        problems = verify(store, children)
    finally:
        store.close()
    if problems:
        print(f"\n{len(problems)} mismatch(es):")
        for problem in problems:
            print(f"   {problem}")
        raise SystemExit(1)
    print("\nevery process recalled the other frameworks' group and global facts with their authors; the three")
    print("denied global writes were refused the same way in every framework; no private note left its owner.")


if __name__ == "__main__":
    main()
