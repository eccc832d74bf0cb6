"""Framework agents reach the memory over MCP with their own MCP clients: Microsoft Agent Framework's
``MCPStdioTool`` and AutoGen's ``McpWorkbench``, each driving an agent whose model is scripted."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import PYTHON, server_env, stdio_params

from autogen_shared_memory.integration.toolkit import REMEMBER, SEARCH


def maf_tool(root: Path, agent: str) -> Any:
    from agent_framework import MCPStdioTool

    params = stdio_params(root, agent)
    return MCPStdioTool(
        name="memory", command=params.command, args=list(params.args), env=server_env(), load_prompts=False
    )


def maf_results(client: Any) -> list[str]:
    """The tool results the scripted MAF model was sent back, in order (each request repeats the earlier ones)."""
    found: dict[str, str] = {}
    for request in client.requests:
        for message in request.messages:
            for content in message.contents:
                if getattr(content, "type", None) == "function_result":
                    found[str(content.call_id)] = str(content.result)
    return list(found.values())


async def run_maf(root: Path, agent: str, *turns: Any) -> list[str]:
    from agent_framework import Agent

    from autogen_shared_memory.integration.agent_framework.testing import ScriptedChatClient

    client = ScriptedChatClient([*turns, "Done."])
    async with maf_tool(root, agent) as tool:
        await Agent(client, "You are a helpful agent.", name=agent, tools=[tool]).run("Go on.")
    return maf_results(client)


async def run_autogen(root: Path, agent: str, *turns: dict[str, Any]) -> list[str]:
    """AutoGen's ``McpWorkbench`` driving an ``AssistantAgent`` whose model calls the tools ``turns`` name
    (``{"name": ..., "arguments": {...}}``): the tool results, in order."""
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.messages import ToolCallExecutionEvent
    from autogen_ext.tools.mcp import McpWorkbench, StdioServerParams

    from autogen_shared_memory.integration.autogen.testing import scripted_client, tool_call

    params = stdio_params(root, agent)
    server = StdioServerParams(
        command=params.command, args=list(params.args), env=server_env(), read_timeout_seconds=60
    )
    calls = [tool_call(turn["name"], **turn["arguments"]) for turn in turns]
    async with McpWorkbench(server) as workbench:
        assistant = AssistantAgent(
            "assistant",
            model_client=scripted_client(*calls, "Done."),
            workbench=workbench,
            max_tool_iterations=len(calls) + 1,  # one model turn per scripted call
        )
        result = await assistant.run(task="Go on.")
    return [r.content for m in result.messages if isinstance(m, ToolCallExecutionEvent) for r in m.content]


# autogen-ext 0.7's MCP client is written against the 1.x MCP SDK, MAF's against 2.x: one environment cannot
# hold both. The AutoGen agent runs in a process of its own, on the Python this names (default: this one),
# as it would in a user's AutoGen environment; the servers run on this environment's SDK.
AUTOGEN_PYTHON = os.environ.get("AUTOGEN_SHARED_MEMORY_TEST_AUTOGEN_PYTHON", sys.executable)


def autogen(root: Path, agent: str, *turns: dict[str, Any]) -> list[str]:
    """:func:`run_autogen` in a process on :data:`AUTOGEN_PYTHON` (skips when its McpWorkbench cannot load)."""
    spec = json.dumps([str(root), agent, list(turns)])
    done = subprocess.run(
        [AUTOGEN_PYTHON, __file__, spec],
        capture_output=True,
        text=True,
        env=server_env(AUTOGEN_SHARED_MEMORY_TEST_SERVER_PYTHON=PYTHON),  # the servers run on this environment
        timeout=120,
    )
    if done.returncode == 3:
        pytest.skip(f"AutoGen's McpWorkbench cannot be imported with {AUTOGEN_PYTHON}'s MCP SDK: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    results: list[str] = json.loads(done.stdout)
    return results


async def test_a_maf_agent_remembers_and_recalls_over_mcp(tmp_path: Path) -> None:
    from autogen_shared_memory.integration.agent_framework.testing import tool_call

    root = tmp_path / "store"
    wrote = await run_maf(root, "maf-writer", tool_call(REMEMBER, fact="Invoices are due on the 5th", scope="group"))
    assert len(wrote) == 1 and wrote[0].startswith("created fact") and "group:crew" in wrote[0]
    found = await run_maf(
        root,
        "maf-reader",
        tool_call(SEARCH, query="when are invoices due"),
        tool_call(REMEMBER, fact="Everyone may skip reviews", scope="global"),
    )
    assert "by maf-writer" in found[0] and "due on the 5th" in found[0]
    assert found[1].startswith("DENIED:")  # the answer reaches the model as text, as the framework tool's does


def test_an_autogen_agent_remembers_and_recalls_over_mcp(tmp_path: Path) -> None:
    root = tmp_path / "store"
    wrote = autogen(
        root,
        "ag-writer",
        {"name": REMEMBER, "arguments": {"fact": "Releases are tagged vN", "scope": "group"}},
        {"name": SEARCH, "arguments": {"query": "how are releases tagged"}},
        {"name": REMEMBER, "arguments": {"fact": "x", "scope": "group", "agent_id": "lead"}},
    )
    found = autogen(root, "ag-reader", {"name": SEARCH, "arguments": {"query": "how are releases tagged"}})
    assert wrote[0].startswith("created fact") and "by ag-writer" in wrote[1]
    assert wrote[2].startswith("ERROR: invalid arguments")  # the model cannot say who it is
    assert "by ag-writer" in found[0]


async def test_an_autogen_agent_and_a_maf_agent_recall_each_others_group_facts(tmp_path: Path) -> None:
    from autogen_shared_memory.integration.agent_framework.testing import tool_call as maf_call

    root = tmp_path / "store"
    autogen(root, "ag", {"name": REMEMBER, "arguments": {"fact": "The AutoGen side owns billing", "scope": "group"}})
    maf = await run_maf(
        root,
        "maf",
        maf_call(REMEMBER, fact="The MAF side owns shipping", scope="group"),
        maf_call(SEARCH, query="who owns billing"),
    )
    assert "by ag |" in maf[1] and "owns billing" in maf[1]
    ag = autogen(root, "ag", {"name": SEARCH, "arguments": {"query": "who owns shipping"}})
    assert "by maf |" in ag[0] and "owns shipping" in ag[0]


if __name__ == "__main__":  # one AutoGen run, for autogen(): arguments as JSON, tool results as JSON
    try:
        import autogen_ext.tools.mcp  # noqa: F401
    except ImportError as exc:
        print(exc, file=sys.stderr)
        sys.exit(3)
    root_arg, agent_arg, turns_arg = json.loads(sys.argv[1])
    print(json.dumps(asyncio.run(run_autogen(Path(root_arg), agent_arg, *turns_arg))))
