"""Crew 3 — the core API: the recording handler in the runtime constructor, a ``RoutedAgent`` that uses
the memory service, another that runs a tool-calling loop with ``store.tools_for(...)``, and at the end
the conversation and tool history the runtime recorded for each agent.

    python examples/core_runtime.py
    python examples/core_runtime.py --model llama3.1 --base-url http://localhost:11434/v1
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass

from _common import add_model_arguments, memory_root, model_client, report, tool_call
from autogen_core import (
    AgentId,
    CancellationToken,
    FunctionCall,
    MessageContext,
    RoutedAgent,
    SingleThreadedAgentRuntime,
    message_handler,
)
from autogen_core.models import (
    AssistantMessage,
    ChatCompletionClient,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    SystemMessage,
    UserMessage,
)
from autogen_core.tool_agent import ToolAgent
from autogen_core.tools import FunctionTool

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.integration import DEFAULT_SCAFFOLDING, RememberRequest, SearchRequest

GROUP = "ops"


@dataclass
class Task:
    text: str


def convert_currency(amount: float, rate: float) -> float:
    """Convert an amount with an exchange rate."""
    return round(amount * rate, 2)


class Coordinator(RoutedAgent):
    """Stores what it learns through the memory service and delegates work to the analyst."""

    def __init__(self) -> None:
        super().__init__("coordinator")

    @message_handler
    async def on_task(self, message: Task, ctx: MessageContext) -> str:
        memory = AgentId("shared_memory", "default")
        stored = await self.send_message(
            RememberRequest(
                fact="Budgets are reported in EUR; the USD->EUR rate this month is 0.92.",
                scope="group",
                group_id=GROUP,
            ),
            memory,
        )
        print(f"[coordinator] memory service: {stored.text}")
        # a tool call through a ToolAgent, recorded by the runtime handler with its duration
        converted = await self.send_message(
            FunctionCall(id="fx-1", name="convert_currency", arguments='{"amount": 12500, "rate": 0.92}'),
            AgentId("tools", "default"),
        )
        print(f"[coordinator] convert_currency -> {converted.content}")
        answer = await self.send_message(Task(message.text), AgentId("analyst", "default"))
        found = await self.send_message(SearchRequest(query="budget currency", group_id=GROUP), memory)
        print(f"[coordinator] memory service search:\n{found.text}")
        return str(answer)


class Analyst(RoutedAgent):
    """A tool-calling loop over a model client, with the three memory tools bound to 'analyst'."""

    def __init__(self, client: ChatCompletionClient, store: SharedMemoryStore) -> None:
        super().__init__("analyst")
        self._client = client
        self._tools = {tool.name: tool for tool in store.tools_for("analyst", GROUP)}

    @message_handler
    async def on_task(self, message: Task, ctx: MessageContext) -> str:
        history: list[LLMMessage] = [
            SystemMessage(content=f"You are the analyst.\n\n{DEFAULT_SCAFFOLDING}"),
            UserMessage(content=message.text, source="coordinator"),
        ]
        for _ in range(5):
            result = await self._client.create(history, tools=list(self._tools.values()))
            if isinstance(result.content, str):
                return result.content
            history.append(AssistantMessage(content=result.content, source="analyst"))
            outputs = []
            for call in result.content:
                output = await self._tools[call.name].run_json(json.loads(call.arguments), CancellationToken())
                print(f"[analyst] {call.name}({call.arguments}) ->\n    {output}")
                outputs.append(FunctionExecutionResult(content=str(output), name=call.name, call_id=call.id))
            history.append(FunctionExecutionResultMessage(content=outputs))
        return "stopped after 5 tool rounds"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    args = parser.parse_args()
    store = SharedMemoryStore(memory_root(args, "core-"))
    for agent in ("coordinator", "analyst"):
        store.operator.add_member(GROUP, agent)

    recorder = store.runtime_handler()
    runtime = SingleThreadedAgentRuntime(intervention_handlers=[recorder])  # <- records every agent
    await store.register_service(runtime)  # answers RememberRequest / SearchRequest / ForgetRequest
    await ToolAgent.register(
        runtime,
        "tools",
        lambda: ToolAgent("tools", [FunctionTool(convert_currency, description="Convert an amount.")]),
    )
    script = [
        tool_call("memory_search", query="which currency are budgets reported in?"),
        tool_call("memory_remember", fact="Q3 cloud budget: 11,500 EUR (12,500 USD).", scope="group"),
        "The Q3 cloud budget is 11,500 EUR.",
    ]
    await Analyst.register(runtime, "analyst", lambda: Analyst(model_client(args, script), store))
    await Coordinator.register(runtime, "coordinator", Coordinator)

    runtime.start()
    answer = await runtime.send_message(
        Task("Report the Q3 cloud budget of 12,500 USD."), AgentId("coordinator", "default")
    )
    await runtime.stop_when_idle()
    await recorder.aflush()
    print(f"\nanswer: {answer}")

    print("\n== recorded by the runtime handler ==")
    for agent in ("coordinator", "analyst", "shared_memory", "tools"):
        print(f"-- {agent}")
        for record in reversed(store.operator.conversation(agent)):
            print(f"   said ({record.context.get('type')}): {record.content[:100]}")
        for call in reversed(store.operator.tool_history(agent)):
            print(
                f"   tool {call.tool_name}({json.dumps(call.tool_args)}) -> {call.result} "
                f"[{'ok' if call.success else 'failed'}, {call.duration_ms:.1f} ms]"
            )
    recorder.close()
    report(store)


if __name__ == "__main__":
    asyncio.run(main())
