"""Several processes, each with several threads, remembering and forgetting in the same scopes at once."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import subprocess
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.settings import WritePolicy
from autogen_shared_memory.testing import HashEmbedder

PROCESSES = 4
THREADS = 4
FACTS_PER_THREAD = 30


def _worker(root: str, proc: int, barrier: Any, out: Any) -> None:
    store = SharedMemoryStore(root, embedder=HashEmbedder(), policy=WritePolicy(global_writers=["*"]))
    store.operator.add_member("crew", f"p{proc}")
    errors: list[str] = []
    created: list[str] = []
    forgotten: list[str] = []
    lock = threading.Lock()

    def run(thread: int) -> None:
        for i in range(FACTS_PER_THREAD):
            scope = "global" if i % 2 else "group"
            try:
                text = f"process{proc} thread{thread} item{i} token{proc * 1000 + thread * 100 + i}"
                r = store.as_agent(f"p{proc}", "crew").remember(text, scope)
                with lock:
                    created.append(r.id)
                if i % 5 == 0:
                    store.as_agent(f"p{proc}", "crew").forget(r.id, "cleanup")
                    with lock:
                        forgotten.append(r.id)
                store.as_agent(f"p{proc}", "crew").search(f"thread{thread} item{i}")
            except Exception as exc:  # every error is a failure of the test
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(run, range(THREADS)))
    barrier.wait(timeout=120)
    # after everyone finished, this process sees every other process's facts on its next search
    seen = {}
    for other in range(PROCESSES):
        tokens = [f"token{other * 1000 + thread * 100 + 1}" for thread in range(THREADS)]  # global facts
        seen[other] = sum(1 for t in tokens if any(t in h.content for h in store.operator.search(t, "global", top_k=1)))
    store.close()
    out.put({"proc": proc, "errors": errors, "created": created, "forgotten": forgotten, "seen": seen})


def test_many_processes_and_threads_lose_nothing(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), p, barrier, out)) for p in range(PROCESSES)]
    for p in procs:
        p.start()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    errors = [e for r in results for e in r["errors"]]
    assert errors == [], "\n".join(errors)
    created = [i for r in results for i in r["created"]]
    forgotten = {i for r in results for i in r["forgotten"]}
    assert len(created) == len(set(created)) == PROCESSES * THREADS * FACTS_PER_THREAD
    rows: dict[str, str] = {}
    for name in ("global.db", "group_crew.db"):
        with sqlite3.connect(tmp_path / name) as conn:
            rows.update(dict(conn.execute("SELECT id, status FROM facts").fetchall()))
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert set(rows) == set(created)
    assert {i for i, s in rows.items() if s == "forgotten"} == forgotten
    for r in results:  # item1 of every thread is a global fact: THREADS per process
        assert all(count == THREADS for count in r["seen"].values()), r["seen"]


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")
def test_opening_a_scope_again_keeps_this_processs_sqlite_locks(tmp_path: Path) -> None:
    """Closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's included:
    the store must never open() a database file itself (another process could then checkpoint and delete
    the WAL under live connections). A second backend, a new thread or the CLI's doctor open the file again."""
    from autogen_shared_memory.backends.sqlite import SQLiteBackend

    first = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    first.operator.remember("a fact", "global")
    path = tmp_path / "global.db"

    def my_locks() -> list[str]:
        inode = f":{os.stat(path).st_ino} "
        return [  # without the line's ordinal, which moves when other processes take or drop locks
            line.split(":", 1)[1]
            for line in Path("/proc/locks").read_text().splitlines()
            if inode in line and f" {os.getpid()} " in line
        ]

    held = my_locks()
    assert held, "an open WAL-mode connection holds a shared lock on its database file"
    second = SharedMemoryStore(SQLiteBackend(tmp_path), embedder=HashEmbedder())
    assert second.operator.search("fact", "global")
    thread = threading.Thread(target=lambda: first.operator.search("fact", "global"))  # a per-thread connection
    thread.start()
    thread.join()
    assert my_locks() == held


def test_concurrent_writes_and_searches_leave_the_users_thread_settings(tmp_path: Path) -> None:
    """Batched near-duplicate scans pin numpy's BLAS to one thread while they run, and searches run torch on
    their own threads: overlapping calls must leave neither the BLAS pool nor the caller's torch pinned."""
    import torch
    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    store.operator.remember_many([f"fact {i} about blas threads" for i in range(50)], "global")
    before, torch_before = blas_threads(), torch.get_num_threads()

    def work(i: int) -> None:
        store.operator.remember_many([f"note {i} {j} on thread settings" for j in range(3)], "global")
        store.operator.search(f"fact {i}", "global")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(100)))
    work(100)  # on this thread too (torch.set_num_threads anywhere would change every thread)
    assert blas_threads() == before
    assert torch.get_num_threads() == torch_before


def test_a_store_without_torch_embedder_never_imports_torch(tmp_path: Path) -> None:
    # Searches tune torch's threads only when torch is already loaded (by the model): a deployment with another
    # embedder does not pay for importing it.
    code = (
        "import sys\n"
        "from autogen_shared_memory import SharedMemoryStore\n"
        "from autogen_shared_memory.testing import HashEmbedder\n"
        f"s = SharedMemoryStore({str(tmp_path)!r}, embedder=HashEmbedder())\n"
        "s.operator.remember_many(['the deploy runs on fridays', 'lunch is at noon'], 'global')\n"
        "assert s.operator.search('deploy', 'global')[0].fact.content == 'the deploy runs on fridays'\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_open_files_stay_bounded_when_a_lookup_visits_every_scope(tmp_path: Path) -> None:
    from autogen_shared_memory import FactNotFoundError

    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    for g in range(150):
        store.as_operator(f"g{g}").remember(f"fact of group {g}", "group")
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(FactNotFoundError):
        store.operator.get("g_0000000000000000beef")  # an invented id
    opened = len(os.listdir("/proc/self/fd")) - before
    assert opened <= 3 * store.backend.MAX_OPEN_SCOPES  # type: ignore[attr-defined]
    assert store.as_operator("g7").search("fact of group 7", "group")[0].content == "fact of group 7"


def test_release_thread_closes_the_threads_connections_and_they_reopen(tmp_path: Path) -> None:
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder(), policy=WritePolicy(global_writers=["alice"]))
    store.operator.add_member("crew", "alice")

    def search_and_write() -> None:  # opens the three scope files and ids.db
        store.as_agent("alice").remember("the launch is on March 3", "agent")
        assert store.as_agent("alice", "crew").search("launch")

    search_and_write()
    backend: Any = store.backend
    mine = list(backend._local.held.opened)
    assert len(mine) >= 2  # a search may read some scope files in helper threads; the write's are this one's
    backend.release_thread()
    for conn in mine:
        assert conn not in backend._all_conns
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            conn.execute("SELECT 1")
    search_and_write()  # reopened, ids.db included
    assert len(backend._local.held.opened) == len(mine)
    store.close()


def test_a_seq_reused_after_a_purge_never_lends_its_vector_to_the_purged_fact(tmp_path: Path) -> None:
    """SQLite reuses the seq of a purged newest fact. Another process purges it and writes a new fact right
    while this one refreshes its index: the purged fact's row must not take the new fact's vector, and a
    re-score from the file, which reads by seq, must not either (it did: the purged id came back with the new
    fact's cosine, 1.0)."""
    from autogen_shared_memory.backends.sqlite import SQLiteBackend
    from autogen_shared_memory.core.types import Filters

    reader = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    writer = SharedMemoryStore(tmp_path, embedder=HashEmbedder())  # another process, in effect
    keep = writer.operator.remember("amber birch cobalt", "global")
    gone = writer.operator.remember("delta ember fjord", "global")
    ref = reader.engine.scope_ref("global")
    assert (
        reader.operator.search("delta ember fjord", "global", top_k=1)[0].id == gone.id
    )  # the reader's index is loaded
    backend = reader.backend
    assert isinstance(backend, SQLiteBackend)
    conn = backend._conn(ref, create=False)
    assert conn is not None
    index = backend._index(ref)
    gone_seq = int(index.seq[index.ids.index(gone.id)])
    real = conn.execute
    new: list[str] = []

    def execute(sql: str, *args: Any) -> Any:
        cursor = real(sql, *args)
        if sql.startswith("SELECT rev, epoch FROM state") and not new:  # the other process, right then
            writer.operator.forget(gone.id)
            writer.operator.purge(older_than=0)
            new.append(writer.operator.remember("garnet harbor indigo", "global").id)
        return cursor

    conn.execute = execute  # type: ignore[method-assign]
    vector = reader.embedder.embed(["garnet harbor indigo"])[0]
    with index.lock:
        backend._refresh(conn, index)
        rows = [p for p in range(index.n) if index.ids[p] == gone.id]
        assert all(float(index.codes.rebuild(np.array(rows))[k] @ vector) < 0.5 for k in range(len(rows)))
    conn.execute = real  # type: ignore[method-assign]
    assert real("SELECT id FROM facts WHERE seq = ?", (gone_seq,)).fetchone() == (new[0],)  # the seq was reused
    assert backend._exact(conn, np.array([gone_seq]), vector, [gone.id])[0] == -np.inf
    assert backend._exact(conn, np.array([gone_seq]), vector, [new[0]])[0] > 0.99
    assert {fid for _, fid, _ in backend.semantic([ref], vector, 5, Filters())} == {keep.id, new[0]}
