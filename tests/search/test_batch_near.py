"""A write batch's near-duplicate pass bounds every product from a sketch of the scope (its main directions
plus the norm of the rest) and narrows dense neighbourhoods on coarse int8 bounds: no row that can reach the
floor may be left out, and the rows proposed are the nearest ones by rebuilt cosine, as a full scan finds."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from autogen_shared_memory.search import index as index_module
from autogen_shared_memory.search.index import NearestExisting, VectorIndex
from autogen_shared_memory.search.int8 import Sketch, fit_basis, quantize


def _rows(rng: np.random.Generator, n: int, d: int, spread: float) -> np.ndarray:
    """Rows around a few centres with norms over decades (the bounds are relative to them)."""
    centres = rng.standard_normal((4, d))
    rows = centres[rng.integers(0, 4, n)] + spread * rng.standard_normal((n, d))
    return (rows * np.exp(rng.uniform(-3, 3, (n, 1)))).astype(np.float32)


@settings(max_examples=60)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 300),
    d=st.sampled_from([8, 24, 64]),
    k=st.integers(1, 8),
    fitted=st.booleans(),
    spread=st.sampled_from([0.05, 0.5, 3.0]),
)
def test_sketch_proposes_every_row_whose_product_can_reach_the_floor(
    seed: int, n: int, d: int, k: int, fitted: bool, spread: float
) -> None:
    rng = np.random.default_rng(seed)
    rows = _rows(rng, n, d, spread)
    vectors = np.concatenate([rows[rng.integers(0, n, 6)] + 0.01 * rng.standard_normal((6, d)), _rows(rng, 6, d, 1)])
    vectors = vectors.astype(np.float32)
    codes = quantize(rows)
    basis = fit_basis(codes, n, k) if fitted else np.linalg.qr(rng.standard_normal((d, k)))[0]
    sketch = Sketch(basis, 0)
    projected = sketch.extend(codes, n)
    stored = rows.astype(np.float64) @ vectors.T.astype(np.float64)  # the float32 vectors' products
    for j, v in enumerate(vectors):
        approx, error = codes.cosines(np.arange(n), v)  # what the re-check after the sketch decides on
        # the floor right at a row's product (stored, or the rebuilt one's upper end): no rounding room left
        for floor in {float(stored[rng.integers(n), j]), float(np.max(approx + error)), float(np.max(stored[:, j]))}:
            must = np.flatnonzero((stored[:, j] >= floor) | (approx + error >= floor))
            found = [h for _, _, hits in sketch.reaching(projected, v[None, :], floor) for h in hits]
            assert set(must.tolist()) <= set(found)


def _brute(codes_index: VectorIndex, vectors: np.ndarray, floor: float, live: np.ndarray) -> list[list[int]]:
    """The nearest (by rebuilt cosine, at most 8) live rows whose rebuilt cosine can reach the floor."""
    codes = codes_index.codes.rows(codes_index.n)
    out = []
    for v in vectors:
        approx, error = codes.cosines(np.arange(codes_index.n), v)
        rows = np.flatnonzero((approx + error >= floor) & live)
        out.append(rows[np.argsort(-approx[rows], kind="stable")][: NearestExisting.CANDIDATES].tolist())
    return out


@pytest.mark.parametrize("sketch_from", [1, 10**9])  # the sketch, and a small scope's rebuilt rows
@settings(max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), tight=st.booleans())
@example(seed=14152, tight=False)  # a row 4e-7 over the floor by cosines()'s bound, which the rebuilt rows' missed
def test_batch_candidates_are_the_nearest_rows_a_full_scan_finds(sketch_from: int, seed: int, tight: bool) -> None:
    # Dense neighbourhoods (hundreds of rows above the floor, their cosines ~1e-4 apart when ``tight``): the
    # coarse int8 bounds (error ~1e-2) must still let through every row that can be among the 8 nearest.
    rng = np.random.default_rng(seed)
    d, n = 48, 1500
    centres = rng.standard_normal((3, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    noise = 1e-3 if tight else 0.08
    rows = centres[rng.integers(0, 3, n)] + noise * rng.standard_normal((n, d))
    rows = np.concatenate([rows, rng.standard_normal((500, d))])
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    index = VectorIndex()
    index.apply(
        [
            (i + 1, f"f{i}", "active" if i % 7 else "archived", None, r.astype(np.float32).tobytes())
            for i, r in enumerate(rows)
        ]
    )
    # 140 vectors: the sketch's chunks of 64 run on several threads and must come back in batch order
    near_centres = centres[rng.integers(0, 3, 70)] + noise * rng.standard_normal((70, d))
    vectors = np.concatenate([near_centres, rng.standard_normal((70, d))])
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    floor = 0.8 if not tight else 0.99
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(index_module, "SKETCH_FROM", sketch_from)
        near = NearestExisting(lambda s, q: np.zeros(len(s), np.float32), index, vectors, time.time(), floor, 2.0, {})
    live = index.live_mask(time.time(), include_inactive=False)
    assert [r.tolist() for r in near.near] == _brute(index, vectors, floor, live)
