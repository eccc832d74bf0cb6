"""Quickstart: a store, three scopes, hybrid recall and a capsule — with the real MiniLM model, offline.

Run: python examples/quickstart.py [--root DIR | --keep]
"""

from __future__ import annotations

import argparse

from _common import add_root_arguments, memory_root

from autogen_shared_memory import SharedMemoryStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_root_arguments(parser)
    args = parser.parse_args()
    root = memory_root(args, "shared-memory-")

    store = SharedMemoryStore(root, global_writers=["lead"])
    store.add_group_member("crew", "researcher")
    store.add_group_member("crew", "writer")

    store.remember("Answers to the user are formatted as markdown tables.", "global")
    store.remember("The Q3 report is due on October 14.", "group", agent_id="researcher", group_id="crew")
    store.remember("The sales API paginates with a cursor, not page numbers.", "agent", agent_id="researcher")
    receipt = store.remember("the q3 report is due on october 14", "group", agent_id="writer", group_id="crew")
    print(f"duplicate -> {receipt.status} {receipt.id}")

    hits = store.search("When is the quarterly report deadline?", agent_id="writer", group_id="crew")
    for hit in hits:
        print(f"{hit.score:.4f} lex={hit.lexical_rank} sem={hit.semantic_rank} [{hit.fact.scope}] {hit.content}")
    print(store.capsule(hits, max_bytes=400))
    print("files:", sorted(p.name for p in store.root.glob("*.db")))


if __name__ == "__main__":
    main()
