"""Storage time of ``remember_many`` in batches of 256 into a fresh scope (cheap ``HashEmbedder``, so the model
is not what is timed). Run it once per tree, alternating, to compare revisions:

    for i in 1 2 3; do for t in <old tree> <new tree>; do PYTHONPATH=$t/src python bench/write_batch.py; done; done
"""

from __future__ import annotations

import statistics
import tempfile
import time

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.testing import HashEmbedder


def main() -> None:
    texts = [
        f"fact {i}: service s{i % 97} is owned by team t{i % 13} and deploys on day {i % 7} at {i % 24}:00"
        for i in range(8192)
    ]
    store = SharedMemoryStore(tempfile.mkdtemp(), embedder=HashEmbedder())
    times = []
    for lo in range(0, len(texts), 256):
        start = time.perf_counter()
        store.remember_many(texts[lo : lo + 256], "group", group_id="fresh")
        times.append(time.perf_counter() - start)
    print(f"median ms per 256: {1000 * statistics.median(times):.1f}")


if __name__ == "__main__":
    main()
