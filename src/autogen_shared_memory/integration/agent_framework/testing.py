"""A scripted MAF chat client for tests and offline examples: each model turn is written in advance.

``ScriptedChatClient`` has MAF's function-invocation layer, so a scripted tool call is a real one: MAF
looks the tool up, runs it and sends the result back to the "model", whose next scripted turn follows::

    client = ScriptedChatClient([
        tool_call("memory_remember", fact="The launch is on March 3.", scope="group"),
        "Noted.",
    ])
    agent = Agent(client, "You are the researcher.", name="researcher")

Every request the client got is kept in ``client.requests`` (messages, options with tools and
instructions) for assertions.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_framework import (
    BaseChatClient,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    Message,
    ResponseStream,
)

_ids = itertools.count(1)


@dataclass(frozen=True)
class ToolCall:
    """One scripted function call: ``arguments`` as the model sends them (a JSON text, or a mapping)."""

    name: str
    arguments: str | Mapping[str, Any]


def tool_call(name: str, /, arguments: str | None = None, **kwargs: Any) -> ToolCall:
    """A scripted model turn that calls ``name`` with ``kwargs`` (or with the raw JSON text ``arguments``)."""
    return ToolCall(name, arguments if arguments is not None else kwargs)


Turn = str | ToolCall | Sequence[ToolCall]


@dataclass
class Request:
    """What the scripted client was sent for one model turn."""

    messages: list[Message]
    options: dict[str, Any]

    @property
    def tool_names(self) -> list[str]:
        return [str(getattr(t, "name", t)) for t in self.options.get("tools") or []]

    @property
    def instructions(self) -> str:
        return str(self.options.get("instructions") or "")


class ScriptedChatClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """A chat client that answers from a script: a text, a tool call or several tool calls per turn.

    When the script is used up it answers ``default`` (text).
    """

    def __init__(self, script: Sequence[Turn] = (), *, default: str = "Done.") -> None:
        super().__init__()
        self.script: list[Turn] = list(script)
        self.default = default
        self.requests: list[Request] = []

    def _next_message(self, messages: Sequence[Message], options: Mapping[str, Any]) -> Message:
        self.requests.append(Request(list(messages), dict(options)))
        turn: Turn = self.script.pop(0) if self.script else self.default
        if isinstance(turn, str):
            return Message(role="assistant", contents=[turn])
        calls = [turn] if isinstance(turn, ToolCall) else list(turn)
        contents = [
            Content.from_function_call(
                call_id=f"call_{next(_ids)}",
                name=call.name,
                arguments=call.arguments if isinstance(call.arguments, str) else json.dumps(dict(call.arguments)),
            )
            for call in calls
        ]
        return Message(role="assistant", contents=contents)

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Mapping[str, Any], **kwargs: Any
    ) -> Awaitable[ChatResponse[Any]] | ResponseStream[ChatResponseUpdate, ChatResponse[Any]]:
        message = self._next_message(messages, options)
        if stream:

            async def updates() -> AsyncIterator[ChatResponseUpdate]:
                yield ChatResponseUpdate(role="assistant", contents=list(message.contents))

            return self._build_response_stream(updates())

        async def response() -> ChatResponse[Any]:
            return ChatResponse(messages=[message])

        return response()
