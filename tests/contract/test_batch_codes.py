"""A write batch quantizes its vectors once; each inserted fact must get its own row of codes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

import numpy as np
import pytest

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.search.int8 import Codes, quantize
from autogen_shared_memory.testing import HashEmbedder


def test_each_inserted_fact_gets_the_codes_of_its_own_vector(
    backend_name: str, make_store: Callable[..., SharedMemoryStore], embedder: HashEmbedder
) -> None:
    if backend_name == "memory":
        pytest.skip("the in-memory backend keeps no int8 index")
    store = make_store()
    texts = [f"fact number {i} about topic {i % 7} and owner {i % 5}" for i in range(300)]
    texts[10] = texts[3]  # a duplicate in the batch: reinforced, not inserted, so rows and batch indices part
    store.as_operator("crew").remember_many(texts, "group")
    ref = store.engine.scope_ref("group", group_id="crew")
    backend = store.backend
    index = backend._index(ref) if backend_name == "sqlite" else backend._cache(ref)  # type: ignore[attr-defined]
    with index.lock:
        n = index.n
        got = index.codes.rows(n)
        ids = list(index.ids[:n])
    contents = {f.id: f.content for f in store.backend.get(ref, ids)}
    want: Codes = quantize(np.asarray(embedder.embed([contents[i] for i in ids]), dtype=np.float32))
    assert n == 299
    for f in fields(Codes):
        np.testing.assert_array_equal(getattr(got, f.name), getattr(want, f.name), err_msg=f.name)
