"""Two agents as two MCP clients of one memory, each through its own `autogen-shared-memory mcp` server.

The researcher and the writer are bound to their identities when their servers start (`--agent`, `--group`),
never by the model: the researcher remembers a group fact, the writer (subscribed to the group's resource)
hears about it from the store's change feed, finds it with its author, and is refused the global scope.
Any MCP client (a desktop assistant, an IDE, an agent of any framework) connects the same way.

    python examples/mcp_two_agents.py [--root DIR] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from _common import add_root_arguments, memory_root
from mcp import Client, StdioServerParameters


def memory_server(root: str, agent: str, group: str) -> StdioServerParameters:
    """How an MCP client launches the memory server of one agent (what an ``mcpServers`` entry says)."""
    args = ["-m", "autogen_shared_memory", "--root", root, "--create", "mcp", "--agent", agent, "--group", group]
    return StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))


async def call(client: Client, who: str, tool: str, **arguments: object) -> str:
    result = await client.call_tool(tool, arguments)
    answer = "\n".join(block.text for block in result.content if block.type == "text")
    print(f"[{who}] {tool} -> {answer}")
    return answer


async def main(root: str) -> None:
    async with (
        Client(memory_server(root, "researcher", "launch")) as researcher,
        Client(memory_server(root, "writer", "launch")) as writer,
    ):
        print("instructions the writer's host puts in its system prompt:\n" + (writer.instructions or "")[:80] + " ...")
        async with writer.listen(resource_subscriptions=["memory://group/launch"]) as updates:
            await call(researcher, "researcher", "memory_remember", fact="The launch moved to March 3.", scope="group")
            async for event in updates:
                print(f"[writer] heard: {getattr(event, 'uri', event)} changed")
                break
        await call(writer, "writer", "memory_search", query="when is the launch")
        await call(writer, "writer", "memory_remember", fact="Launch dates are final.", scope="global")
        await call(writer, "writer", "memory_remember", fact="Press release draft says March 3.", scope="agent")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_root_arguments(parser)
    asyncio.run(main(memory_root(parser.parse_args(), "mcp-two-agents-")))
