"""A write batch's new facts reach the file together (one ``executemany`` when the lifecycle next reads or
the transaction ends), numbered as SQLite numbers rows: every read inside the transaction still sees the
facts the batch inserted before it, and ``seq`` is the write order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.core.types import ScopeRef
from autogen_shared_memory.embedding import Vectors, normalize
from autogen_shared_memory.testing import HashEmbedder

DIM = 16


class TableEmbedder:
    """Each text embeds to the vector the test chose for it."""

    model_id = "batch-inserts-table"
    dimension = DIM

    def __init__(self, table: Mapping[str, np.ndarray]) -> None:
        self.table = dict(table)

    def embed(self, texts: Sequence[str]) -> Vectors:
        return normalize(np.stack([self.table[t] for t in texts]))


def test_a_batch_finds_the_same_text_it_inserted_earlier_by_its_hash(tmp_path: Path) -> None:
    # the two spellings embed orthogonally: only the content hash (a read of the file) can find the first
    first, again = "Deploy key rotates monthly", "- deploy key rotates monthly."
    eye = np.eye(DIM)
    store = SharedMemoryStore(tmp_path, embedder=TableEmbedder({first: eye[0], "budget is 5k": eye[1], again: eye[2]}))
    receipts = store.operator.remember_many([first, "budget is 5k", again], "global")
    assert [r.status for r in receipts] == ["created", "created", "reinforced"]
    assert receipts[2].duplicate_of == receipts[0].id
    assert store.operator.get(receipts[0].id).reinforcement == 2
    assert store.stats()[0].counts["active"] == 2
    store.close()


def test_a_batch_s_facts_follow_every_earlier_seq_in_write_order(tmp_path: Path) -> None:
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    earlier = store.operator.remember_many(["alpha fact", "beta fact"], "global")
    later = store.operator.remember_many([f"fact number {i}" for i in range(5)], "global")
    rows = store.backend.rows(ScopeRef("global"), "facts")
    seq = {r["id"]: r["seq"] for r in rows}
    assert [seq[r.id] for r in later] == list(range(max(seq[r.id] for r in earlier) + 1, len(rows) + 1))
    store.close()
