"""Shared bits of the examples: where the memory lives (a temporary folder removed at the end, unless kept),
scripted model clients that make real tool calls, or a real endpoint."""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from autogen_core.models import ChatCompletionClient, CreateResult

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.sqlite import scope_file_name
from autogen_shared_memory.integration.autogen.testing import TOOL_MODEL, scripted_client
from autogen_shared_memory.integration.autogen.testing import tool_call as tool_call  # the examples' turns

# Upstream log lines that read like problems but are not, here: AutoGen's scripted client warns on every
# turn that it counts tokens of text only; AG2 logs at INFO, on stdout, that each scripted client "can not
# be used until register_model_client is called" (the examples register it right after). Real warnings
# and errors still show.
logging.getLogger("autogen_core.events").setLevel(logging.ERROR)
logging.getLogger("autogen.oai.client").setLevel(logging.WARNING)


def add_root_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", help="memory directory (default: a fresh temporary one, removed at the end)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary memory directory (and say where)")


def memory_root(args: argparse.Namespace, prefix: str) -> str:
    """``--root``, else a fresh temporary directory that is removed when the example ends, unless ``--keep``:
    either way the last line printed says which, so the memory can be looked at or found."""
    if args.root:
        return str(args.root)
    root = tempfile.mkdtemp(prefix=prefix)

    def finish() -> None:
        if args.keep:
            print(f"\nthe memory is kept in {root}: look at it with `autogen-shared-memory --root {root} scopes`")
        else:
            shutil.rmtree(root, ignore_errors=True)
            print(f"\nremoved the temporary memory {root} (--keep keeps it, --root DIR picks where it goes)")

    atexit.register(finish)
    return root


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    add_root_arguments(parser)
    parser.add_argument("--model", help="use a real OpenAI-compatible model instead of the scripted one")
    parser.add_argument("--base-url", help="endpoint of that model, e.g. http://localhost:11434/v1 (Ollama)")


def model_client(args: argparse.Namespace, script: list[CreateResult | str]) -> ChatCompletionClient:
    """The scripted client (offline, default) or a real endpoint when ``--model`` is given."""
    if not args.model:
        return scripted_client(*script)  # a scripted model that makes real tool calls
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
        path = store.root / scope_file_name(stats.scope)
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT id, created_by, status, reinforcement, content FROM facts ORDER BY seq")
            facts = rows.fetchall()
        print(f"{path.name}  ({stats.scope}, {sum(stats.counts.values())} facts)")
        for fact_id, by, status, reinforcement, content in facts:
            print(f"   {fact_id}  by {by:<11} {status:<9} x{reinforcement}  {content}")
    print("\n== db files written ==")
    for path in sorted(Path(store.root).glob("*.db")):
        print(f"   {path}")
