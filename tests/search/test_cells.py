"""A big scope's near-duplicate candidates come from its nearest cells, not from every row: the cells may
miss a near duplicate (the write then keeps a new fact), never make a merge the exact check would not make."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autogen_shared_memory.backends.base import Backend, ModelInfo
from autogen_shared_memory.backends.sqlite import SQLiteBackend
from autogen_shared_memory.core.lifecycle import content_hash
from autogen_shared_memory.core.types import Draft, ScopeRef, new_fact_id
from autogen_shared_memory.search import index as index_module
from autogen_shared_memory.search.cells import SIGN_BITS, Cells, cell_size, differing, sign_limit, signs
from autogen_shared_memory.search.int8 import quantize

D = 64
MODEL = ModelInfo("test-cells", D)
SCOPE = ScopeRef("group", "g")


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


def _drafts(texts: list[str]) -> list[Draft]:
    now = time.time()
    return [
        Draft(id=new_fact_id("group"), content=t, created_by="system", created_at=now, content_hash=content_hash(t))
        for t in texts
    ]


@pytest.fixture(params=["sqlite", "postgres"])
def open_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Backend]]:
    """Fresh backends (each its own store) of the kind under test."""
    made: list[Backend] = []

    def make() -> Backend:
        if request.param == "sqlite":
            backend: Backend = SQLiteBackend(tmp_path / f"s{len(made)}")
        else:
            from autogen_shared_memory.backends.postgres import PostgresBackend

            backend = PostgresBackend(request.getfixturevalue("pg_dsn"), schema=f"t{uuid.uuid4().hex[:16]}", max_size=2)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def _at_cosine(v: np.ndarray, cos: float, rng: np.random.Generator) -> np.ndarray:
    """A unit vector at cosine ``cos`` with the unit vector ``v``."""
    u = rng.standard_normal(len(v))
    u -= (u @ v) * v
    return np.asarray(cos * v + np.sqrt(1 - cos * cos) * u / np.linalg.norm(u), dtype=np.float32)


def _workload(seed: int) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """A scope of clustered facts, and a batch that restates some of them (same wording, cosine 0.96-0.995),
    says something else close to others (another word, cosine 0.97), or is only similar (0.85)."""
    rng = np.random.default_rng(seed)
    centres = _unit(rng.standard_normal((40, D)))
    n = 1500
    stored = _unit(centres[rng.integers(0, 40, n)] + 2.0 * rng.standard_normal((n, D)) / np.sqrt(D))
    texts = [f"Service {i} runs in region {i % 7} with {i % 13} replicas" for i in range(n)]
    batch_texts, batch = [], []
    for k, i in enumerate(rng.choice(n, 120, replace=False)):
        kind = k % 3
        batch.append(_at_cosine(stored[i], [rng.uniform(0.96, 0.995), 0.97, 0.85][kind], rng))
        text = texts[i].replace("runs in", "runs in the") if kind == 0 else texts[i].replace("replicas", "workers")
        batch_texts.append(text)
    return texts, stored, batch_texts, _unit(np.asarray(batch))


def _decisions(backend: Backend, seed: int, cells_from: int, patch: pytest.MonkeyPatch) -> list[Any]:
    """What a batch did (status, the stored fact it merged into, how many similar facts it named)."""
    texts, stored, batch_texts, batch = _workload(seed)
    patch.setattr(index_module, "CELLS_FROM", cells_from)
    filled = backend.write(SCOPE, _drafts(texts), stored, MODEL, 2.0, 2.0)  # filled without the check
    position = {r.id: i for i, r in enumerate(filled)}
    receipts = backend.write(SCOPE, _drafts(batch_texts), batch, MODEL, 0.95, 0.8)
    return [(r.status, position.get(r.duplicate_of or ""), len(r.similar)) for r in receipts]


def test_cells_decide_as_the_exact_scan(open_backend: Callable[[], Backend], monkeypatch: pytest.MonkeyPatch) -> None:
    exact = _decisions(open_backend(), 3, 10**9, monkeypatch)
    cells = _decisions(open_backend(), 3, 1, monkeypatch)
    assert [d[0] for d in exact].count("reinforced") == 40  # every restatement found, by both
    assert cells == exact


def test_a_near_duplicate_the_cells_miss_is_kept_as_a_new_fact(
    open_backend: Callable[[], Backend], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Cells, "probe", lambda self, vectors, floor: [np.zeros(0, np.int64)] * len(vectors.coarse))
    backend = open_backend()
    texts, stored, batch_texts, batch = _workload(5)
    monkeypatch.setattr(index_module, "CELLS_FROM", 1)
    backend.write(SCOPE, _drafts(texts), stored, MODEL, 2.0, 2.0)
    receipts = backend.write(SCOPE, _drafts(batch_texts), batch, MODEL, 0.95, 0.8)
    assert {r.status for r in receipts} == {"created"}  # nothing merged, nothing lost
    assert backend.stats(SCOPE).counts["active"] == len(texts) + len(batch_texts)


def test_a_proposed_row_merges_only_on_its_stored_vectors_exact_cosine(
    open_backend: Callable[[], Backend], monkeypatch: pytest.MonkeyPatch
) -> None:
    # This process's codes of a fact say cosine 1 with the draft (as a stale copy would), its stored vector
    # says 0.5: the stored vector decides, and the same wording does not merge them.
    monkeypatch.setattr(index_module, "CELLS_FROM", 1)
    rng = np.random.default_rng(11)
    backend = open_backend()
    old = _unit(rng.standard_normal((300, D)))
    texts = [f"fact number {i} about the weekly report" for i in range(300)]
    filled = backend.write(SCOPE, _drafts(texts), old, MODEL, 2.0, 2.0)
    draft = _at_cosine(old[7], 0.5, rng)[None, :]
    caches = getattr(backend, "_indexes", None) or backend._caches  # type: ignore[attr-defined]
    index = caches[SCOPE]
    with index.lock:
        index._set_vectors(index.ids.index(filled[7].id), draft)
    receipts = backend.write(SCOPE, _drafts(["fact number 7 about weekly report"]), draft, MODEL, 0.95, 0.8)
    assert receipts[0].status == "created"
    # the same draft at cosine 0.97 with the stored vector is a restatement
    near = _at_cosine(old[8], 0.97, rng)[None, :]
    receipts = backend.write(SCOPE, _drafts(["fact number 8 about weekly report"]), near, MODEL, 0.95, 0.8)
    assert receipts[0].duplicate_of == filled[8].id


def test_every_row_is_in_one_cell_and_cells_stay_small() -> None:
    rng = np.random.default_rng(2)
    rows = _unit(rng.standard_normal((20000, D)) + 3 * rng.standard_normal((1, D)))  # one main direction
    codes = quantize(rows)
    cells = Cells(0)
    for n in (6000, 6001, 9000, 20000):  # a first build, then rows placed as they come
        cells.extend(codes, n)
        placed = np.sort(np.concatenate(cells.members))
        assert np.array_equal(placed, np.arange(n))
        assert max(len(m) for m in cells.members) <= 2 * cell_size(n)
        assert len(cells.centres) == len(cells.members)
        directions = _unit(codes.coarse[:n].astype(np.float32))  # a centre is its rows' mean direction
        sums = np.stack([directions[m].sum(axis=0) for m in cells.members])
        assert np.allclose(cells.sums, sums, atol=1e-3)
    # a row's own cell is nearly always among its vector's nearest cells (a row placed while the cells
    # were made may sit in a cell whose centre is not quite among them)
    probe = cells.probe(quantize(rows[:2000]), 0.95)
    assert np.mean([j in found for j, found in enumerate(probe)]) >= 0.98


def test_the_sign_limit_keeps_pairs_at_the_floor() -> None:
    rng = np.random.default_rng(4)
    for floor in (0.8, 0.95):
        a = _unit(rng.standard_normal((3000, 384)))
        near = _unit(np.asarray([_at_cosine(v, floor, rng) for v in a[:300]]))
        rows, limit = signs(quantize(a).coarse), sign_limit(SIGN_BITS, floor)
        differ = [
            int(differing(rows[:, j : j + 1], signs(quantize(near[j : j + 1]).coarse)[:, 0])[0]) for j in range(300)
        ]
        assert max(differ) <= limit  # pairs at the floor are kept
        noise = differing(rows[:, 1:], rows[:, 0])
        assert (noise <= limit).mean() < 0.01  # unrelated rows are left out
        bits = quantize(a).coarse[:, :SIGN_BITS] > 0
        assert np.array_equal(noise, (bits[1:] != bits[0]).sum(axis=1))


def _placed(cells: Cells) -> list[list[int]]:
    return sorted(sorted(m.tolist()) for m in cells.members)


def test_a_batch_is_placed_where_its_probe_found_it_nearest() -> None:
    # A probe keeps each vector's nearest centre for the rows the batch then stores; the placement is the one
    # a fresh product would give, and a probe made before the centres moved is not used.
    rng = np.random.default_rng(6)
    rows = _unit(rng.standard_normal((9000, D)) + 2 * rng.standard_normal((1, D)))
    codes = quantize(rows)
    probed, plain = Cells(0), Cells(0)
    for cells in (probed, plain):
        cells.extend(codes, 6000)
    batch = codes.take(np.arange(6000, 6256))
    probed.probe(batch, 0.8)
    assert (probed._nearest_known(batch.coarse) >= 0).all()
    for n in (6256, 6512):  # the batch just probed, then rows no probe saw
        probed.extend(codes, n)
        plain.extend(codes, n)
        assert _placed(probed) == _placed(plain)
    stale = codes.take(np.arange(8744, 9000))
    probed.probe(stale, 0.8)  # then the centres move and split before those rows come
    before = len(probed.members)
    for cells in (probed, plain):
        cells.extend(codes, 8744)
    assert len(probed.members) > before
    assert (probed._nearest_known(stale.coarse) < 0).all()
    probed.extend(codes, 9000)
    plain.extend(codes, 9000)
    assert _placed(probed) == _placed(plain)
