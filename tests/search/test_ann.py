"""The optional HNSW vector index (``vector_index="hnsw"``): same answers as the exact scan on small scopes,
kept current by writes of this and other processes, never returning inactive facts."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.sqlite import SQLiteBackend
from autogen_shared_memory.core.types import Filters, ScopeRef
from autogen_shared_memory.settings import DedupSettings
from autogen_shared_memory.testing import HashEmbedder

pytest.importorskip("hnswlib")

WORDS = "amber birch cobalt delta ember fjord garnet harbor indigo jasper kelp lumen mesa nectar onyx prism".split()


def fact(i: int) -> str:
    return f"{WORDS[i % 16]} {WORDS[(i // 16) % 16]} {WORDS[(i // 256) % 16]} note {i}"


def open_store(root: Path, min_facts: int = 100) -> SharedMemoryStore:
    backend = SQLiteBackend(root, vector_index="hnsw", ann_min_facts=min_facts)
    return SharedMemoryStore(backend, embedder=HashEmbedder(), dedup=DedupSettings(near_duplicate=1.01))


def semantic(store: SharedMemoryStore, query: str, k: int = 10) -> list[tuple[str, float]]:
    vector = store.embedder.embed([query])[0]
    return [
        (fid, cos) for _, fid, cos in store.backend.semantic([store.engine.scope_ref("global")], vector, k, Filters())
    ]


def semantic_ids(store: SharedMemoryStore, query: str, k: int = 10) -> list[str]:
    return [fid for fid, _ in semantic(store, query, k)]


def test_hnsw_agrees_with_the_exact_scan(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.operator.remember_many([fact(i) for i in range(600)], "global")
    exact = SharedMemoryStore(tmp_path, embedder=HashEmbedder())  # a second backend on the same files
    assert store.backend.build_ann(store.engine.scope_ref("global"))  # type: ignore[attr-defined]
    same = 0
    for i in range(0, 600, 20):
        query = f"{WORDS[i % 16]} {WORDS[(i // 16) % 16]} note"
        approx, truth = semantic(store, query), semantic(exact, query)
        assert approx[0][1] == pytest.approx(truth[0][1], abs=1e-5)  # ties may swap ids, not scores
        same += [round(c, 5) for _, c in approx] == [round(c, 5) for _, c in truth]
    assert same >= 28  # of 30 queries, the whole top 10 as good as the exact scan's


def test_hnsw_skips_forgotten_facts_and_sees_new_ones_from_other_writers(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    receipts = store.operator.remember_many([fact(i) for i in range(300)], "global")
    assert store.backend.build_ann(store.engine.scope_ref("global"))  # type: ignore[attr-defined]
    top = store.operator.search(fact(7), "global", top_k=1)[0]
    assert top.id == receipts[7].id
    store.operator.forget(top.id, reason="wrong")
    assert top.id not in [h.id for h in store.operator.search(fact(7), "global", top_k=20)]
    other = SharedMemoryStore(tmp_path, embedder=HashEmbedder())  # another process, in effect
    new = other.operator.remember("zephyr quartz lagoon", "global")
    assert store.operator.search("zephyr quartz lagoon", "global", top_k=1)[0].id == new.id
    assert new.id in semantic_ids(store, "zephyr quartz lagoon", 3)  # through the graph, not only lexically


def test_first_search_builds_the_graph_in_the_background(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    receipts = store.operator.remember_many([fact(i) for i in range(300)], "global")
    index = store.backend._index(store.engine.scope_ref("global"))  # type: ignore[attr-defined]
    assert index.ann is None
    assert store.operator.search(fact(3), "global", top_k=1)[0].id == receipts[3].id  # answered by the exact scan
    deadline = time.monotonic() + 30
    while index.ann is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert index.ann is not None and not index.ann_building
    assert store.operator.search(fact(5), "global", top_k=1)[0].id == receipts[5].id


def test_purge_rebuilds_the_graph_without_stale_rows(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    receipts = store.operator.remember_many([fact(i) for i in range(300)], "global")
    ref = store.engine.scope_ref("global")
    assert store.backend.build_ann(ref)  # type: ignore[attr-defined]
    for r in receipts[:150]:
        store.operator.forget(r.id)
    store.operator.purge(older_than=0)
    assert store.backend.build_ann(ref)  # type: ignore[attr-defined]
    live = {r.id for r in receipts[150:]}
    assert set(semantic_ids(store, fact(200), 20)) <= live


def test_small_scopes_and_exact_stores_have_no_graph(tmp_path: Path) -> None:
    store = open_store(tmp_path, min_facts=1000)
    store.operator.remember_many([fact(i) for i in range(50)], "global")
    assert not store.backend.build_ann(store.engine.scope_ref("global"))  # type: ignore[attr-defined]
    exact = SharedMemoryStore(tmp_path / "exact", embedder=HashEmbedder())
    exact.operator.remember("one fact", "global")
    assert not exact.backend.build_ann(exact.engine.scope_ref("global"))  # type: ignore[attr-defined]


def test_vector_index_is_validated_and_part_of_the_config(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="vector_index"):
        SQLiteBackend(tmp_path, vector_index="faiss")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vector_index"):
        SharedMemoryStore(tmp_path, embedder=HashEmbedder(), backend_options={"vector_index": "HNSW"})  # type: ignore[arg-type]
    for bad in ({"ann_ef": 0}, {"ann_min_facts": -5}, {"max_lexical_postings": 2.5}, {"ann_ef": True}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SQLiteBackend(tmp_path, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_common_term_ratio"):
        SQLiteBackend(tmp_path, max_common_term_ratio=0)
    assert not any(tmp_path.iterdir())  # nothing was created
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder(), backend_options={"vector_index": "hnsw"})
    loaded = SharedMemoryStore.load_component(store.dump_component())
    assert loaded.backend.vector_index == "hnsw"  # type: ignore[attr-defined]


def test_near_duplicates_are_found_through_the_graph(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path, vector_index="hnsw", ann_min_facts=100)
    store = SharedMemoryStore(backend, embedder=HashEmbedder(), dedup=DedupSettings(near_duplicate=0.95))
    receipts = store.operator.remember_many([fact(i) for i in range(400)], "global")
    assert backend.build_ann(store.engine.scope_ref("global"))
    again = store.operator.remember_many([fact(123).upper() + "!", fact(321) + "."], "global")
    assert [(r.status, r.duplicate_of) for r in again] == [
        ("reinforced", receipts[123].id),
        ("reinforced", receipts[321].id),
    ]
    assert store.operator.remember("a brand new fact about quartz", "global").status == "created"


def test_each_scope_graph_is_asked_and_rows_added_after_the_view_are_left_out(tmp_path: Path) -> None:
    """Graphs are asked after the scopes' locks are released (side by side): a row the graph gained since
    the view was taken is not in that view's rows, and must not come back as a candidate."""
    from autogen_shared_memory.search.index import rank_across

    store = open_store(tmp_path)
    store.operator.add_member("g", "a")
    store.operator.remember_many([f"{fact(i)} global" for i in range(300)], "global")
    store.as_agent("a", "g").remember_many([f"{fact(i)} group" for i in range(300)], "group")
    backend = store.backend
    assert isinstance(backend, SQLiteBackend)
    refs = [store.engine.scope_ref("global"), store.engine.scope_ref("group", group_id="g")]
    for ref in refs:
        assert backend.build_ann(ref)
    q = store.embedder.embed([f"{fact(42)} group"])[0]
    views = [backend._semantic_view(ref, q, 10, Filters(), time.time()) for ref in refs]
    assert all(v is not None and v.graph is not None for v in views)
    late = store.as_agent("a", "g").remember(f"{fact(42)} group late", "group")  # among the nearest
    assert late.status == "created"
    backend._refresh(backend._conn(refs[1], create=False), backend._index(refs[1]))
    backend._index(refs[1]).graph("hnsw", 100, 128)  # the graph now holds the late row
    ranked = rank_across(
        [v for v in views if v], q, 10, lambda asked: [backend._exact(v.source, seqs, q) for v, seqs in asked]
    )
    assert late.id not in [fid for _, fid, _ in ranked]
    assert {ref for ref, _, _ in ranked} == set(refs)  # both graphs answered
    assert late.id in semantic_ids_of(store, refs, q)  # a new view sees it


def semantic_ids_of(store: SharedMemoryStore, refs: list[ScopeRef], q: npt.NDArray[np.float32]) -> list[str]:
    return [fid for _, fid, _ in store.backend.semantic(refs, q, 10, Filters())]
