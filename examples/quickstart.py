"""Quickstart: a store, three scopes, hybrid recall and a capsule — with the real MiniLM model, offline.

Run: python examples/quickstart.py [--root DIR | --keep]
"""

from __future__ import annotations

import argparse

from _common import add_root_arguments, memory_root

from autogen_shared_memory import SharedMemoryStore, WritePolicy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_root_arguments(parser)
    args = parser.parse_args()
    root = memory_root(args, "shared-memory-")

    store = SharedMemoryStore(root, policy=WritePolicy(global_writers=["lead"]))
    store.operator.add_member("crew", "researcher")
    store.operator.add_member("crew", "writer")

    store.operator.remember("Answers to the user are formatted as markdown tables.", "global")
    store.as_agent("researcher", "crew").remember("The Q3 report is due on October 14.", "group")
    store.as_agent("researcher").remember("The sales API paginates with a cursor, not page numbers.", "agent")
    receipt = store.as_agent("writer", "crew").remember("the q3 report is due on october 14", "group")
    print(f"duplicate -> {receipt.status} {receipt.id}")

    writer = store.as_agent("writer", group="crew")
    hits = writer.search("When is the quarterly report deadline?")
    for hit in hits:
        print(f"{hit.score:.4f} lex={hit.lexical_rank} sem={hit.semantic_rank} [{hit.fact.scope}] {hit.content}")
    print(writer.recall("When is the quarterly report deadline?", max_bytes=400))
    print("files:", sorted(p.name for p in store.root.glob("*.db")))


if __name__ == "__main__":
    main()
