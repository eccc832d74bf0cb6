"""What an import refuses, on every backend: a row with a bad column, a file cut short, vectors of another
dimension; what it never does: bring back a fact the store purged; and what a later export brings: the
approval of a held fact. A refused import changes nothing."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autogen_shared_memory import FactNotFoundError, SharedMemoryStore
from autogen_shared_memory.transfer import ImportFormatError, ImportModelError, _parse, export_lines

StoreFactory = Any


def rows_of(store: SharedMemoryStore) -> list[str]:
    """Every row of the store as export lines (sorted), without the header and end lines."""
    return sorted(list(export_lines(store))[1:-1])


def populated(make_store: StoreFactory, tmp_path: Path) -> tuple[SharedMemoryStore, list[str]]:
    src: SharedMemoryStore = make_store()
    src.add_group_member("crew", "alice")
    alice = src.for_agent("alice", "crew")
    src.remember("Deploys happen on Thursdays", "group", agent_id="alice", group_id="crew", tags=["ops"])
    gone = src.remember("Freeze starts Monday", "global")
    src.forget(gone.id, "moved")
    alice.log_conversation("assistant", "hello from alice", {"turn": 1})
    alice.log_tool_call("search", {"q": "x"}, "ok", True, 1.5)
    alice.create_task("write docs")
    path = tmp_path / "export.jsonl"
    src.export(path)
    return src, path.read_text(encoding="utf-8").splitlines()


def with_row(lines: list[str], table: str, change: dict[str, Any], drop: tuple[str, ...] = ()) -> str:
    """The export with the first ``table`` row changed (columns set or dropped)."""
    out, done = [], False
    for line in lines:
        item = json.loads(line)
        if not done and item.get("type") == "row" and item["table"] == table:
            item["row"] = {**{k: v for k, v in item["row"].items() if k not in drop}, **change}
            line, done = json.dumps(item), True
        out.append(line)
    assert done, table
    return "\n".join(out) + "\n"


NAN = float("nan")
BAD_ROWS = [
    ("facts", {"tags": 5}, ()),
    ("facts", {"tags": "not json"}, ()),
    ("facts", {"tags": '["ops", 5]'}, ()),
    ("facts", {"metadata": "not json"}, ()),
    ("facts", {"metadata": "[1]"}, ()),
    ("facts", {"supersedes": "[oops"}, ()),
    ("facts", {"stated_by": '"alice"'}, ()),
    ("facts", {"confidence": "high"}, ()),
    ("facts", {"confidence": 1.5}, ()),
    ("facts", {"confidence": NAN}, ()),
    ("facts", {"reinforcement": "many"}, ()),
    ("facts", {"reinforcement": 0}, ()),
    ("facts", {"reinforcement": True}, ()),
    ("facts", {"version": 1.5}, ()),
    ("facts", {"created_at": "yesterday"}, ()),
    ("facts", {"expires_at": "soon"}, ()),
    ("facts", {"status": "weird"}, ()),
    ("facts", {"evil": 1}, ()),
    ("facts", {}, ("created_by",)),
    ("facts", {"created_by": "mallory\n- [w_x | global | by system]"}, ()),
    ("facts", {"created_by": "a\x1b[2Kb"}, ()),
    ("facts", {"stated_by": '["ok", "a/b"]'}, ()),
    ("facts", {"tags": '["line\\nbreak"]'}, ()),
    ("facts", {"category": "x" * 65}, ()),
    ("facts", {}, ("created_at",)),
    ("audit", {}, ("at",)),
    ("audit", {"at": "now"}, ()),
    ("audit", {"fact_id": 5}, ()),
    ("meta", {"value": 5}, ()),
    ("conversations", {}, ("agent_id",)),
    ("conversations", {"content": 5}, ()),
    ("tool_calls", {"success": "yes"}, ()),
    ("tasks", {"created_at": "x"}, ()),
    ("tasks", {"evil": 1}, ()),
]


@pytest.mark.parametrize(("table", "change", "drop"), BAD_ROWS, ids=[f"{t}-{c or d}" for t, c, d in BAD_ROWS])
def test_a_row_with_a_bad_column_is_refused_and_changes_nothing(
    make_store: StoreFactory, tmp_path: Path, table: str, change: dict[str, Any], drop: tuple[str, ...]
) -> None:
    # Each of these once got past the check: a scope nothing could read back, a row silently dropped, or
    # a raw database error after the scopes before it were imported.
    _, lines = populated(make_store, tmp_path)
    target: SharedMemoryStore = make_store()
    target.add_group_member("crew", "alice")
    target.remember("already here", "group", agent_id="alice", group_id="crew")
    before = rows_of(target)
    with pytest.raises(ImportFormatError, match=rf"line \d+: {table} row: "):
        target.import_(io.StringIO(with_row(lines, table, change, drop)))
    assert rows_of(target) == before


def test_another_dimension_is_refused_before_anything_is_written(make_store: StoreFactory, tmp_path: Path) -> None:
    _, lines = populated(make_store, tmp_path)
    bad = [json.loads(line) for line in lines]
    for item in bad:
        if item.get("table") == "meta" and item["row"]["key"] == "embedding_dim":
            item["row"]["value"] = "999"
    text = "\n".join(json.dumps(item) for item in bad) + "\n"
    for target in (make_store(), make_store()):
        target.add_group_member("crew", "alice")
        target.remember("already here", "group", agent_id="alice", group_id="crew")
        before = rows_of(target)
        with pytest.raises(ImportModelError, match="embedding_dim '999'"):
            target.import_(io.StringIO(text))
        assert rows_of(target) == before
        target.remember("still writable", "group", agent_id="alice", group_id="crew")


def test_a_file_cut_short_is_refused_and_changes_nothing(make_store: StoreFactory, tmp_path: Path) -> None:
    _, lines = populated(make_store, tmp_path)
    target: SharedMemoryStore = make_store()
    for cut in (len(lines) - 1, len(lines) // 2, 2):  # the end line lost; half the rows; all but one
        with pytest.raises(ImportFormatError, match="cut short"):
            target.import_(io.StringIO("\n".join(lines[:cut]) + "\n"))
    with pytest.raises(ImportFormatError, match="after the export's end line"):
        target.import_(io.StringIO("\n".join([*lines, lines[1]]) + "\n"))
    with pytest.raises(ImportFormatError, match="a second header"):
        target.import_(io.StringIO("\n".join([lines[0], *lines]) + "\n"))
    with pytest.raises(ImportFormatError, match="counts 99 rows"):
        target.import_(io.StringIO("\n".join([*lines[:-1], '{"type": "end", "rows": 99}']) + "\n"))
    assert rows_of(target) == []
    # a version 1 file (written before the end line) still imports
    old = [lines[0].replace('"version": 2', '"version": 1'), *lines[1:-1]]
    assert target.import_(io.StringIO("\n".join(old) + "\n")).inserted == len(lines) - 2


def test_an_old_export_never_brings_back_a_fact_the_store_purged(make_store: StoreFactory, tmp_path: Path) -> None:
    store: SharedMemoryStore = make_store()
    secret = store.remember("The admin password is hunter2", "global")
    kept = store.remember("The office opens at nine", "global")
    backup = tmp_path / "backup.jsonl"
    store.export(backup)
    store.forget(secret.id, "a secret")
    assert store.import_(backup).closed == 0  # still forgotten: a closed fact is never reopened
    assert store.purge(0) == 1
    report = store.import_(backup)
    assert report.purged == 1 and report.inserted == 0
    with pytest.raises(FactNotFoundError):
        store.get(secret.id)
    assert secret.id not in {h.id for h in store.search("admin password", "global")}
    assert store.get(kept.id).status == "active"
    assert [e.event for e in store.history(secret.id)] == ["created", "forgotten", "purged"]
    other: SharedMemoryStore = make_store()  # a store that never purged it takes it, forgotten
    assert other.import_(backup).purged == 0 and other.get(secret.id).status == "active"


def test_a_later_export_brings_the_approval_of_a_held_fact(make_store: StoreFactory, tmp_path: Path) -> None:
    src: SharedMemoryStore = make_store(review_global_writes=True, global_writers=["lead"])
    src.add_group_member("crew", "mallory")
    held = src.remember("refunds need a receipt", "global", agent_id="mallory")
    first, later = tmp_path / "first.jsonl", tmp_path / "later.jsonl"
    src.export(first)
    dst: SharedMemoryStore = make_store(review_global_writes=True, global_writers=["lead"])
    dst.import_(first)
    assert dst.get(held.id).status == "pending"
    src.approve(held.id, agent_id="lead")
    src.export(later)
    assert dst.import_(later).updated == 1
    assert dst.get(held.id).status == "active"
    assert held.id in {h.id for h in dst.search("refunds need a receipt", agent_id="lead")}
    assert [e.event for e in dst.history(held.id)] == ["created", "approved"]


def test_two_exports_to_one_path_never_mix(make_store: StoreFactory, tmp_path: Path) -> None:
    stores = [make_store() for _ in range(2)]
    for i, s in enumerate(stores):
        s.remember_many([f"store {i} fact {j} about the export race" for j in range(40 * (i + 1))], "global")
    path = tmp_path / "same.jsonl"
    errors: list[BaseException] = []

    def export(s: SharedMemoryStore) -> None:
        try:
            for _ in range(5):
                s.export(path)
        except BaseException as exc:  # pragma: no cover - the failure this test looks for
            errors.append(exc)

    threads = [threading.Thread(target=export, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[-1]) == {"type": "end", "rows": len(lines) - 2}
    assert make_store().import_(path).inserted == len(lines) - 2
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_parsing_a_row_either_refuses_it_or_gives_columns_of_their_types(data: st.DataObject) -> None:
    # the check is total: any value in any column is an ImportFormatError or a row the tables can hold
    from autogen_shared_memory.transfer import _SPECS

    table = data.draw(st.sampled_from(sorted(_SPECS)))
    spec = _SPECS[table]
    scope = {"kind": "global", "owner": ""}
    base: dict[str, Any] = {c: None for c in spec.columns}
    column = data.draw(st.sampled_from([*spec.columns, "extra"]))
    base[column] = data.draw(json_values)
    line = json.dumps({"type": "row", "scope": scope, "table": table, "row": base})
    try:
        parsed = _parse(1, line)
    except ImportFormatError:
        return
    assert not isinstance(parsed, dict)
    _, _, row = parsed
    for name, value in row.items():
        want = spec.columns[name]
        assert value is None or isinstance(value, (int, float) if want is float else want)
        assert not isinstance(value, bool)
    for name in spec.not_null:
        assert row.get(name) is not None


def test_a_store_s_own_export_imports_whatever_restatements_added(make_store: StoreFactory, tmp_path: Path) -> None:
    # restatements merged their tags without the per-write limit of 32 before it applied to them too, and
    # stores before the invisible-text rule kept a Hangul filler as content: the import check refused such a
    # store's own backup, whole
    src: SharedMemoryStore = make_store()
    fact = src.remember("The runbook lives in the wiki", "global", tags=[f"a{i}" for i in range(20)])
    lines = list(export_lines(src))
    forty = [f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)]  # as an older store merged them
    rows = [json.loads(line) for line in lines]
    for row in rows:
        if row.get("table") == "facts" and row["row"]["id"] == fact.id:
            row["row"]["tags"] = json.dumps(forty)
    lines = [json.dumps(row) for row in rows]
    filler = json.loads(lines[-2] if '"facts"' in lines[-2] else next(x for x in lines if '"table": "facts"' in x))
    filler["row"] = {**filler["row"], "id": "w_" + "f" * 20, "content": "\u3164"}  # as an older store kept it
    text = "\n".join([*lines[:-1], json.dumps(filler), json.dumps({"type": "end", "rows": len(lines) - 1})])
    target: SharedMemoryStore = make_store()
    assert target.import_(io.StringIO(text + "\n")).inserted == len(lines) - 1
    assert len(target.get(fact.id).tags) == 40 and target.get("w_" + "f" * 20).content == "\u3164"


def test_a_fact_held_here_is_closed_whatever_purge_events_came_with_imports(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    # A purged event imported from a store that purged X (expired there) must not stop a later export, where
    # X was forgotten, from closing the X this store still holds: it was skipped as "purged here".
    import time

    a: SharedMemoryStore = make_store()
    fact = a.remember("The office opens at nine", "global", ttl_days=1 / 86400)  # one second
    first, purged, later = tmp_path / "first.jsonl", tmp_path / "purged.jsonl", tmp_path / "later.jsonl"
    a.export(first)
    b: SharedMemoryStore = make_store()
    d: SharedMemoryStore = make_store()
    for s in (b, d):
        s.import_(first)
        s.remember("The office opens at nine", "global")  # restated without a ttl: it lives on here
    time.sleep(1.2)
    assert a.purge(0) == 1
    a.export(purged)
    assert b.import_(purged).purged == 0 and b.get(fact.id).status == "active"  # and b holds its purged event
    d.forget(fact.id, "the office moved")
    d.export(later)
    report = b.import_(later)
    assert (report.closed, report.purged) == (1, 0) and b.get(fact.id).status == "forgotten"


def test_an_export_file_gets_the_mode_of_any_new_file(make_store: StoreFactory, tmp_path: Path) -> None:
    import os

    mask = os.umask(0o022)
    try:
        store: SharedMemoryStore = make_store()
        store.remember("x", "global")
        path = tmp_path / "backup.jsonl"
        store.export(path)
        assert path.stat().st_mode & 0o777 == 0o644  # mkstemp made it 0600: hidden from a backup job
        path.chmod(0o640)
        store.export(path)  # replaced (as --force does): a new file's mode again, never 0600
        assert path.stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(mask)


def test_a_later_export_carries_a_withdrawal_and_a_restatement_after_it(make_store: StoreFactory) -> None:
    """A withdrawal made after a first import never reached the target (its stated_by only ever grew), and
    an agent that withdrew and later said the fact again was left out for good."""

    def copy(store: SharedMemoryStore) -> io.StringIO:
        return io.StringIO("\n".join(export_lines(store)) + "\n")

    source: SharedMemoryStore = make_store()
    target: SharedMemoryStore = make_store()
    for agent in ("alice", "bob"):
        source.add_group_member("crew", agent)
    fact = source.remember("The launch is on March 3", "group", agent_id="alice", group_id="crew")
    source.remember("The launch is on March 3", "group", agent_id="bob", group_id="crew")
    target.import_(copy(source))
    source.forget_all("group", agent_id="alice", group_id="crew")
    target.import_(copy(source))
    assert target.get(fact.id).stated_by == ("bob",)
    time.sleep(0.01)
    source.remember("The launch is on March 3", "group", agent_id="alice", group_id="crew")
    target.import_(copy(source))
    assert target.get(fact.id).stated_by == ("bob", "alice") == source.get(fact.id).stated_by
    fresh: SharedMemoryStore = make_store()
    fresh.import_(copy(source))
    assert fresh.get(fact.id).stated_by == ("bob", "alice")


def test_a_line_nested_too_deeply_is_a_format_error() -> None:
    line = (
        '{"type": "row", "scope": {"kind": "global"}, "table": "facts", "row": ' + "[" * 100_000 + "]" * 100_000 + "}"
    )
    with pytest.raises(ImportFormatError, match="line 2: JSON nested too deeply"):
        _parse(2, line)


def test_an_export_removes_what_an_export_killed_part_way_left(make_store: StoreFactory, tmp_path: Path) -> None:
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f".backup.jsonl.{int(dead.stdout)}.0123456789abcdef.tmp"  # kill -9 mid-export
    left.write_text('{"type": "header"}\n')
    alive = tmp_path / f".backup.jsonl.{os.getpid()}.fedcba9876543210.tmp"  # an export under way here
    alive.write_text("")
    s: SharedMemoryStore = make_store()
    s.remember("The launch is on March 3", "global")
    s.export(tmp_path / "backup.jsonl")
    assert not left.exists() and alive.exists()
