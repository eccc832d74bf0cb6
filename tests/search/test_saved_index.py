"""A scope's search index saved beside its file: a new process maps it and answers exactly as one that read
the file; what changed since the save is read from the file; a file that is not this scope file's, of another
epoch, damaged or cut short is ignored; a read-only store never writes one."""

from __future__ import annotations

import os
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from autogen_shared_memory import DedupSettings, SharedMemoryStore
from autogen_shared_memory.backends.base import ModelInfo
from autogen_shared_memory.backends.sqlite import SQLiteBackend
from autogen_shared_memory.core.lifecycle import content_hash
from autogen_shared_memory.core.types import Draft, ScopeRef, new_fact_id
from autogen_shared_memory.search import index as index_module
from autogen_shared_memory.search.index import Coverage, Ids
from autogen_shared_memory.testing import HashEmbedder

GROUP = "g"
SCOPE = ScopeRef("group", GROUP)
QUERIES = ["amber falcon", "quiet river seven", "falcon report", "blue seven bridge", "nothing matches zzz"]
WORDS = ["amber", "falcon", "quiet", "river", "seven", "blue", "bridge", "report", "north", "copper", "lamp"]


def _texts(n: int, start: int = 0) -> list[str]:
    rng = np.random.default_rng(start)
    return [f"note {start + i}: " + " ".join(rng.choice(WORDS, 4)) for i in range(n)]


def _store(root: Path, save_from: int | None = 100, **options: object) -> SharedMemoryStore:
    backend = SQLiteBackend(root, save_index_from=save_from, **options)  # type: ignore[arg-type]
    return SharedMemoryStore(backend, embedder=HashEmbedder())


def _answers(store: SharedMemoryStore) -> list[list[tuple[str, float]]]:
    op = store.as_operator(GROUP)
    return [[(h.id, round(h.score, 9)) for h in op.search(q, "group", top_k=8)] for q in QUERIES]


def _index(store: SharedMemoryStore) -> index_module.VectorIndex:
    return store.backend._indexes[SCOPE]  # type: ignore[attr-defined,no-any-return]


def _saved_file(root: Path) -> Path:
    return root / "group_g.db.index"


def _filled(root: Path, n: int = 400) -> None:
    store = _store(root)
    store.as_operator(GROUP).remember_many(_texts(n), "group")
    _answers(store)  # searching indexes the texts too; the save waits for both legs
    store.close()  # waits for the save under way


def test_a_new_store_maps_the_saved_index_and_answers_as_one_that_read_the_file(tmp_path: Path) -> None:
    _filled(tmp_path)
    assert _saved_file(tmp_path).stat().st_size > 0
    mapped = _store(tmp_path, None)
    got = _answers(mapped)
    index = _index(mapped)
    assert index.saved.rows == 400 and index.saved.postings == 400  # it mapped the file, texts indexed too
    mapped.close()
    _saved_file(tmp_path).unlink()
    read = _store(tmp_path, None)
    assert _answers(read) == got
    assert _index(read).saved == Coverage()
    read.close()


def test_what_changed_since_the_save_is_read_from_the_file(tmp_path: Path) -> None:
    _filled(tmp_path)
    other = _store(tmp_path, None)  # another process: forgets one fact, adds others, never saves
    op = other.as_operator(GROUP)
    gone = op.search("amber falcon", "group", top_k=1)[0].id
    op.forget(gone)
    added = op.remember("copper lamp zebra unique words here", "group").id
    other.close()
    mapped = _store(tmp_path, None)
    hits = [h.id for h in mapped.as_operator(GROUP).search("amber falcon copper lamp zebra", "group", top_k=50)]
    assert _index(mapped).saved.rows == 400
    assert added in hits and gone not in hits
    mapped.close()


def test_a_saved_index_of_another_scope_file_is_ignored(tmp_path: Path) -> None:
    _filled(tmp_path / "a")
    b = _store(tmp_path / "b", None)
    b.as_operator(GROUP).remember_many(_texts(450, start=10_000), "group")  # same scope, other facts, rev ahead
    b.close()
    (tmp_path / "b" / "group_g.db.index").write_bytes(_saved_file(tmp_path / "a").read_bytes())
    b = _store(tmp_path / "b", None)
    got = _answers(b)
    assert _index(b).saved == Coverage()  # the fact at its last seq is not the file's
    b.close()
    (tmp_path / "b" / "group_g.db.index").unlink()
    b = _store(tmp_path / "b", None)
    assert _answers(b) == got
    b.close()


def test_a_saved_index_of_an_earlier_epoch_is_ignored(tmp_path: Path) -> None:
    _filled(tmp_path)
    store = _store(tmp_path, None)
    op = store.as_operator(GROUP)
    for hit in op.search("amber", "group", top_k=20):
        op.forget(hit.id)
    time.sleep(0.01)
    assert store.operator.purge(timedelta(milliseconds=1)) > 0  # deletes rows: the scope's epoch moves on
    store.close()
    store = _store(tmp_path, None)
    got = _answers(store)
    assert _index(store).saved == Coverage()
    store.close()
    _saved_file(tmp_path).unlink()
    store = _store(tmp_path, None)
    assert _answers(store) == got
    store.close()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[tuple[str, float]]]]:
    """A store with a saved index, and what it answers without one."""
    root = tmp_path_factory.mktemp("pristine")
    _filled(root, 150)
    saved_bytes = _saved_file(root).read_bytes()
    _saved_file(root).unlink()
    store = _store(root, None)
    want = _answers(store)
    store.close()
    _saved_file(root).write_bytes(saved_bytes)
    return root, want


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(cut=10**7, flips=[])  # its last byte: the last array's padding, data all there, length wrong
@example(cut=10**7, flips=[(0, 1), (0, 1)])  # two flips of one bit: the header as it was, the file cut short
@given(cut=st.integers(0, 10**7), flips=st.lists(st.tuples(st.integers(0, 600), st.integers(1, 255)), max_size=4))
def test_a_file_with_a_damaged_header_or_cut_short_is_ignored(
    pristine: tuple[Path, list[list[tuple[str, float]]]],
    tmp_path_factory: pytest.TempPathFactory,
    cut: int,
    flips: list[tuple[int, int]],
) -> None:
    source, want = pristine
    root = tmp_path_factory.mktemp("damaged")
    for name in ("group_g.db", "ids.db"):
        (root / name).write_bytes((source / name).read_bytes())
    pristine_bytes = _saved_file(source).read_bytes()
    data = bytearray(pristine_bytes)
    for at, bits in flips:  # the fixed head and the header (counts, offsets, revision)
        data[at] ^= bits
    if data == pristine_bytes and cut >= len(data):  # no flip (or flips that undo each other): cut it short
        cut = len(data) - 1
    _saved_file(root).write_bytes(bytes(data[:cut]))
    store = _store(root, None)
    assert _answers(store) == want  # never raises, never answers from a damaged file
    assert _index(store).saved == Coverage()
    store.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(rows=[0, 149, 150, 3], changed=None, scanned=False)  # mapped rows and appended ones in one gather
@example(rows=[5, 5, 7], changed=5, scanned=False)  # a mapped row changed here: read from memory from then on
@given(rows=st.lists(st.integers(0, 179), max_size=40), changed=st.none() | st.integers(0, 179), scanned=st.booleans())
def test_gathers_from_a_mapped_index_read_its_rows_as_they_are(
    pristine: tuple[Path, list[list[tuple[str, float]]]],
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[int],
    changed: int | None,
    scanned: bool,
) -> None:
    # Scattered rows of a mapped index are read from its file, not through the mapping: they must be the rows
    # the index holds, appended and changed ones included.
    source, _ = pristine
    root = tmp_path_factory.mktemp("gather")
    for name in ("group_g.db", "ids.db", "group_g.db.index"):
        (root / name).write_bytes((source / name).read_bytes())
    store = _store(root, None)
    store.as_operator(GROUP).remember_many(_texts(30, start=500), "group")  # rows 150..179, in memory
    index = _index(store)
    assert index.codes.file is not None and index.codes.file.rows == 150
    index.codes.file.scanned = scanned  # a search scanned the coarse codes: they are read through the mapping
    if changed is not None:
        index._set_vectors(changed, _unit(np.random.default_rng(changed).standard_normal((1, index.dim))))
    codes, picked = index.codes.rows(index.n), np.asarray(rows, dtype=np.int64)
    for name in ("coarse", "fine"):
        assert np.array_equal(codes.gather(name, picked), getattr(codes, name)[picked])
    q = _unit(np.random.default_rng(1).standard_normal(index.dim))
    assert np.array_equal(codes.cosines(picked, q)[0], codes.take(picked).cosines(np.arange(len(rows)), q)[0])
    store.close()


def test_a_mapped_files_descriptor_is_closed_with_the_last_index_holding_it(
    pristine: tuple[Path, list[list[tuple[str, float]]]],
) -> None:
    from autogen_shared_memory.search import saved

    mapped = saved.read(_saved_file(pristine[0]))
    assert mapped is not None
    fd = mapped.file.fd
    os.fstat(fd)
    del mapped
    import gc

    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_read_only_store_maps_the_file_and_never_writes_one(tmp_path: Path) -> None:
    store = _store(tmp_path, None)
    store.as_operator(GROUP).remember_many(_texts(300), "group")
    store.close()
    viewer = _store(tmp_path, 10, read_only=True)
    _answers(viewer)
    viewer.close()
    assert not _saved_file(tmp_path).exists()
    _filled(tmp_path / "w", 300)
    viewer = _store(tmp_path / "w", 10, read_only=True)
    _answers(viewer)
    assert _index(viewer).saved.rows == 300
    viewer.close()


def test_a_killed_save_leaves_nothing_the_next_save_keeps(tmp_path: Path) -> None:
    store = _store(tmp_path, None)
    store.as_operator(GROUP).remember_many(_texts(200), "group")
    store.close()
    dead = 2**22 + 12345  # no such process
    left = tmp_path / f".group_g.db.index.{dead}.0123456789abcdef.tmp"
    left.write_bytes(b"half a file")
    Path(f"{left}-lock").write_bytes(b"")
    os.utime(f"{left}-lock", (time.time() - 3600, time.time() - 3600))
    _filled(tmp_path, 0)
    assert not left.exists() and not Path(f"{left}-lock").exists()
    assert _saved_file(tmp_path).exists()


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


def _drafts(texts: list[str]) -> list[Draft]:
    now = time.time()
    return [Draft(new_fact_id("group"), t, "system", now, content_hash=content_hash(t)) for t in texts]


def test_writes_into_a_mapped_index_decide_as_without_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Cells propose the near-duplicate candidates of a big scope (here: every scope); mapped from the file,
    # they make the same merges as cells built from the rows.
    monkeypatch.setattr(index_module, "CELLS_FROM", 1)
    rng = np.random.default_rng(4)
    model, d = ModelInfo("test-saved", 64), 64
    stored = _unit(rng.standard_normal((1200, d)))
    texts = [f"service {i} runs in region {i % 7}" for i in range(1200)]
    picks = rng.choice(1200, 60, replace=False)
    batch = _unit(stored[picks] + 0.02 * rng.standard_normal((60, d)))  # restatements, cosine ~0.98
    batch_texts = [texts[i] for i in picks]

    def decisions(root: Path, save: bool) -> list[tuple[str, int | None]]:
        backend = SQLiteBackend(root, save_index_from=100)
        filled = backend.write(SCOPE, _drafts(texts), stored, model, 2.0, 2.0)
        backend.write(SCOPE, _drafts(["warm up"]), _unit(rng.standard_normal((1, d))), model, 0.95, 0.8)
        backend.close()  # saved, with the cells the write built
        if not save:
            (root / "group_g.db.index").unlink()
        backend = SQLiteBackend(root, save_index_from=None)
        position = {r.id: i for i, r in enumerate(filled)}
        receipts = backend.write(SCOPE, _drafts(batch_texts), batch, model, 0.95, 0.8)
        if save:
            assert backend._indexes[SCOPE].saved.cells >= 1200
        backend.close()
        return [(r.status, position.get(r.duplicate_of or "")) for r in receipts]

    mapped, read = decisions(tmp_path / "m", True), decisions(tmp_path / "r", False)
    assert [s for s, _ in mapped].count("reinforced") == 60
    assert mapped == read


_ID = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


@given(st.lists(_ID, max_size=30), st.lists(_ID, max_size=10))
def test_packed_ids_read_back_as_written(base: list[str], more: list[str]) -> None:
    blob, ends = _pack(base)
    ids = Ids(blob, ends)
    ids.extend(more)
    everything = base + more
    assert len(ids) == len(everything) and list(ids) == everything
    assert [ids[i] for i in range(-len(everything), len(everything))] == everything * 2
    assert ids[1:3] == everything[1:3]
    blob2, ends2 = ids.packed(len(everything))
    assert list(Ids(blob2, ends2)) == everything
    frozen = ids.snapshot(len(base))
    ids.extend(["later"])
    assert list(frozen) == base


def _pack(ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    some = Ids()
    some.extend(ids)
    return some.packed(len(ids))


# ------------------------------------------------------------------ PostgreSQL with an index_dir
def _pg_store(dsn: str, schema: str, folder: Path, save_from: int | None = 100, **options: Any) -> SharedMemoryStore:
    from autogen_shared_memory.backends.postgres import PostgresBackend

    backend = PostgresBackend(dsn, schema=schema, index_dir=folder, save_index_from=save_from, max_size=2)
    return SharedMemoryStore(backend, embedder=HashEmbedder(), **options)


def _pg_index(store: SharedMemoryStore) -> index_module.VectorIndex:
    return store.backend._caches[SCOPE]  # type: ignore[attr-defined,no-any-return]


def test_postgres_saves_the_index_in_its_folder_and_a_new_process_maps_it(pg_dsn: str, tmp_path: Path) -> None:
    schema = f"saved_{uuid.uuid4().hex[:12]}"
    store = _pg_store(pg_dsn, schema, tmp_path / "idx")
    store.as_operator(GROUP).remember_many(_texts(400), "group")
    _answers(store)
    store.close()
    assert len(list((tmp_path / "idx").glob("*.index"))) == 1
    other = _pg_store(pg_dsn, schema, tmp_path / "elsewhere", None)  # another machine: no saved index
    op = other.as_operator(GROUP)
    gone = op.search("amber falcon", "group", top_k=1)[0].id
    op.forget(gone)
    added = op.remember("copper lamp zebra unique words here", "group").id
    again = op.remember(_texts(1)[0], "group")  # the same text: found through the content-hash keys
    assert again.status == "reinforced"
    read = _answers(other)
    other.close()
    mapped = _pg_store(pg_dsn, schema, tmp_path / "idx", None)
    assert _answers(mapped) == read
    index = _pg_index(mapped)
    assert index.saved.rows == 400
    hits = [h.id for h in mapped.as_operator(GROUP).search("amber falcon copper lamp zebra", "group", top_k=50)]
    assert added in hits and gone not in hits
    mapped.close()
    # exact duplicates are found through the mapped content-hash keys (near duplicates switched off)
    mapped = _pg_store(pg_dsn, schema, tmp_path / "idx", None, dedup=DedupSettings(near_duplicate=2.0, similar=2.0))
    assert mapped.as_operator(GROUP).remember(_texts(2)[1], "group").status == "reinforced"
    assert _pg_index(mapped).saved.rows == 400
    mapped.close()


def test_postgres_ignores_a_saved_index_of_another_schema(pg_dsn: str, tmp_path: Path) -> None:
    a, b = f"saved_{uuid.uuid4().hex[:12]}", f"saved_{uuid.uuid4().hex[:12]}"
    store = _pg_store(pg_dsn, a, tmp_path)
    store.as_operator(GROUP).remember_many(_texts(300), "group")
    _answers(store)
    store.close()
    other = _pg_store(pg_dsn, b, tmp_path / "b", None)
    other.as_operator(GROUP).remember_many(_texts(350, start=5000), "group")
    want = _answers(other)
    name = other.backend._saved_index_name(SCOPE)  # type: ignore[attr-defined]
    other.close()
    (tmp_path / "b" / name).write_bytes(next(tmp_path.glob("*.index")).read_bytes())  # a's index under b's name
    other = _pg_store(pg_dsn, b, tmp_path / "b", None)
    assert _answers(other) == want
    assert _pg_index(other).saved == Coverage()
    other.close()


def test_a_header_changed_behind_its_checksum_is_ignored(
    pristine: tuple[Path, list[list[tuple[str, float]]]], tmp_path: Path
) -> None:
    # A header that still parses, with counts that still fit the file (fewer rows: the last-id check would
    # pass on the shorter index, and 10 facts would silently drop out of search): only its CRC-32 tells.
    source, want = pristine
    for name in ("group_g.db", "ids.db"):
        (tmp_path / name).write_bytes((source / name).read_bytes())
    data = _saved_file(source).read_bytes()
    assert data.count(b'"rows": 150') == 1
    _saved_file(tmp_path).write_bytes(data.replace(b'"rows": 150', b'"rows": 140'))
    store = _store(tmp_path, None)
    assert _answers(store) == want
    assert _index(store).saved == Coverage()
    store.close()


def test_postgres_refuses_an_index_dir_that_cannot_be_a_folder(pg_dsn: str, tmp_path: Path) -> None:
    from autogen_shared_memory.backends.postgres import PostgresBackend

    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ValueError, match="index_dir .* cannot be used as a folder"):
        PostgresBackend(pg_dsn, schema="unused_x", index_dir=tmp_path / "a-file" / "idx")
    with pytest.raises(ValueError, match="does not apply to search='server'"):
        PostgresBackend(pg_dsn, schema="unused_x", index_dir=tmp_path / "idx", search="server")


def test_an_exact_duplicate_is_found_however_its_hash_key_reached_the_index(tmp_path: Path) -> None:
    # A write asks the database for a draft's stored duplicates only when the scope's index holds the draft's
    # hash key. The keys come from a first load, a mapped saved index, a refresh that reads another
    # process's rows, and this process's own inserts: a key missing from any of them stores a restatement
    # twice. Near-duplicate merges are off, so only the exact rule can reinforce.
    def opened(save_from: int | None) -> SharedMemoryStore:
        backend = SQLiteBackend(tmp_path, save_index_from=save_from)
        return SharedMemoryStore(backend, embedder=HashEmbedder(), dedup=DedupSettings(near_duplicate=1.01))

    texts = _texts(300)
    first = opened(100)
    first.as_operator(GROUP).remember_many(texts, "group")
    first.close()  # saved
    mapped = opened(None)
    assert mapped.as_operator(GROUP).remember(texts[5], "group").status == "reinforced"  # the file's keys
    assert _index(mapped).saved.rows == 300
    _saved_file(tmp_path).unlink()
    loaded = opened(None)
    assert loaded.as_operator(GROUP).remember(texts[6], "group").status == "reinforced"  # a first load's
    assert _index(loaded).saved == Coverage()
    by_other = "a fact another process wrote after this one loaded the scope"
    assert loaded.as_operator(GROUP).remember(by_other, "group").status == "created"
    assert mapped.as_operator(GROUP).remember(by_other, "group").status == "reinforced"  # a refresh's
    own = ["a fact written twice in one batch", "a fact written twice in one batch"]
    assert [r.status for r in mapped.as_operator(GROUP).remember_many(own, "group")] == ["created", "reinforced"]
    assert mapped.as_operator(GROUP).remember(own[0], "group").status == "reinforced"  # its own insert's
    assert mapped.stats()[0].counts["active"] == 302
    for store in (mapped, loaded):
        store.close()


def test_a_new_fact_asks_the_database_for_no_duplicate(tmp_path: Path) -> None:
    # A draft whose hash key the index does not hold has no stored duplicate: no query looks for one.
    store = _store(tmp_path, None)
    op = store.as_operator(GROUP)
    op.remember_many(_texts(50), "group")
    asked: list[str] = []
    conn = store.backend._conn(SCOPE, create=False)  # type: ignore[attr-defined]
    conn.set_trace_callback(asked.append)
    op.remember_many(_texts(20, start=50), "group")
    op.remember("one more new fact", "group")
    conn.set_trace_callback(None)
    assert asked and not [s for s in asked if "content_hash =" in s or "content_hash IN" in s]
    store.close()
