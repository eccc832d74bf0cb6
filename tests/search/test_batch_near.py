"""A small scope's write batch bounds every product from the rebuilt rows and narrows dense neighbourhoods on
coarse int8 bounds: no row that can reach the floor may be left out, and the rows proposed are the nearest
ones by rebuilt cosine, as a full scan finds (a big scope's cells: tests/search/test_cells.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from autogen_shared_memory.search import index as index_module
from autogen_shared_memory.search.index import NearestExisting, VectorIndex


def _brute(codes_index: VectorIndex, vectors: np.ndarray, floor: float, live: np.ndarray) -> list[list[int]]:
    """The nearest (by rebuilt cosine, at most 8) live rows whose rebuilt cosine can reach the floor."""
    codes = codes_index.codes.rows(codes_index.n)
    out = []
    for v in vectors:
        approx, error = codes.cosines(np.arange(codes_index.n), v)
        rows = np.flatnonzero((approx + error >= floor) & live)
        out.append(rows[np.argsort(-approx[rows], kind="stable")][: NearestExisting.CANDIDATES].tolist())
    return out


@settings(max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), tight=st.booleans())
@example(seed=14152, tight=False)  # a row 4e-7 over the floor by cosines()'s bound, which the rebuilt rows' missed
def test_batch_candidates_are_the_nearest_rows_a_full_scan_finds(seed: int, tight: bool) -> None:
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
    # 140 vectors: half near the centres, half anywhere
    near_centres = centres[rng.integers(0, 3, 70)] + noise * rng.standard_normal((70, d))
    vectors = np.concatenate([near_centres, rng.standard_normal((70, d))])
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    floor = 0.8 if not tight else 0.99
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(index_module, "CELLS_FROM", 10**9)
        near = NearestExisting(lambda s, q: np.zeros(len(s), np.float32), index, vectors, time.time(), floor, 2.0, {})
    live = index.live_mask(time.time(), include_inactive=False)
    assert [r.tolist() for r in near.near] == _brute(index, vectors, floor, live)
