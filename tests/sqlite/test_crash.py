"""kill -9 while the lifecycle writes: no acknowledged write is lost, no invariant is broken, files stay sound."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from old_schemas import FACTS_FTS, SCHEMA_4_FACTS_FTS

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.sqlite import SCHEMA_VERSION, scope_file_name
from autogen_shared_memory.core.types import Filters, ScopeRef
from autogen_shared_memory.settings import DedupSettings
from autogen_shared_memory.testing import HashEmbedder

# Writes, restatements by two authors, corrections and forgets, one acknowledgement line per returned call.
WRITER = textwrap.dedent(
    """
    import json, random, sys
    from autogen_shared_memory import SharedMemoryStore, WritePolicy
    from autogen_shared_memory.testing import HashEmbedder

    store = SharedMemoryStore(sys.argv[1], embedder=HashEmbedder(), policy=WritePolicy(global_writers=["*"]))
    rng = random.Random(int(sys.argv[2]))
    live = []
    print("ready", flush=True)
    for n in range(100000):
        who = rng.choice(["alice", "bob"])
        roll = rng.random()
        if roll < 0.5:
            batch = [f"order {rng.randrange(50)} ships on day {rng.randrange(7)}" for _ in range(rng.randrange(1, 20))]
            receipts = store.as_agent(who).remember_many(batch, "global")
            live += [r.id for r in receipts if r.status == "created"]
            print(json.dumps({"op": "write", "ids": [r.id for r in receipts], "by": who}), flush=True)
        elif roll < 0.8 and live:
            old = live.pop(rng.randrange(len(live)))
            try:
                new = store.as_agent(who).remember(f"correction {n} of {old}", "global", supersedes=[old])
            except ValueError:  # already closed by an earlier forget
                continue
            live.append(new.id)
            print(json.dumps({"op": "correct", "old": old, "new": new.id}), flush=True)
        elif live:
            fid = live.pop(rng.randrange(len(live)))
            store.operator.forget(fid, "done")  # the operator: an agent forgets only what it stated
            print(json.dumps({"op": "forget", "id": fid}), flush=True)
    """
)


def _kill_midway(root: Path, seed: int, after: float) -> list[dict[str, object]]:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(seed)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(after)
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_kill_9_during_writes_loses_no_acknowledged_write(tmp_path: Path) -> None:
    rng = random.Random(7)
    acked: list[dict[str, object]] = []
    for round_ in range(6):
        acked += _kill_midway(tmp_path, round_, rng.uniform(0.2, 1.2))
    with sqlite3.connect(tmp_path / "global.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    assert len(acked) > 20
    for op in acked:
        if op["op"] == "write":
            for fid in op["ids"]:  # type: ignore[attr-defined]
                assert op["by"] in store.operator.get(fid).stated_by
        elif op["op"] == "correct":
            old, new = store.operator.get(str(op["old"])), store.operator.get(str(op["new"]))
            assert old.status == "superseded" and old.superseded_by == new.id and new.supersedes == (old.id,)
            assert old.valid_to == new.created_at
        else:
            assert store.operator.get(str(op["id"])).status == "forgotten"
    # invariants over every fact, acknowledged or not: a closed fact's successor exists; counts agree
    ids = store.backend.select_ids(ScopeRef("global"), Filters(include_inactive=True), 1 << 30)
    facts = store.backend.get(ScopeRef("global"), ids)
    for fact in facts:
        assert fact.stated_by[0] == fact.created_by and fact.reinforcement >= len(fact.stated_by)
        if fact.status == "superseded":
            assert fact.superseded_by is not None and store.operator.get(fact.superseded_by).supersedes == (fact.id,)
    stats = store.stats()[0]
    assert sum(stats.counts.values()) == len(facts)


def kill_while_migrating(root: Path, older: Callable[[sqlite3.Connection], int], check: Callable[..., None]) -> None:
    """20,000 facts, the file taken back by ``older`` (which returns the schema it left), then processes that
    open the store killed at several points of the migration: after each, ``check(conn, version)`` holds and no
    fact is lost; a last open finishes the migration."""
    store = SharedMemoryStore(root, embedder=HashEmbedder(), dedup=DedupSettings(near_duplicate=1.01, similar=1.01))
    facts = [f"fact number {i} of the old store, word{i % 997} and word{i % 89}" for i in range(20000)]
    store.operator.remember_many(facts, "global")
    store.close()
    with sqlite3.connect(root / "global.db") as conn:
        old = older(conn)
        conn.execute(f"PRAGMA user_version = {old}")
    opener = (
        "import sys; from autogen_shared_memory import SharedMemoryStore; print('open', flush=True); "
        "SharedMemoryStore(sys.argv[1]).stats()"
    )
    for delay in (0.0, 0.02, 0.05, 0.1):
        proc = subprocess.Popen([sys.executable, "-c", opener, str(root)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
        time.sleep(delay)
        proc.kill()
        proc.wait()
        with sqlite3.connect(root / "global.db") as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            assert version in (old, SCHEMA_VERSION)
            check(conn, version == old)  # all or nothing
            assert conn.execute("SELECT count(*) FROM facts").fetchone()[0] == 20000
    reopened = SharedMemoryStore(root, embedder=HashEmbedder())
    assert reopened.stats()[0].counts["active"] == 20000 and reopened.stats()[0].schema_version == SCHEMA_VERSION
    assert len(reopened.operator.search("word7 word11", "global", top_k=3)) == 3


@pytest.mark.sqlite_only
def test_kill_9_during_the_schema_3_migration_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    def older(conn: sqlite3.Connection) -> int:
        conn.execute("ALTER TABLE facts DROP COLUMN stated_by")
        return 2

    def check(conn: sqlite3.Connection, old: bool) -> None:
        assert ("stated_by" in {r[1] for r in conn.execute("PRAGMA table_info(facts)")}) is not old

    kill_while_migrating(tmp_path, older, check)


@pytest.mark.sqlite_only
def test_kill_9_during_the_schema_5_migration_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    """Dropping a big FTS5 index takes a while: a process killed part-way leaves the file at schema 4 with
    its index and triggers whole, or at schema 5 without them, never between."""

    def older(conn: sqlite3.Connection) -> int:
        conn.executescript(SCHEMA_4_FACTS_FTS)
        conn.execute("INSERT INTO facts_fts (facts_fts) VALUES ('rebuild')")  # the index, built over the rows
        return 4

    def check(conn: sqlite3.Connection, old: bool) -> None:
        assert len(conn.execute(FACTS_FTS).fetchall()) == (8 if old else 0)
        if old:
            conn.execute("INSERT INTO facts_fts (facts_fts) VALUES ('integrity-check')")  # raises if damaged

    kill_while_migrating(tmp_path, older, check)


@pytest.mark.sqlite_only
def test_half_built_files_of_a_killed_process_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    stale = [tmp_path / f".global.db.{dead.pid}.123.tmp{suffix}" for suffix in ("", "-wal", "-shm")]
    live = tmp_path / f".global.db.{os.getpid()}.456.tmp"
    for leftover in [*stale, live]:
        leftover.write_bytes(b"half")
    SharedMemoryStore(tmp_path, embedder=HashEmbedder()).operator.remember("first fact", "global")
    assert not any(p.exists() for p in stale) and live.exists()


# Forks children that create scope files one after another, each killed (SIGKILL) part-way: one import for
# all the kills. Prints, per kill, the temporary files it left.
SCOPE_CREATOR = textwrap.dedent(
    """
    import json, os, random, signal, sys, time
    from autogen_shared_memory import SharedMemoryStore
    from autogen_shared_memory.core.types import ScopeRef
    from autogen_shared_memory.testing import HashEmbedder

    root, kills = sys.argv[1], int(sys.argv[2])
    rng = random.Random(5)
    left = []
    for kill in range(kills):
        pid = os.fork()
        if pid == 0:
            store = SharedMemoryStore(root, embedder=HashEmbedder())
            n = 0
            while True:
                store.backend._conn(ScopeRef("agent", f"k{kill}-{n}"), create=True)
                n += 1
        time.sleep(rng.uniform(0.05, 0.25))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        parts = tuple(".tmp" + part for part in ("", "-wal", "-shm", "-journal", "-lock"))
        left.append(sorted(name for name in os.listdir(root) if name.endswith(parts)))
    print(json.dumps(left))
    """
)


@pytest.mark.sqlite_only
def test_temporary_files_of_scope_files_whose_creation_was_killed_are_removed(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCOPE_CREATOR, str(tmp_path), "20"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    left = json.loads(out.stdout.strip().splitlines()[-1])
    assert sum(1 for names in left if names) >= 3  # kills that landed while a file was being built
    assert all(len(names) <= 5 for names in left)  # each child removed what the one before it left
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())  # a later process: cleans on opening
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []
    scopes = store.backend.scopes("agent")
    assert len(scopes) >= 20
    for scope in scopes:  # every published file is whole
        with sqlite3.connect(tmp_path / scope_file_name(scope)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert store.as_agent(scopes[0].owner).remember("after the kills", "agent").status == "created"


# Holds the lock of a build, as the process building it does, until told to stop.
LOCK_HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.readline()
    """
)


@pytest.mark.sqlite_only
def test_a_build_whose_lock_is_held_is_never_removed(tmp_path: Path) -> None:
    """Another process's build under way (its process may run in another PID namespace: its pid means nothing
    here) keeps its files, whoever opens the store or creates a scope meanwhile; removed once it is gone."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    build = tmp_path / f".agent_x.db.{dead.pid}.0123abcd.tmp"
    parts = [Path(f"{build}{part}") for part in ("", "-wal", "-shm", "-lock")]
    for part in parts:
        part.write_bytes(b"half")
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(parts[-1])], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "locked"
        store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
        store.as_agent("y").remember("a scope created meanwhile", "agent")
        assert all(part.exists() for part in parts)
        store.close()
    finally:
        holder.stdin.write("done\n")
        holder.stdin.close()
        holder.wait(timeout=60)
    SharedMemoryStore(tmp_path, embedder=HashEmbedder()).close()
    assert not any(part.exists() for part in parts)


def test_a_reembed_killed_part_way_leaves_the_old_model_whole_and_runs_again(tmp_path: Path) -> None:
    """kill -9 between a re-embed's batches (to a model of another size): nothing of it was written, so the
    old model still searches and writes, and the next reembed() finishes."""
    old = SharedMemoryStore(tmp_path, embedder=HashEmbedder(64, "model-a"))
    ids = [r.id for r in old.operator.remember_many([f"fact {i} about the heron" for i in range(600)], "global")]
    old.close()
    script = textwrap.dedent(
        """
        import os, signal, sys
        from autogen_shared_memory import SharedMemoryStore
        from autogen_shared_memory.testing import HashEmbedder
        store = SharedMemoryStore(sys.argv[1], embedder=HashEmbedder(32, "model-b"))
        store.operator.reembed(progress=lambda n: os.kill(os.getpid(), signal.SIGKILL))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=False, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    old = SharedMemoryStore(tmp_path, embedder=HashEmbedder(64, "model-a"))
    assert old.operator.search("fact 17 heron", "global")[0].id == ids[17]
    assert old.operator.remember("written after the kill", "global").status == "created"
    old.close()
    new = SharedMemoryStore(tmp_path, embedder=HashEmbedder(32, "model-b"))
    assert new.operator.reembed() == 601
    assert new.operator.search("fact 17 heron", "global")[0].id == ids[17]
    new.close()
