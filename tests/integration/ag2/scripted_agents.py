"""AG2 agents whose model is a script (real ``ConversableAgent``s, real tool loop), for the adapter's tests."""

from __future__ import annotations

from typing import Any

from autogen import ConversableAgent

from autogen_shared_memory.integration.ag2.scripted import ScriptedModelClient, scripted_llm_config


def agent(name: str, *script: str | dict[str, Any], then: str | None = None) -> ConversableAgent:
    """An agent answering ``script`` in turn, then ``then`` (None: the script's end is an error)."""
    a = ConversableAgent(
        name, system_message=f"You are {name}.", llm_config=scripted_llm_config(name), human_input_mode="NEVER"
    )
    a.register_model_client(ScriptedModelClient, script=script, then=then)
    return a


def model(a: ConversableAgent) -> ScriptedModelClient:
    """The agent's scripted model (what it was sent is in ``calls``)."""
    client = a.client._clients[0]  # type: ignore[union-attr]
    assert isinstance(client, ScriptedModelClient)
    return client
