"""The change feed on SQLite files: another process's writes, new scope files, and the file-metadata rule."""

from __future__ import annotations

import base64
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.sqlite import scope_file_name
from autogen_shared_memory.backends.sqlite.watch import RACY_SECONDS, _newest
from autogen_shared_memory.core.types import Change, ScopeRef
from autogen_shared_memory.testing import HashEmbedder
from autogen_shared_memory.testing.conformance import _settle as settle
from autogen_shared_memory.testing.conformance import _wait_for as wait_for


def _writer(root: str, out: Any, go_on: Any, may_close: Any) -> None:
    """Another process: new scope files, a shared scope, then (once told: after a quiet spell longer than the
    file-time rule's window) more writes to files that already exist; it keeps its connections open until
    told."""
    store = SharedMemoryStore(root, embedder=HashEmbedder())
    ids = []
    for i in range(60):
        if i % 3 == 0:
            ids.append(store.as_operator(f"fresh{i}").remember(f"fact {i}", "group").id)
        elif i % 3 == 1:
            ids.append(store.as_operator("crew").remember(f"fact {i}", "group").id)
        else:
            ids.append(store.as_agent("alice").remember(f"fact {i}", "agent").id)
    go_on.wait(120)
    for i in range(60, 80):
        ids.append(store.as_operator("crew" if i % 2 else "fresh0").remember(f"fact {i}", "group").id)
    out.put(ids)
    may_close.wait(120)  # no checkpoint on close before the test looked: WAL-only changes must be seen
    store.close()


def test_every_write_of_another_process_arrives_exactly_once_in_order(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    store = SharedMemoryStore(root, embedder=HashEmbedder())  # the directory does not exist yet
    seen: list[Change] = []
    sub = store.subscribe(seen.append)
    ctx = mp.get_context("spawn")
    out, go_on, may_close = ctx.Queue(), ctx.Event(), ctx.Event()
    writer = ctx.Process(target=_writer, args=(str(root), out, go_on, may_close))
    writer.start()

    def looked_after_they_settled() -> bool:
        """The first 60 arrived, and since then the subscription looked at every file they are in when its
        last change was older than the file-time rule's window: the later writes must be found by their
        metadata alone, not because the files were still recent (a fixed pause cannot promise that such a
        look happened on a loaded machine)."""
        looks = sub._watcher._seen  # type: ignore[union-attr]
        names = {scope_file_name(c.scope) for c in seen}
        return len(seen) >= 60 and all(
            name in looks and looks[name][1] - _newest(looks[name][0]) > RACY_SECONDS for name in names
        )

    try:
        assert wait_for(looked_after_they_settled, 120)
        go_on.set()
        ids = out.get(timeout=180)
        assert wait_for(lambda: len(seen) >= 80, 30), f"{80 - len(seen)} writes never arrived"
        ids += settle(store, seen, {c.scope for c in seen})
    finally:
        go_on.set()
        may_close.set()
        writer.join(timeout=60)
    keys = [(c.scope, c.seq) for c in seen]
    assert len(keys) == len(set(keys)) == len(ids)
    assert sorted(c.fact_id for c in seen) == sorted(ids)
    for scope in {c.scope for c in seen}:
        seqs = [c.seq for c in seen if c.scope == scope]
        assert seqs == sorted(seqs) == list(range(1, len(seqs) + 1))  # SQLite: each file's trail has no gaps
    sub()
    store.close()


def test_scope_files_report_new_and_changed_files_and_recent_ones_until_they_settle(tmp_path: Path) -> None:
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    files = store.backend.change_watcher()
    assert files is not None
    assert files.changed() == set()
    store.operator.remember("one", "global")
    crew = ScopeRef("group", "crew")
    store.as_operator("crew").remember("two", "group")
    assert files.changed() == {ScopeRef("global"), crew}  # new files
    # Modified within two seconds of the last look: reported again, as a write in the same tick of the file
    # clock may have left the same size and time.
    assert files.changed() == {ScopeRef("global"), crew}
    old = time.time() - 10
    for name in ("global.db", "global.db-wal", "group_crew.db", "group_crew.db-wal"):
        if (tmp_path / name).exists():
            os.utime(tmp_path / name, (old, old))
    files.changed()  # the look that records the settled times
    assert files.changed() == set()  # nothing changed, nothing recent: no file is read
    store.as_operator("crew").remember("three", "group")
    assert files.changed() == {crew}
    (tmp_path / "agent_stray.db").write_bytes(b"not a database")
    (tmp_path / "notes.txt").write_text("not a scope file")
    assert files.changed() == {crew}  # still recent; stray files are never reported
    store.close()


# ------------------------------------------------------------------------------------- the CLI's watch
def test_watch_prints_changes_as_json_lines_and_where_to_resume(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autogen_shared_memory.cli import app

    env = {"AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER": "hash"}
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    first = store.operator.remember("first fact", "global")
    second = store.as_operator("crew").remember("crew fact", "group")
    runner = CliRunner()
    result = runner.invoke(
        app, ["--root", str(tmp_path), "watch", "--since", "start", "--count", "2", "--json"], env=env
    )
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(line["fact_id"] for line in lines) == sorted([first.id, second.id])
    assert {line["event"] for line in lines} == {"created"} and all(line["position"] for line in lines)
    resume = result.stderr.split("resume with --since ")[1].split()[0]
    assert resume == lines[-1]["position"]
    later = threading.Timer(0.5, lambda: store.as_agent("alice").remember("third fact", "agent"))
    later.start()
    result = runner.invoke(app, ["--root", str(tmp_path), "watch", "--since", resume, "--count", "1"], env=env)
    later.join()
    assert result.exit_code == 0, result.stderr
    assert "agent:alice" in result.stdout and "created" in result.stdout and len(result.stdout.splitlines()) == 1
    bad = runner.invoke(app, ["--root", str(tmp_path), "watch", "--since", "garbage"], env=env)
    assert bad.exit_code == 2 and "position" in bad.stderr
    store.close()


def test_watch_refuses_a_malformed_position_with_a_usage_error(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autogen_shared_memory.cli import app

    env = {"AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER": "hash"}
    SharedMemoryStore(tmp_path, embedder=HashEmbedder()).close()

    def token(text: bytes) -> str:
        return "p1." + base64.urlsafe_b64encode(zlib.compress(text)).decode().rstrip("=")

    for bad, problem in (
        (token(b"[" * 100_000 + b"]" * 100_000), "nested too deeply"),
        (token(json.dumps([["global", "", 2**100]]).encode()), "2**63"),
        (token(json.dumps([["group", "crew", 1, "not a mark"]]).encode()), "mark"),
    ):
        result = CliRunner().invoke(app, ["--root", str(tmp_path), "watch", "--since", bad], env=env)
        assert result.exit_code == 2, (result.exit_code, result.exception)
        assert problem in result.stderr and "Invalid value for '--since'" in result.stderr
        assert "Traceback" not in result.stderr + result.stdout and isinstance(result.exception, SystemExit)


def test_a_scope_file_deleted_and_made_again_or_restored_from_an_older_copy_is_read_from_its_beginning(
    tmp_path: Path,
) -> None:
    root, crew = tmp_path / "memory", ScopeRef("group", "crew")
    path = root / scope_file_name(crew)

    def remove_scope_file() -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)

    def write(*texts: str) -> list[str]:
        store = SharedMemoryStore(root, embedder=HashEmbedder())
        ids = [store.as_operator("crew").remember(text, "group").id for text in texts]
        store.close()  # checkpoints: the file alone holds everything
        return ids

    first = write("first fact", "second fact", "third fact")
    shutil.copy(path, tmp_path / "backup.db")
    write("fourth fact", "fifth fact", "sixth fact")
    store = SharedMemoryStore(root, embedder=HashEmbedder())
    at_sixth, at_second = store.changes()[-1].position, store.changes()[1].position
    store.close()
    # Restored from the older copy (3 changes), then written to: the position's seq 6 is past its end.
    remove_scope_file()
    shutil.copy(tmp_path / "backup.db", path)
    restored = write("written after the restore")
    store = SharedMemoryStore(root, embedder=HashEmbedder())
    assert [c.fact_id for c in store.changes(since=str(at_sixth))] == [*first, *restored]
    seen: list[Change] = []
    with store.subscribe(seen.append, since=str(at_sixth)):
        assert wait_for(lambda: len(seen) >= 4, 20)
        (sentinel,) = settle(store, seen, [crew])
    assert [c.fact_id for c in seen] == [*first, *restored, sentinel]
    store.close()
    # Deleted and made again with more changes than the position's seq: seq 2 holds another change now.
    remove_scope_file()
    again = write("new first", "new second", "new third", "new fourth")
    store = SharedMemoryStore(root, embedder=HashEmbedder())
    assert [c.fact_id for c in store.changes(since=str(at_second))] == again
    store.close()


def test_watch_follows_another_process_until_ctrl_c(tmp_path: Path) -> None:
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    store.operator.remember("before watching", "global")
    env = {**os.environ, "AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER": "hash"}
    # Ctrl-C as a terminal sends it: SIGINT handled even when this test runs as a background job, whose
    # children inherit SIGINT ignored (and a watch started with nohup or & rightly keeps ignoring it).
    ctrl_c = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'autogen-shared-memory'; runpy.run_module('autogen_shared_memory', run_name='__main__')"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", ctrl_c, "--root", str(tmp_path), "watch", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        for _ in range(20):  # "watching ...": it follows the store; a write from now on is delivered
            if "watching" in proc.stderr.readline():
                break
        fact = store.as_operator("crew").remember("written while watched", "group")
        assert proc.stdout is not None
        line = json.loads(proc.stdout.readline())
        assert (line["fact_id"], line["scope"], line["event"]) == (fact.id, "group:crew", "created")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0 and out == ""
    assert f"resume with --since {line['position']}" in err
    store.close()


def test_watch_and_json_output_show_control_characters_as_escapes(tmp_path: Path) -> None:
    """A forget reason is agent text: ``watch`` printed it raw (ESC[2K erased the line on a terminal), and
    ``--json`` kept bidi overrides and C1 controls raw; both are escapes now (the same data for a parser)."""
    from typer.testing import CliRunner

    from autogen_shared_memory.cli import app

    env = {"AUTOGEN_SHARED_MEMORY_TEST_EMBEDDER": "hash"}
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    fact = store.operator.remember("a fact", "global")
    reason = "obsolete\x1b[2K\x1b[1A APPROVED \u202e \x9b\n2026-11-25 10:00:00  global  forgotten  w_x  by system"
    store.operator.forget(fact.id, reason)
    runner = CliRunner()
    for extra in ([], ["--json"]):
        args = ["--root", str(tmp_path), "watch", "--since", "start", "--count", "2", *extra]
        out = runner.invoke(app, args, env=env).stdout
        assert not any(ch in out for ch in "\x1b\u202e\x9b") and "APPROVED" in out
        assert len(out.splitlines()) == 2  # one line per change: the reason's line break cannot forge a third
    lines = runner.invoke(
        app, ["--root", str(tmp_path), "watch", "--since", "start", "--count", "2", "--json"], env=env
    )
    assert json.loads(lines.stdout.splitlines()[1])["detail"]["reason"] == reason
    shown = runner.invoke(app, ["--root", str(tmp_path), "show", fact.id, "--json"], env=env).stdout
    assert "\u202e" not in shown and json.loads(shown)["tombstone_reason"] == reason
    store.close()


def test_a_file_that_was_no_scope_file_when_first_seen_is_looked_at_again(tmp_path: Path) -> None:
    """A scope file seen half-written (restored with cp while `watch` ran) was taken for a stray file for
    good: none of its changes, nor later ones, were ever delivered."""
    source = SharedMemoryStore(tmp_path / "source", embedder=HashEmbedder())
    source.as_operator("crew").remember("The launch is on March 3", "group")
    source.close()
    store = SharedMemoryStore(tmp_path / "store", embedder=HashEmbedder())
    store.operator.remember("a global fact", "global")
    files = store.backend.change_watcher()
    assert files is not None
    files.changed()
    target = tmp_path / "store" / "group_crew.db"
    target.write_bytes(b"")  # the copy has begun
    assert ScopeRef("group", "crew") not in files.changed()
    target.write_bytes((tmp_path / "source" / "group_crew.db").read_bytes())  # and ended
    assert ScopeRef("group", "crew") in files.changed()
    store.close()


def test_a_scope_named_file_holding_an_impossible_owner_is_skipped_not_fatal(tmp_path: Path) -> None:
    import sqlite3

    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    store.as_operator("crew").remember("The launch is on March 3", "group")
    bad = tmp_path / "group_bad.db"
    bad.write_bytes((tmp_path / "group_crew.db").read_bytes())
    with sqlite3.connect(bad) as conn:
        conn.execute("UPDATE meta SET value = 'a/b' WHERE key = 'scope_owner'")
    assert ScopeRef("group", "crew") in store.backend.scopes()  # the listing goes on without it
    store.close()
