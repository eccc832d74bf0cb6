"""Storage time of ``remember_many`` in batches of 256 into a fresh scope, with an embedder that costs little.

Default: 32 batches of templated texts with the cheap ``HashEmbedder`` (inside the timing; its bag-of-words
vectors give most facts near neighbours). ``--model``: 8 batches of varied facts (``common.corpus.make_facts``)
with the ONNX model's own vectors, computed once before the timing and handed back by an embedder that looks
them up (needs ``HF_HUB_OFFLINE=1``). Run it from ``bench/``, once per tree, alternating, to compare revisions:

    for i in 1 2 3; do for t in <old tree> <new tree>; do PYTHONPATH=$t/src python write_batch.py; done; done
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence

import numpy as np
from common.corpus import make_facts

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.embedding import Vectors
from autogen_shared_memory.testing import HashEmbedder


class Precomputed:
    """The model's vectors of known texts, looked up (so that the timing is the store's alone)."""

    def __init__(self, texts: Sequence[str]) -> None:
        from autogen_shared_memory.onnx_embedding import OnnxEmbedder

        model = OnnxEmbedder(cache_size=0)
        self.model_id, self.dimension = model.model_id, model.dimension
        self.rows = {t: i for i, t in enumerate(texts)}
        self.vectors = np.asarray(model.embed(list(texts)), dtype=np.float32)

    def embed(self, texts: Sequence[str]) -> Vectors:
        return self.vectors[[self.rows[t] for t in texts]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="store_true", help="the ONNX model's vectors of varied facts")
    args = parser.parse_args()
    if args.model:
        texts = make_facts(2048, 11)
        embedder: object = Precomputed(texts)
    else:
        texts = [
            f"fact {i}: service s{i % 97} is owned by team t{i % 13} and deploys on day {i % 7} at {i % 24}:00"
            for i in range(8192)
        ]
        embedder = HashEmbedder()
    store = SharedMemoryStore(tempfile.mkdtemp(), embedder=embedder)  # type: ignore[arg-type]
    times = []
    for lo in range(0, len(texts), 256):
        start = time.perf_counter()
        store.remember_many(texts[lo : lo + 256], "group", group_id="fresh")
        times.append(time.perf_counter() - start)
    print(f"median ms per 256: {1000 * statistics.median(times):.1f}")


if __name__ == "__main__":
    main()
