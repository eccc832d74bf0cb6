"""The 4-bit first pass of a big scope (``vector_index="int4"``, the default): the exact scan's answers, the
status rule kept, rows written or changed since it was built found, a failed build never failing a search;
and the kept live mask and the release of mapped codes it relies on."""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from autogen_shared_memory import DedupSettings, SharedMemoryStore
from autogen_shared_memory.backends.sqlite import SQLiteBackend
from autogen_shared_memory.core.types import Filters, ScopeRef
from autogen_shared_memory.search import index as index_module
from autogen_shared_memory.search import packed as packed_module
from autogen_shared_memory.search.index import VectorIndex
from autogen_shared_memory.search.int8 import quantize
from autogen_shared_memory.search.packed import Packed

GLOBAL = ScopeRef("global")
FROM = 256  # the first pass's threshold in these tests (PACKED_FROM is 262,144)


class UnitEmbedder:
    """A random unit vector per text, the same for the same text: no structure that would hide a missed row.
    96 dimensions: not a whole number of the pass's 64-wide blocks."""

    model_id = "test-random-unit-96"
    dimension = 96

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            out[i] = np.random.default_rng(seed).standard_normal(self.dimension)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


@pytest.fixture(autouse=True)
def small_scopes_get_the_pass(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(index_module, "PACKED_FROM", FROM)
    yield


def open_store(root: Path, kind: str = "int4") -> SharedMemoryStore:
    backend = SQLiteBackend(root, vector_index=kind)  # type: ignore[arg-type]
    return SharedMemoryStore(backend, embedder=UnitEmbedder(), dedup=DedupSettings(near_duplicate=1.01))


def semantic(store: SharedMemoryStore, query: str, k: int = 10) -> list[tuple[str, float]]:
    vector = UnitEmbedder().embed([query])[0]
    return [(fid, cos) for _, fid, cos in store.backend.semantic([GLOBAL], vector, k, Filters())]


def the_index(store: SharedMemoryStore) -> VectorIndex:
    return store.backend._indexes[GLOBAL]  # type: ignore[attr-defined,no-any-return]


def counting_candidates(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = Packed.candidates

    def counted(self: Packed, q: npt.NDArray[np.float32], live: npt.NDArray[np.bool_], k: int) -> npt.NDArray[np.int64]:
        calls.append(k)
        return original(self, q, live, k)

    monkeypatch.setattr(Packed, "candidates", counted)
    return calls


@pytest.mark.parametrize("sparse", [False, True])
def test_the_pass_answers_as_the_exact_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sparse: bool) -> None:
    """Dense random vectors, and bag-of-words ones (a few large coordinates: the 4-bit error of a row that
    shares the query's words is concentrated where the query is)."""
    from autogen_shared_memory.testing import HashEmbedder

    embedder = HashEmbedder() if sparse else UnitEmbedder()
    dedup = DedupSettings(near_duplicate=1.01)
    store = SharedMemoryStore(SQLiteBackend(tmp_path), embedder=embedder, dedup=dedup)
    words = "amber birch cobalt delta ember fjord garnet harbor indigo jasper kelp lumen mesa nectar onyx".split()
    texts = [f"{words[i % 15]} {words[i // 15 % 15]} {words[i // 225 % 15]} fact {i}" for i in range(1200)]
    store.operator.remember_many(texts, "global")
    exact = SharedMemoryStore(SQLiteBackend(tmp_path, vector_index="exact"), embedder=embedder)
    assert store.backend.build_ann(GLOBAL)  # type: ignore[attr-defined]
    assert the_index(store).packed is not None and the_index(store).packed.n == 1200  # type: ignore[union-attr]
    calls = counting_candidates(monkeypatch)
    same = 0
    for i in range(30):
        query = f"{words[i % 15]} {words[(i * 7) % 15]} query {i}"
        vector = embedder.embed([query])[0]
        approx, truth = (
            [cos for _, _, cos in s.backend.semantic([GLOBAL], vector, 10, Filters())] for s in (store, exact)
        )
        assert all(a <= t + 1e-6 for a, t in zip(approx, truth, strict=True))  # a subset's best: never better
        same += [round(c, 5) for c in approx] == [round(c, 5) for c in truth]
    assert len(calls) == 30  # the pass chose every search's candidates
    assert same >= 29


def test_the_default_index_is_the_pass_and_small_scopes_have_none(tmp_path: Path) -> None:
    store = SharedMemoryStore(tmp_path, embedder=UnitEmbedder())
    assert store.backend.vector_index == "int4"  # type: ignore[attr-defined]
    store.operator.remember_many([f"fact {i}" for i in range(FROM - 1)], "global")
    assert not store.backend.build_ann(GLOBAL)  # type: ignore[attr-defined]
    store.operator.remember("one more fact", "global")
    assert store.backend.build_ann(GLOBAL)  # type: ignore[attr-defined]
    exact = open_store(tmp_path / "exact", "exact")
    exact.operator.remember_many([f"fact {i}" for i in range(FROM + 10)], "global")
    assert not exact.backend.build_ann(GLOBAL)  # type: ignore[attr-defined]
    exact.operator.search("fact 3", "global")
    assert the_index(exact).packed is None and not the_index(exact).packed_building


def test_forgotten_facts_never_come_back_through_the_pass(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    receipts = store.operator.remember_many([f"fact {i}" for i in range(600)], "global")
    assert store.backend.build_ann(GLOBAL)  # type: ignore[attr-defined]
    gone = [receipts[i].id for i in range(0, 600, 7)]
    for fact_id in gone:
        store.operator.forget(fact_id)
    for i in range(0, 600, 7):
        found = semantic(store, f"fact {i}", 50)  # the fact's own text: it would score 1.0
        assert found[0][1] < 0.99 and not {fid for fid, _ in found} & set(gone)
    assert the_index(store).packed is not None  # a status change keeps the pass (the live mask decides)
    assert semantic(store, "fact 1", 1)[0] == (receipts[1].id, pytest.approx(1.0, abs=1e-5))


def test_facts_written_after_the_pass_was_built_are_found(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.operator.remember_many([f"fact {i}" for i in range(600)], "global")
    assert store.backend.build_ann(GLOBAL)  # type: ignore[attr-defined]
    later = store.operator.remember_many([f"later fact {i}" for i in range(40)], "global")
    other = open_store(tmp_path)  # and those of another process, read at its refresh
    more = other.operator.remember_many([f"other fact {i}" for i in range(40)], "global")
    texts = [f"later fact {i}" for i in range(40)] + [f"other fact {i}" for i in range(40)]
    for receipt, text in zip([*later, *more], texts, strict=True):
        best = semantic(store, text, 5)[0]
        assert best == (receipt.id, pytest.approx(1.0, abs=1e-5))
    assert the_index(store).packed is not None and the_index(store).packed.n == 600  # type: ignore[union-attr]


def test_the_pass_is_built_again_once_the_scope_grew_by_a_quarter(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.operator.remember_many([f"fact {i}" for i in range(400)], "global")
    assert store.backend.build_ann(GLOBAL)  # type: ignore[attr-defined]
    store.operator.remember_many([f"more {i}" for i in range(101)], "global")
    semantic(store, "fact 1")  # starts the new build in the background; the old pass answers meanwhile
    deadline = time.monotonic() + 30
    while the_index(store).packed.n != 501 and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.02)
    assert the_index(store).packed.n == 501  # type: ignore[union-attr]


def test_a_vector_changed_in_place_drops_the_pass_and_a_build_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = VectorIndex()
    vectors = UnitEmbedder().embed([f"fact {i}" for i in range(300)])
    index.extend(range(1, 301), [f"id{i}" for i in range(300)], quantize(vectors), [True] * 300, [None] * 300)
    assert index.build_graph("int4", 1, 1, lambda: None)
    assert index.packed is not None
    changed = UnitEmbedder().embed(["a new text"])[0]
    index.apply([(5, "id4", "active", None, changed.tobytes())])  # another process re-embedded fact 5
    assert index.packed is None

    started, release = threading.Event(), threading.Event()
    original = Packed.__init__

    def slow(self: Packed, codes: object, n: int) -> None:
        started.set()
        release.wait(10)
        original(self, codes, n)  # type: ignore[arg-type]

    monkeypatch.setattr(Packed, "__init__", slow)
    assert index.first_pass() is None  # starts a build
    assert started.wait(10)
    index.apply([(7, "id6", "active", None, changed.tobytes())])  # changes a row the build has read
    release.set()
    deadline = time.monotonic() + 30
    while index.packed_building and time.monotonic() < deadline:
        time.sleep(0.02)
    assert index.packed is None  # the build of the old vectors was dropped
    assert index.build_graph("int4", 1, 1, lambda: None) and index.packed is not None


def test_a_failed_build_leaves_searches_exact_and_is_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(tmp_path)
    store.operator.remember_many([f"fact {i}" for i in range(600)], "global")
    exact = open_store(tmp_path, "exact")
    tries: list[int] = []

    def broken(self: Packed, codes: object, n: int) -> None:
        tries.append(n)
        raise RuntimeError("no MatMulNBits in this onnxruntime")

    monkeypatch.setattr(Packed, "__init__", broken)
    with caplog.at_level(logging.WARNING, logger=index_module.__name__):
        assert semantic(store, "query 1") == semantic(exact, "query 1")
        deadline = time.monotonic() + 30
        while not the_index(store).packed_failed and time.monotonic() < deadline:
            time.sleep(0.02)
        for i in range(5):
            assert semantic(store, f"query {i}") == semantic(exact, f"query {i}")
    assert tries == [600] and the_index(store).packed is None
    assert "could not be built" in caplog.text


def test_the_pass_reserves_its_file_so_a_full_disk_is_an_error_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    # A page written through a mapping of a sparse file on a full file system kills the process (SIGBUS): the
    # whole file's storage is asked for before any row is written, and no space is an OSError (a failed
    # build, which leaves searches exact: see the test above).
    if not hasattr(os, "posix_fallocate"):
        pytest.skip("no posix_fallocate here")
    asked: list[tuple[int, int]] = []

    def full(fd: int, offset: int, length: int) -> None:
        asked.append((offset, length))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    vectors = UnitEmbedder().embed([f"text {i}" for i in range(300)])
    with pytest.raises(OSError) as raised:
        Packed(quantize(vectors), 300)
    assert raised.value.errno == errno.ENOSPC
    blocks = -(-vectors.shape[1] // packed_module.BLOCK)
    assert asked == [(0, 300 * blocks * (packed_module.BLOCK // 2 + 4))]  # the 4-bit codes and their scales


def the_file_blocks(packed: Packed) -> int:
    return os.fstat(packed._file.fileno()).st_blocks  # type: ignore[attr-defined]


@pytest.mark.parametrize("copies", [True, False])
def test_a_built_pass_gives_its_file_storage_back_only_when_the_session_keeps_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copies: bool
) -> None:
    # The file is in the temporary folder, which may be memory (tmpfs): once the session holds its packed
    # copy, the file's storage is freed. Where the session would read the file again, it keeps its storage.
    if not hasattr(packed_module.mmap, "MADV_REMOVE"):
        pytest.skip("no hole punching here")
    monkeypatch.setattr(packed_module.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(packed_module, "_keeps_copies", lambda: copies)
    vectors = UnitEmbedder().embed([f"text {i}" for i in range(3000)])
    codes = quantize(vectors)
    kept = Packed(codes, 3000, release=False)
    released = Packed(codes, 3000)
    assert the_file_blocks(kept) > 0
    if copies:
        assert the_file_blocks(released) == 0
    else:
        assert the_file_blocks(released) == the_file_blocks(kept)
    for q in vectors[:20]:
        assert np.array_equal(released.products(q), kept.products(q))


def test_a_storage_check_that_fails_leaves_the_pass_built_and_its_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check runs before the pass's own file takes the temporary folder's space; when even its small file
    # finds no room, the pass is built all the same, its file keeps its storage, and the next build asks again.
    if not hasattr(os, "posix_fallocate"):
        pytest.skip("no posix_fallocate here")
    monkeypatch.setattr(packed_module.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(packed_module, "_copies", [])
    reserve = os.posix_fallocate

    def small_files_find_no_room(fd: int, offset: int, length: int) -> None:
        if length < 10_000:  # the check's 64 rows, not the pass's 3,000
            raise OSError(errno.ENOSPC, "No space left on device")
        reserve(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", small_files_find_no_room)
    vectors = UnitEmbedder().embed([f"text {i}" for i in range(3000)])
    built = Packed(quantize(vectors), 3000)
    assert the_file_blocks(built) > 0 and packed_module._copies == []
    assert np.array_equal(
        built.products(vectors[0]), Packed(quantize(vectors), 3000, release=False).products(vectors[0])
    )
    monkeypatch.setattr(os, "posix_fallocate", reserve)
    assert the_file_blocks(Packed(quantize(vectors), 3000)) == 0 and packed_module._copies == [True]


def test_the_sessions_copy_is_checked_not_assumed(monkeypatch: pytest.MonkeyPatch) -> None:
    # This ONNX Runtime packs the codes into its own layout: zeroing the file changes no answer.
    monkeypatch.setattr(packed_module, "_copies", [])
    assert packed_module._keeps_copies() is True
    # A runtime that scans the supplied file: zeroing it changes the answers, so its files keep their storage.
    monkeypatch.setattr(packed_module, "_copies", [])

    def from_the_file(self: Packed, q: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        return np.full(self.n, float(np.frombuffer(self._map, dtype=np.uint8).sum()), dtype=np.float32)

    monkeypatch.setattr(Packed, "products", from_the_file)
    assert packed_module._keeps_copies() is False


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 2000),
    dim=st.sampled_from([8, 64, 96, 384]),
    k=st.integers(1, 60),
    dead=st.floats(0, 1),
    seed=st.integers(0, 2**32 - 1),
)
@example(n=5, dim=64, k=10, dead=1.0, seed=0)  # nothing live
@example(n=300, dim=96, k=50, dead=0.95, seed=1)  # most of the best rows dead: the full pass decides
def test_candidates_are_live_and_hold_the_best_estimates(n: int, dim: int, k: int, dead: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors[rng.random(n) < 0.05] = 0.0  # zero vectors: all-zero codes
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
    packed = Packed(quantize(vectors), n)
    live = rng.random(n) >= dead
    q = rng.standard_normal(dim).astype(np.float32)
    estimate = packed.products(q)
    assert estimate.shape == (n,)
    assert np.all(np.abs(estimate - vectors @ q) <= error_bound(vectors, q))
    rows = packed.candidates(q, live, k)
    assert rows.dtype == np.int64 and np.all(np.diff(rows) > 0)
    assert live[rows].all()
    want = min(k, int(live.sum()))
    assert len(rows) >= want
    best_live = np.flatnonzero(live)[np.argsort(-estimate[live], kind="stable")[:want]]
    kth = estimate[best_live[-1]] if want else np.inf
    assert set(np.flatnonzero(live & (estimate > kth)).tolist()) <= set(rows.tolist())
    assert len(rows) <= max(packed_module.MAX_CANDIDATES, want)


def error_bound(vectors: npt.NDArray[np.float32], q: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """What the pass's estimate of ``vectors @ q`` may be off by: per block of 64 coordinates, a row's codes
    are within half a step (its block's peak / 14) plus the int8 codes' half step (the row's peak / 254) of
    it, and the kernel's int8 copy of the query within its block's peak / 254 of it."""
    n, dim = vectors.shape
    width = -(-dim // 64) * 64
    x = np.zeros((n, width)), np.zeros(width)
    rows, query = x[0], x[1]
    rows[:, :dim], query[:dim] = np.abs(vectors), np.abs(q)
    rows, query = rows.reshape(n, -1, 64), query.reshape(-1, 64)
    step = rows.max(axis=2) / 14 + rows.max(axis=(1, 2))[:, None] / 254
    bound = (step * query.sum(axis=1)).sum(axis=1) + (rows.sum(axis=2) * query.max(axis=1) / 254).sum(axis=1)
    return 1.01 * bound + 1e-5 * (1 + np.linalg.norm(q))


def test_candidates_recall_the_exact_top_ten(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((20000, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    packed = Packed(quantize(vectors), len(vectors))
    live = np.ones(len(vectors), dtype=bool)
    recall = []
    for _ in range(40):
        q = rng.standard_normal(384).astype(np.float32)
        q /= np.linalg.norm(q)
        truth = set(np.argsort(-(vectors @ q))[:10].tolist())
        recall.append(len(truth & set(packed.candidates(q, live, 10).tolist())) / 10)
    assert np.mean(recall) >= 0.99


def test_the_live_mask_is_kept_until_a_status_expiry_or_row_changes_it() -> None:
    index = VectorIndex()
    now = 1_000_000.0
    vectors = UnitEmbedder().embed(["a", "b", "c", "d"])
    index.extend(
        [1, 2, 3, 4],
        ["a", "b", "c", "d"],
        quantize(vectors),
        [True, True, True, False],
        [None, now + 10, now + 20, None],
    )
    assert index.live_mask(now, False).tolist() == [True, True, True, False]
    mask = index.live_mask(now + 1, False)
    mask[:] = False  # the caller's copy
    assert index.live_mask(now + 2, False).tolist() == [True, True, True, False]
    assert index.live_mask(now + 15, False).tolist() == [True, False, True, False]  # b expired
    assert index.live_mask(now + 5, False).tolist() == [True, True, True, False]  # the clock went back
    index.set_status(0, "forgotten", None)
    assert index.live_mask(now + 5, False).tolist() == [False, True, True, False]
    index.apply([(4, "d", "active", None, None)])
    assert index.live_mask(now + 5, False).tolist() == [False, True, True, True]
    index.extend([5], ["e"], quantize(vectors[:1]), [True], [None])
    assert index.live_mask(now + 25, False).tolist() == [False, False, False, True, True]
    assert index.live_mask(now + 25, True).tolist() == [True] * 5


_EXPIRY = st.one_of(st.none(), st.integers(0, 40).map(float))
_STEP = st.one_of(
    st.tuples(st.just("add"), st.lists(st.tuples(st.booleans(), _EXPIRY), min_size=1, max_size=4)),
    st.tuples(st.just("status"), st.integers(0, 10**6), st.sampled_from(["active", "forgotten"]), _EXPIRY),
    st.tuples(st.just("mask"), st.integers(0, 40)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_STEP, max_size=40))
@example([("add", [(True, None)]), ("mask", 5), ("add", [(True, 10.0)]), ("mask", 20)])  # added row expired
@example([("add", [(True, None)]), ("mask", 5), ("add", [(True, 10.0)]), ("mask", 20), ("mask", 7)])  # back
@example([("add", [(True, None), (True, 30.0)]), ("mask", 5), ("status", 0, "active", 10.0), ("mask", 20)])
def test_the_kept_live_mask_is_always_the_fresh_one(steps: list[tuple]) -> None:
    # Rows added, statuses and expiries changed, masks asked at times that go forward and back: every mask
    # equals the one computed from scratch (active and expiring after ``now``).
    index = VectorIndex()
    vector = UnitEmbedder().embed(["x"])
    for step in steps:
        if step[0] == "add":
            for active, expires in step[1]:
                index.extend([index.n + 1], [f"f{index.n}"], quantize(vector), [active], [expires])
        elif step[0] == "status" and index.n:
            index.set_status(step[1] % index.n, step[2], step[3])
        elif step[0] == "mask":
            now = float(step[1]) + 0.5
            fresh = index.active[: index.n] & (index.expires[: index.n] > now)
            assert index.live_mask(now, False).tolist() == fresh.tolist()


def test_releasing_mapped_codes_keeps_every_row(tmp_path: Path) -> None:
    from autogen_shared_memory.testing import HashEmbedder

    backend = SQLiteBackend(tmp_path, save_index_from=100)
    store = SharedMemoryStore(backend, embedder=HashEmbedder())
    store.operator.remember_many([f"note {i} amber falcon {i % 13}" for i in range(3000)], "global")
    store.operator.search("amber", "global")
    store.close()  # waits for the save
    mapped = SharedMemoryStore(SQLiteBackend(tmp_path, save_index_from=None), embedder=HashEmbedder())
    mapped.operator.search("amber", "global")
    index = the_index(mapped)
    assert index.codes.file is not None and index.codes.file.map is not None
    mapped.operator.remember_many(
        [f"later note {i} copper {i}" for i in range(50)], "global"
    )  # into the mapping's room
    assert index.codes.file is not None and index.n == 3050
    before = np.array(index.codes.coarse[: index.n])
    index.codes.file.release("coarse")
    assert np.array_equal(index.codes.coarse[: index.n], before)
    assert not index.codes.file.scanned
    mapped.close()


def test_searches_during_writes_and_rebuilds_find_every_live_fact_and_no_forgotten_one(tmp_path: Path) -> None:
    """A writer adds facts (the pass is built again and again as the scope grows) and forgets some while two
    threads search for facts known to be written: each is found first at cosine 1, no forgotten one comes back."""
    store = open_store(tmp_path)
    store.operator.remember_many([f"fact {i}" for i in range(300)], "global")
    written: list[tuple[str, str]] = []
    gone: set[str] = set()
    lock = threading.Lock()
    errors: list[object] = []
    stop = time.monotonic() + 4

    def writer() -> None:
        k = 0
        while time.monotonic() < stop:
            texts = [f"batch {k} fact {i}" for i in range(40)]
            receipts = store.operator.remember_many(texts, "global")
            if k % 3 == 0:
                store.operator.forget(receipts[0].id)
            with lock:
                if k % 3 == 0:
                    gone.add(receipts[0].id)
                written.extend((r.id, t) for r, t in zip(receipts, texts, strict=True) if r.id not in gone)
            k += 1

    def searcher(seed: int) -> None:
        rng = np.random.default_rng(seed)
        while time.monotonic() < stop:
            with lock:
                if not written:
                    continue
                fact_id, text = written[int(rng.integers(len(written)))]
                dead = set(gone)
            hits = semantic(store, text, 10)
            if not hits or hits[0][0] != fact_id or abs(hits[0][1] - 1) > 1e-4:
                errors.append(("missing", fact_id, hits[:2]))
            if {fid for fid, _ in hits} & dead:
                errors.append(("forgotten", hits))

    threads = [threading.Thread(target=writer), *(threading.Thread(target=searcher, args=(s,)) for s in (1, 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert the_index(store).packed is not None and the_index(store).packed.n > 300  # type: ignore[union-attr]
