"""Looking a fact up by id without visiting every scope file (SQLite's ``ids.db``; PostgreSQL's id index).

A model can send any id to ``memory_forget``: an invented one must cost one index probe, not a visit to each of
hundreds of group files, and the index must never hide a fact that exists (written by another process, before
the index existed, in a file copied in, or after a crash between the index and the file).
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from autogen_shared_memory import FactNotFoundError, SharedMemoryStore
from autogen_shared_memory.backends.sqlite import SQLiteBackend
from autogen_shared_memory.core import lifecycle
from autogen_shared_memory.testing import HashEmbedder

INVENTED = "g_0000000000000000beef"


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scope files SQLite backends open from now on, by name."""
    names: list[str] = []
    original = SQLiteBackend._open

    def counting(self: SQLiteBackend, path: Path, scope: object) -> object:
        names.append(path.name)
        return original(self, path, scope)  # type: ignore[arg-type]

    monkeypatch.setattr(SQLiteBackend, "_open", counting)
    return names


@pytest.fixture
def crowd(tmp_path: Path) -> Iterator[dict[str, str]]:
    """60 group files, one fact each: the fact ids by group."""
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    ids = {f"g{g}": store.as_operator(f"g{g}").remember(f"fact of group {g}", "group").id for g in range(60)}
    store.close()
    yield ids


def _fresh(root: Path) -> SharedMemoryStore:
    return SharedMemoryStore(root, embedder=HashEmbedder())


def test_an_invented_id_opens_no_scope_file(tmp_path: Path, crowd: dict[str, str], opened: list[str]) -> None:
    store = _fresh(tmp_path)
    for _ in range(3):
        with pytest.raises(FactNotFoundError):
            store.operator.get(INVENTED)
        with pytest.raises(FactNotFoundError):
            store.operator.forget("a_0000000000000000beef")
    assert opened == []
    assert store.operator.get(crowd["g41"]).content == "fact of group 41"  # a real id: its own file, and only that one
    assert opened == ["group_g41.db"]


def test_files_the_index_never_saw_are_indexed_on_the_first_miss(
    tmp_path: Path, crowd: dict[str, str], opened: list[str]
) -> None:
    # A store written before the index existed (or whose ids.db was deleted), plus a file copied in from
    # another deployment: every fact is still found by id, and only the first miss pays for it.
    (tmp_path / "ids.db").unlink()
    other = tmp_path.parent / "other"
    elsewhere = SharedMemoryStore(other, embedder=HashEmbedder())
    copied = elsewhere.as_operator("copied").remember("the copied group meets at ten", "group").id
    elsewhere.close()
    shutil.copy(other / "group_copied.db", tmp_path / "group_copied.db")

    store = _fresh(tmp_path)
    assert store.operator.get(crowd["g7"]).content == "fact of group 7"
    assert store.operator.get(copied).content == "the copied group meets at ten"
    opened.clear()
    with pytest.raises(FactNotFoundError):
        store.operator.get(INVENTED)
    assert opened == []  # everything is indexed now
    assert store.operator.forget(crowd["g59"]).status == "forgotten"


def test_a_file_copied_in_after_the_index_is_found(tmp_path: Path, crowd: dict[str, str]) -> None:
    store = _fresh(tmp_path)
    with pytest.raises(FactNotFoundError):
        store.operator.get(INVENTED)  # every file known
    other = tmp_path.parent / "later"
    elsewhere = SharedMemoryStore(other, embedder=HashEmbedder())
    copied = elsewhere.as_operator("late").remember("a late fact", "group").id
    elsewhere.close()
    shutil.copy(other / "group_late.db", tmp_path / "group_late.db")
    assert store.operator.get(copied).content == "a late fact"


def test_another_process_writes_are_found_by_id(tmp_path: Path, crowd: dict[str, str]) -> None:
    store = _fresh(tmp_path)
    with pytest.raises(FactNotFoundError):
        store.operator.get(INVENTED)  # this process now believes it knows every file
    code = (
        "from autogen_shared_memory import SharedMemoryStore\n"
        "from autogen_shared_memory.testing import HashEmbedder\n"
        f"s = SharedMemoryStore({str(tmp_path)!r}, embedder=HashEmbedder())\n"
        "print(s.as_operator('g3').remember('written next door', 'group').id)\n"
        "print(s.as_operator('newcomers').remember('a new team', 'group').id)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    old_file, new_file = out.stdout.split()
    assert store.operator.get(old_file).content == "written next door"
    assert store.operator.get(new_file).content == "a new team"


def test_a_crash_between_index_and_file_hides_nothing_and_invents_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _fresh(tmp_path)
    kept = store.as_operator("crew").remember("kept before the crash", "group").id

    def crash(*args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt  # the process dies inside the scope transaction

    with monkeypatch.context() as m:
        m.setattr(lifecycle, "write", crash)
        with pytest.raises(KeyboardInterrupt):
            store.as_operator("crew").remember("lost in the crash", "group")
    with sqlite3.connect(tmp_path / "ids.db") as conn:
        (dangling,) = {i for (i,) in conn.execute("SELECT id FROM fact_scope")} - {kept}
    with pytest.raises(FactNotFoundError):
        store.operator.get(dangling)  # the index pointed at a file without it: not found, nothing invented
    assert store.operator.get(kept).content == "kept before the crash"
    assert store.as_operator("crew").remember("after the crash", "group").status == "created"


def test_the_index_holds_only_what_the_files_hold(tmp_path: Path) -> None:
    store = _fresh(tmp_path)
    first = store.as_operator("crew").remember("the crew meets at nine", "group")
    again = store.as_operator("crew").remember("The crew meets at nine.", "group")
    assert again.status == "reinforced"
    gone = store.as_operator("crew").remember("a fact to purge", "group").id
    store.operator.forget(gone)
    store.operator.purge(older_than=0)

    with sqlite3.connect(tmp_path / "ids.db") as conn:
        indexed = sorted(conn.execute("SELECT id, kind, owner FROM fact_scope"))
        files = [name for (name,) in conn.execute("SELECT name FROM indexed_files")]
    assert indexed == [(first.id, "group", "crew")]  # the merged draft's id and the purged id are gone
    assert files == ["group_crew.db"]


def test_imported_facts_are_found_by_id(tmp_path: Path) -> None:
    source = _fresh(tmp_path / "a")
    fact = source.as_agent("alice").remember("alice likes green tea", "agent").id
    dump = tmp_path / "dump.jsonl"
    source.export(dump)
    target = _fresh(tmp_path / "b")
    target.import_(dump)
    assert target.operator.get(fact).content == "alice likes green tea"
    with sqlite3.connect(tmp_path / "b" / "ids.db") as conn:
        where = conn.execute("SELECT kind, owner FROM fact_scope WHERE id = ?", (fact,)).fetchall()
    assert where == [("agent", "alice")]


def test_an_index_deleted_while_a_store_runs_hides_nothing(tmp_path: Path) -> None:
    """docs: ``ids.db`` may be deleted at any time. A running store used to keep writing ids into the deleted
    file (and to trust what it knew was indexed), so facts it wrote after the delete were never found by id
    once another process had re-indexed the files."""
    running = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    first = running.as_operator("crew").remember("written before the delete", "group")
    assert running.operator.get(first.id).id == first.id
    for name in ("ids.db", "ids.db-wal", "ids.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    between = running.as_operator("crew").remember("written right after the delete", "group")
    fresh = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    assert fresh.operator.get(between.id).id == between.id  # a miss re-indexes the files, and marks them indexed
    after = running.as_operator("ops").remember("written after another process re-indexed", "group")
    later = running.as_operator("crew").remember("and one more into a file already indexed", "group")
    for fact in (first, between, after, later):
        newest = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
        assert newest.operator.get(fact.id).id == fact.id
        assert newest.operator.forget(fact.id).status == "forgotten"
        newest.close()
    fresh.close()
    running.close()
