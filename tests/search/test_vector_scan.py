"""Searches scan coarse int8 codes of the vectors (a quarter of the float32 bytes), rebuild what can make the
top from finer codes and re-score from the float32 vectors in the file whatever order is still in doubt: the
ranking (and the near-duplicate decision) is the float32 one, and the bounds never drop a row that belongs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.core.types import Filters
from autogen_shared_memory.embedding import Vectors, normalize
from autogen_shared_memory.search.int8 import int8_bounds, int8_dots, largest, pairs, quantize, shortlist
from autogen_shared_memory.settings import DedupSettings
from autogen_shared_memory.testing import vector_at_cosine

DIM = 64


class TableEmbedder:
    """``"v<i>"`` embeds to row ``i`` of a fixed table, so a test chooses every cosine exactly. So do
    ``"v a"``, ``"the v a"``, ``"v a please"`` (rows 0, 1, 2): texts with the same wording but not equal
    (an article, "please"), as near duplicates need."""

    model_id = "table-embedder"
    dimension = DIM

    def __init__(self, table: np.ndarray) -> None:
        self.table = table

    def embed(self, texts: Sequence[str]) -> Vectors:
        rows = [int(t[1:]) if t[1:].isdigit() else ("v a", "the v a", "v a please").index(t) for t in texts]
        return normalize(np.stack([self.table[i] for i in rows]))


def at_cosine(c: float, rng: np.random.Generator) -> np.ndarray:
    """A unit vector whose cosine with e0 is ``c``."""
    return vector_at_cosine(c, DIM, rng)


def test_scan_ranks_near_ties_by_their_float32_cosines(tmp_path: Path) -> None:
    # 40 facts 5e-5 apart in cosine (float16 cannot tell them apart: its spacing near 0.9 is 4.9e-4) among
    # 2,000 unrelated ones, written in shuffled order so that storage order does not give the answer away.
    rng = np.random.default_rng(7)
    cosines = 0.9 - 5e-5 * np.arange(40)
    table = np.concatenate([[at_cosine(c, rng) for c in cosines], rng.standard_normal((2000, DIM))])
    table = np.concatenate([table, np.eye(DIM)[:1]])  # the query: e0
    order = rng.permutation(len(table) - 1)
    store = SharedMemoryStore(tmp_path, embedder=TableEmbedder(table), dedup=DedupSettings(near_duplicate=1.01))
    ids = {
        int(i): r.id
        for i, r in zip(order, store.operator.remember_many([f"v{i}" for i in order], "global"), strict=True)
    }
    got = [
        (fid, c) for _, fid, c in store.backend.semantic([store.engine.scope_ref("global")], table[-1], 20, Filters())
    ]
    assert [fid for fid, _ in got] == [ids[i] for i in range(20)]
    assert [c for _, c in got] == pytest.approx(cosines[:20], abs=1e-6)
    hits = store.operator.search(f"v{len(table) - 1}", "global", top_k=5)
    assert [h.semantic_rank for h in hits] == [1, 2, 3, 4, 5]
    assert [h.cosine for h in hits] == pytest.approx(cosines[:5], abs=1e-6)


def test_near_duplicate_threshold_is_decided_on_float32_cosines(tmp_path: Path) -> None:
    # In float16, 0.94999 rounds up to 0.9502: a float16-only check would call it a near-duplicate.
    rng = np.random.default_rng(3)
    table = np.stack([np.eye(DIM)[0], at_cosine(0.94999, rng), at_cosine(0.95001, rng)])
    store = SharedMemoryStore(tmp_path, embedder=TableEmbedder(table), dedup=DedupSettings(near_duplicate=0.95))
    first = store.operator.remember("v a", "global")
    below = store.operator.remember("the v a", "global")
    assert below.status == "created" and below.similar == (first.id,)  # 0.94999: similar, not the same
    above = store.operator.remember("v a please", "global")
    assert above.status == "reinforced" and above.duplicate_of == first.id
    # the same decisions inside one batch, against facts the batch itself inserted
    other = SharedMemoryStore(
        tmp_path / "batch", embedder=TableEmbedder(table), dedup=DedupSettings(near_duplicate=0.95)
    )
    receipts = other.operator.remember_many(["v a", "the v a", "v a please"], "global")
    assert [r.status for r in receipts] == ["created", "created", "reinforced"]
    assert receipts[2].duplicate_of == receipts[0].id


def test_semantic_ranks_several_scopes_together(tmp_path: Path) -> None:
    # Near-ties spread over two scopes: the overall top 10 by float32 cosine, whichever scope holds them.
    rng = np.random.default_rng(11)
    cosines = 0.8 - 5e-5 * np.arange(30)
    table = np.concatenate([[at_cosine(c, rng) for c in cosines], rng.standard_normal((500, DIM)), np.eye(DIM)[:1]])
    store = SharedMemoryStore(tmp_path, embedder=TableEmbedder(table), dedup=DedupSettings(near_duplicate=1.01))
    store.operator.add_member("crew", "a1")
    in_group = [i for i in range(len(table) - 1) if i % 3 == 0]
    in_global = [i for i in range(len(table) - 1) if i % 3 != 0]
    ids = dict(
        zip(
            in_group,
            [r.id for r in store.as_agent("a1", "crew").remember_many([f"v{i}" for i in in_group], "group")],
            strict=True,
        )
    )
    ids |= dict(
        zip(
            in_global, [r.id for r in store.operator.remember_many([f"v{i}" for i in in_global], "global")], strict=True
        )
    )
    scopes = [store.engine.scope_ref("group", group_id="crew"), store.engine.scope_ref("global")]
    got = store.backend.semantic(scopes, table[-1], 10, Filters())
    assert [(ref.kind, fid) for ref, fid, _ in got] == [
        ("group" if i % 3 == 0 else "global", ids[i]) for i in range(10)
    ]
    assert [c for _, _, c in got] == pytest.approx(cosines[:10], abs=1e-6)


_UNIT = st.one_of(st.floats(-1.0, 1.0, width=32, allow_subnormal=False), st.sampled_from([0.0, 1.0, -1.0, 1e-8]))


@settings(max_examples=300)
@given(
    hnp.arrays(np.float32, (6, 24), elements=_UNIT),
    hnp.arrays(np.float32, 24, elements=_UNIT),
    hnp.arrays(np.float32, (6, 1), elements=st.sampled_from([0.0, 1e-6, 0.05, 1.0, 7.0, 1e3])),
    st.sampled_from([1e-6, 0.3, 1.0, 1e3]),
)
def test_int8_bounds_contain_the_exact_product(rows: np.ndarray, q: np.ndarray, gains: np.ndarray, g: float) -> None:
    # Any vectors, normalized or not (a custom embedder may return either), zero rows included.
    rows, q = rows * gains, q * np.float32(g)
    codes = quantize(rows)
    (bounds,) = int8_bounds([codes], q)
    exact = rows.astype(np.float64) @ q.astype(np.float64)
    assert np.all(np.abs(exact - bounds.estimate) <= bounds.error())
    assert np.all(np.abs(exact - bounds.estimate) <= bounds.max_error())
    rebuilt, error = codes.cosines(np.arange(len(rows)), q)  # the finer level: rebuilt rows
    assert np.all(np.abs(exact - rebuilt) <= error)


def test_int8_bounds_hold_for_wide_vectors_with_large_integer_sums() -> None:
    # 3,072-d vectors near +-1 everywhere: int8 sums near 3072 * 127**2 ~ 5e7, past float32's exact integers.
    rng = np.random.default_rng(2)
    signs = rng.choice([-1.0, 1.0], size=3072).astype(np.float32)
    rows = (signs * rng.uniform(0.95, 1.0, (8, 3072))).astype(np.float32)
    q = (signs * rng.uniform(0.97, 1.0, 3072)).astype(np.float32)
    codes = quantize(rows)
    (bounds,) = int8_bounds([codes], q)
    exact = rows.astype(np.float64) @ q.astype(np.float64)
    assert np.all(np.abs(exact - bounds.estimate) <= bounds.error())
    rebuilt, error = codes.cosines(np.arange(len(rows)), q)
    assert np.all(np.abs(exact - rebuilt) <= error)


def test_int8_shortlist_keeps_every_row_of_a_dense_top(tmp_path: Path) -> None:
    # 3,000 facts whose cosines with the query all lie within 0.01 of each other (the int8 estimates cannot
    # order them): the top 50 returned are the float32 top 50, in order.
    rng = np.random.default_rng(5)
    cosines = rng.uniform(0.60, 0.61, 3000)
    table = np.concatenate([[at_cosine(c, rng) for c in cosines], rng.standard_normal((3000, DIM)), np.eye(DIM)[:1]])
    rotation = np.linalg.qr(rng.standard_normal((DIM, DIM)))[0]  # spread e0 over every component (int8 error)
    store = SharedMemoryStore(
        tmp_path, embedder=TableEmbedder(table @ rotation), dedup=DedupSettings(near_duplicate=1.01)
    )
    ids = [r.id for r in store.operator.remember_many([f"v{i}" for i in range(len(table) - 1)], "global")]
    got = store.backend.semantic([store.engine.scope_ref("global")], table[-1] @ rotation, 50, Filters())
    best = np.argsort(-cosines, kind="stable")[:50]
    assert [fid for _, fid, _ in got] == [ids[i] for i in best]
    assert [c for _, _, c in got] == pytest.approx(cosines[best], abs=1e-6)


@pytest.mark.parametrize("live", [1.0, 0.5, 0.002])
@pytest.mark.parametrize("k", [1, 50, 7000])
def test_blockwise_best_shortlist_equals_the_whole_part_one(live: float, k: int) -> None:
    # int8_bounds with a mask and k keeps each block's k best estimates: shortlist on those must choose the
    # same rows as on every row of the parts (several parts, several blocks each, some rows masked out).
    rng = np.random.default_rng(11)
    parts = [quantize(normalize(rng.standard_normal((n, DIM)).astype(np.float32))) for n in (40_000, 9_000, 300)]
    masks = [rng.random(len(p)) < live for p in parts]
    q = normalize(rng.standard_normal((1, DIM)).astype(np.float32))[0]
    fast = int8_bounds(parts, q, masks, k)
    plain = int8_bounds(parts, q)
    for f, p, mask in zip(fast, plain, masks, strict=True):
        assert f.best is not None
        np.testing.assert_array_equal(f.estimate, p.estimate)
        np.testing.assert_array_equal(shortlist(f, q, mask, k), shortlist(p, q, mask, k))


@given(
    hnp.arrays(
        np.float32,
        st.integers(0, 3000),
        elements=st.sampled_from([-np.inf, -1.0, 0.0, 0.25, 0.5, 1.0]) | st.floats(-1, 1, width=32),
    ),
    st.integers(1, 400),
)
def test_largest_are_the_k_largest_values(values: np.ndarray, k: int) -> None:
    # the sample's floor must never drop one of the k largest: ties at the floor, -inf (masked rows), few values
    got = largest(values, k)
    assert len(got) == min(k, len(values))
    assert np.sort(got).tolist() == np.sort(values)[len(values) - len(got) :].tolist()


@given(st.integers(0, 40), st.integers(1, 1536), st.integers(0, 2**32 - 1))
def test_int8_dots_are_the_exact_integer_products(n: int, dim: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = rng.integers(-127, 128, (n, dim), dtype=np.int8)
    q = rng.choice(np.array([-127, 0, 127], dtype=np.int8), dim)
    got = int8_dots(q, rows)
    assert got.dtype == np.float32 and got.shape == (n,)
    np.testing.assert_array_equal(got, (rows.astype(np.int64) @ q.astype(np.int64)).astype(np.float32))


def test_a_scan_leaves_none_s_reference_count_alone() -> None:
    # SimSIMD's cdist(out=...) returned None without its own reference: each scan block took one from None,
    # and a long-lived process aborted ("deallocating None") after some thousands of searches. Counted in a
    # process of its own: in this one, threads that earlier tests left (pools closing, listeners) move
    # None's count by hundreds meanwhile.
    import subprocess
    import sys

    code = """
import sys
import numpy as np
from autogen_shared_memory.search.int8 import int8_bounds, quantize
rng = np.random.default_rng(3)
x = rng.standard_normal((40_000, 384)).astype(np.float32)
parts = [quantize(x / np.linalg.norm(x, axis=1, keepdims=True))]
q = rng.standard_normal(384).astype(np.float32)
q /= np.linalg.norm(q)
int8_bounds(parts, q)
before = sys.getrefcount(None)
for _ in range(200):  # the bug took at least one reference per call: 200 or more
    int8_bounds(parts, q)
print(before - sys.getrefcount(None))
"""
    taken = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert taken < 50, taken


@given(hnp.arrays(np.bool_, hnp.array_shapes(min_dims=2, max_dims=2, min_side=0, max_side=40)))
def test_pairs_are_numpy_s_nonzero_in_its_order(mask: np.ndarray) -> None:
    rows, cols = pairs(mask)
    want = np.nonzero(mask)
    assert rows.dtype == cols.dtype == np.int64
    assert rows.tolist() == want[0].tolist() and cols.tolist() == want[1].tolist()
