"""Shared bits of the examples: scripted model clients that make real tool calls, or a real endpoint."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

from autogen_core import FunctionCall
from autogen_core.models import ChatCompletionClient, CreateResult, ModelInfo, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient

from autogen_shared_memory import SharedMemoryStore

# The scripted client warns on every turn that it counts tokens of text only: not useful here.
logging.getLogger("autogen_core.events").setLevel(logging.ERROR)

TOOL_MODEL = ModelInfo(
    vision=False, function_calling=True, json_output=False, family="unknown", structured_output=False
)


def tool_call(name: str, **arguments: Any) -> CreateResult:
    """A scripted model turn that calls one tool (exactly what a real model returns for a tool call)."""
    return CreateResult(
        finish_reason="function_calls",
        content=[
            FunctionCall(
                id=f"call_{name}_{abs(hash(json.dumps(arguments))) % 10**6}",
                name=name,
                arguments=json.dumps(arguments),
            )
        ],
        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
    )


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", help="memory directory (default: a fresh temporary one)")
    parser.add_argument("--model", help="use a real OpenAI-compatible model instead of the scripted one")
    parser.add_argument("--base-url", help="endpoint of that model, e.g. http://localhost:11434/v1 (Ollama)")


def model_client(args: argparse.Namespace, script: list[CreateResult | str]) -> ChatCompletionClient:
    """The scripted client (offline, default) or a real endpoint when ``--model`` is given."""
    if not args.model:
        return ReplayChatCompletionClient(script, model_info=TOOL_MODEL)
    try:
        from autogen_ext.models.openai import OpenAIChatCompletionClient
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise SystemExit("a real model needs: pip install 'autogen-ext[openai]'") from exc
    return OpenAIChatCompletionClient(
        model=args.model,
        base_url=args.base_url,
        api_key=os.environ.get("OPENAI_API_KEY", "not-needed-for-local-servers"),
        model_info=TOOL_MODEL,
    )


def report(store: SharedMemoryStore) -> None:
    """Print every fact per scope file (who remembered what) and the files written."""
    print("\n== what the agents remembered ==")
    for stats in store.stats():
        path = store.root / stats.scope.file_name
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT id, created_by, status, reinforcement, content FROM facts ORDER BY seq")
            facts = rows.fetchall()
        print(f"{path.name}  ({stats.scope}, {sum(stats.counts.values())} facts)")
        for fact_id, by, status, reinforcement, content in facts:
            print(f"   {fact_id}  by {by:<11} {status:<9} x{reinforcement}  {content}")
    print("\n== db files written ==")
    for path in sorted(Path(store.root).glob("*.db")):
        print(f"   {path}")
