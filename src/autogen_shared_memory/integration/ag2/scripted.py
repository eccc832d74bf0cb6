"""A scripted AG2 model client: an agent whose model replies are written in advance, tool calls included.

For tests, examples and offline demos (AG2 has no replay client of its own). The replies go through AG2's
whole machinery exactly as a real model's would: the ``OpenAIWrapper``, the tool-call messages, the
function map, the group chat's choice of executor::

    agent = ConversableAgent("carol", llm_config=scripted_llm_config("carol"), human_input_mode="NEVER")
    agent.register_model_client(
        ScriptedModelClient, script=[tool_call("memory_remember", fact="...", scope="group"), "Done."]
    )

Each request is kept in ``calls`` (the messages and the tools the model was offered).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ScriptedModelClient", "scripted_llm_config", "tool_call"]

_ids = itertools.count(1)


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    """A scripted model turn that calls one tool (the assistant message a real model returns)."""
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"call_{next(_ids)}", "type": "function", "function": function}],
    }


def scripted_llm_config(name: str = "scripted") -> dict[str, Any]:
    """An ``llm_config`` whose only model is a :class:`ScriptedModelClient` (register it on the agent)."""
    return {"config_list": [{"model": name, "model_client_cls": ScriptedModelClient.__name__}], "cache_seed": None}


@dataclass
class _Choice:
    message: Any
    finish_reason: str = "stop"


@dataclass
class _Response:
    choices: list[_Choice]
    model: str
    id: str = field(default_factory=lambda: f"scripted-{next(_ids)}")
    cost: float = 0.0
    message_retrieval_function: Any = None


class ScriptedModelClient:
    """AG2's ``ModelClient`` protocol, answering from ``script``: text replies (str) and tool-call turns
    (dicts, see :func:`tool_call`). A request after the last reply raises ``RuntimeError``, unless
    ``then`` gives the text to answer from there on."""

    RESPONSE_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens", "cost", "model")

    def __init__(
        self, config: dict[str, Any], *, script: Iterable[str | dict[str, Any]] = (), then: str | None = None
    ) -> None:
        self.config = config
        self.script = list(script)
        self.then = then
        self.calls: list[dict[str, Any]] = []

    def create(self, params: dict[str, Any]) -> _Response:
        self.calls.append(params)
        if self.script:
            reply = self.script.pop(0)
        elif self.then is not None:
            reply = self.then
        else:
            raise RuntimeError(f"the scripted model {self.config.get('model')!r} has no reply left")
        message = json.loads(json.dumps(reply)) if isinstance(reply, dict) else reply  # a fresh copy each time
        return _Response([_Choice(message)], str(self.config.get("model", "scripted")))

    def message_retrieval(self, response: _Response) -> list[Any]:
        return [choice.message for choice in response.choices]

    def cost(self, response: _Response) -> float:
        return 0.0

    @staticmethod
    def get_usage(response: _Response) -> dict[str, Any]:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "cost": 0.0, "model": response.model}
