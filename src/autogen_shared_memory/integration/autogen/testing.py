"""A scripted AutoGen model client for tests and offline examples: each model turn is written in advance.

``scripted_client`` is an autogen-core ``ChatCompletionClient`` (no autogen-ext needed) that declares function
calling, so attach gives the agent the memory tools (a client that does not declare it gets read-only
recall), and a scripted tool call is a real one: the ``AssistantAgent`` runs the tool and the next scripted
turn follows::

    client = scripted_client(
        tool_call("memory_remember", fact="The launch is on March 3.", scope="group"),
        "Noted.",
    )
    agent = AssistantAgent("researcher", model_client=client)

Every request the client got is kept in ``client.create_calls`` (messages and tools) for assertions.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from autogen_core import CancellationToken, FunctionCall
from autogen_core.models import (
    ChatCompletionClient,
    CreateResult,
    LLMMessage,
    ModelCapabilities,
    ModelInfo,
    RequestUsage,
)
from autogen_core.tools import Tool, ToolSchema

__all__ = ["TOOL_MODEL", "ScriptedChatCompletionClient", "scripted_client", "tool_call"]

TOOL_MODEL = ModelInfo(
    vision=False, function_calling=True, json_output=False, family="unknown", structured_output=False
)
"""The model info of a scripted model that calls functions."""

_ids = itertools.count(1)


def tool_call(name: str, /, arguments: str | None = None, **kwargs: Any) -> CreateResult:
    """A scripted model turn that calls one tool, as a real model's reply to a tool call is.

    Args:
        name: the tool to call.
        arguments: the raw JSON text of the arguments (for arguments no keyword can express, or broken JSON).
        kwargs: the arguments, when ``arguments`` is not given.

    Returns:
        The model turn.
    """
    text = arguments if arguments is not None else json.dumps(kwargs)
    return CreateResult(
        finish_reason="function_calls",
        content=[FunctionCall(id=f"call_{next(_ids)}", name=name, arguments=text)],
        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
    )


class ScriptedChatCompletionClient(ChatCompletionClient):
    """A model client that answers each call with the next of its scripted turns.

    Every request it got is kept in :attr:`create_calls` (``messages``, ``tools``, ``json_output``,
    ``extra_create_args``) in the order received. A call after the last turn raises ``ValueError``.
    """

    def __init__(self, turns: Sequence[CreateResult | str], model_info: ModelInfo) -> None:
        self._turns = list(turns)
        self._model_info = model_info
        self._usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
        self.create_calls: list[dict[str, Any]] = []

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = (),
        tool_choice: Tool | str = "auto",
        json_output: bool | type[Any] | None = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> CreateResult:
        """The next scripted turn (a text turn becomes a final answer).

        Args:
            messages: the conversation sent to the model (kept in :attr:`create_calls`).
            tools: the tools offered (kept).
            tool_choice: ignored.
            json_output: kept.
            extra_create_args: kept.
            cancellation_token: ignored.

        Returns:
            The turn.

        Raises:
            ValueError: every scripted turn was used.
        """
        if len(self.create_calls) >= len(self._turns):
            raise ValueError(f"the scripted model has no turn left after {len(self._turns)}")
        turn = self._turns[len(self.create_calls)]
        self.create_calls.append(
            {"messages": messages, "tools": tools, "json_output": json_output, "extra_create_args": extra_create_args}
        )
        if isinstance(turn, str):
            turn = CreateResult(finish_reason="stop", content=turn, usage=self._usage, cached=False)
        return turn

    async def create_stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[Tool | ToolSchema] = (),
        tool_choice: Tool | str = "auto",
        json_output: bool | type[Any] | None = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> AsyncGenerator[str | CreateResult, None]:
        """The next scripted turn as a stream of one result (see :meth:`create`).

        Args:
            messages: as for :meth:`create`.
            tools: as for :meth:`create`.
            tool_choice: ignored.
            json_output: as for :meth:`create`.
            extra_create_args: as for :meth:`create`.
            cancellation_token: ignored.

        Returns:
            An async generator yielding the turn.
        """
        yield await self.create(messages, tools=tools, json_output=json_output, extra_create_args=extra_create_args)

    async def close(self) -> None:
        """Nothing to release."""

    def actual_usage(self) -> RequestUsage:
        """Returns: zero usage (a scripted model spends no tokens)."""
        return self._usage

    def total_usage(self) -> RequestUsage:
        """Returns: zero usage (a scripted model spends no tokens)."""
        return self._usage

    def count_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        """Returns: 0 (a scripted model has no tokenizer)."""
        return 0

    def remaining_tokens(self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()) -> int:
        """Returns: a large constant (a scripted model has no context limit)."""
        return 1_000_000

    @property
    def capabilities(self) -> ModelCapabilities:
        """The model info (the deprecated name of :attr:`model_info`)."""
        return self._model_info

    @property
    def model_info(self) -> ModelInfo:
        """What the scripted model declares (function calling or not)."""
        return self._model_info


def scripted_client(*turns: CreateResult | str, function_calling: bool = True) -> ScriptedChatCompletionClient:
    """A model client that answers from ``turns`` (text, or :func:`tool_call` turns), one per model call.

    Args:
        turns: the model's replies, in order.
        function_calling: whether the client declares function calling (``False``: a model without tools,
            which attach gives read-only recall).

    Returns:
        The client.
    """
    info = TOOL_MODEL if function_calling else ModelInfo(**{**TOOL_MODEL, "function_calling": False})
    return ScriptedChatCompletionClient(turns, info)
