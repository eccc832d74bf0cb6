"""What an import refuses, on every backend: a row with a bad column, a file cut short, vectors of another
dimension; what it never does: bring back a fact the store purged; and what a later export brings: the
approval of a held fact. A refused import changes nothing."""

from __future__ import annotations

import io
import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.settings import WritePolicy
from autogen_shared_memory.testing.conformance import _export_is_consistent
from autogen_shared_memory.testing.conformance import _populated as populated
from autogen_shared_memory.transfer import ImportFormatError, ImportModelError, _parse, export_lines

StoreFactory = Any


def rows_of(store: SharedMemoryStore) -> list[str]:
    """Every row of the store as export lines (sorted), without the header and end lines."""
    return sorted(list(export_lines(store))[1:-1])


def test_another_dimension_is_refused_before_anything_is_written(make_store: StoreFactory, tmp_path: Path) -> None:
    _, lines = populated(make_store, tmp_path)
    bad = [json.loads(line) for line in lines]
    for item in bad:
        if item.get("table") == "meta" and item["row"]["key"] == "embedding_dim":
            item["row"]["value"] = "999"
    text = "\n".join(json.dumps(item) for item in bad) + "\n"
    for target in (make_store(), make_store()):
        target.operator.add_member("crew", "alice")
        target.as_agent("alice", "crew").remember("already here", "group")
        before = rows_of(target)
        with pytest.raises(ImportModelError, match="embedding_dim '999'"):
            target.import_(io.StringIO(text))
        assert rows_of(target) == before
        target.as_agent("alice", "crew").remember("still writable", "group")


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
    assert target.import_(io.StringIO("\n".join(old) + "\n"), policy=True).inserted == len(lines) - 2


def test_a_later_export_brings_the_approval_of_a_held_fact(make_store: StoreFactory, tmp_path: Path) -> None:
    src: SharedMemoryStore = make_store(policy=WritePolicy(review_global_writes=True, global_writers=["lead"]))
    src.operator.add_member("crew", "mallory")
    held = src.as_agent("mallory").remember("refunds need a receipt", "global")
    first, later = tmp_path / "first.jsonl", tmp_path / "later.jsonl"
    src.export(first)
    dst: SharedMemoryStore = make_store(policy=WritePolicy(review_global_writes=True, global_writers=["lead"]))
    dst.import_(first, policy=True)
    assert dst.operator.get(held.id).status == "pending"
    src.as_agent("lead").approve(held.id)
    src.export(later)
    assert dst.import_(later).updated == 1
    assert dst.operator.get(held.id).status == "active"
    assert held.id in {h.id for h in dst.as_agent("lead").search("refunds need a receipt")}
    assert [e.event for e in dst.operator.history(held.id)] == ["created", "approved"]


def test_two_exports_to_one_path_never_mix(make_store: StoreFactory, tmp_path: Path) -> None:
    stores = [make_store() for _ in range(2)]
    for i, s in enumerate(stores):
        s.operator.remember_many([f"store {i} fact {j} about the export race" for j in range(40 * (i + 1))], "global")
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


def valid_row(table: str) -> dict[str, Any]:
    """A row of ``table`` an import accepts (as an export line holds it): every column set."""
    from autogen_shared_memory.transfer import _SPECS

    if table == "facts":
        return {
            "id": "w_" + "0" * 20,
            "content": "The office opens at nine",
            "created_by": "alice",
            "created_at": 1.5,
            "confidence": 0.5,
            "tags": '["ops"]',
            "category": "office",
            "metadata": '{"k": 1}',
            "session_id": "s1",
            "expires_at": 2.5,
            "supersedes": "[]",
            "superseded_by": None,
            "status": "active",
            "tombstone_by": None,
            "tombstone_at": None,
            "tombstone_reason": None,
            "reinforcement": 1,
            "content_hash": "x",
            "version": 1,
            "updated_at": 1.5,
            "stated_by": '["alice"]',
            "embedding": {"$b64": "AAAAAA=="},
        }
    if table == "audit":
        return {"fact_id": "w_" + "0" * 20, "event": "created", "actor": "alice", "at": 1.5, "detail": "{}"}
    if table == "meta":
        return {"key": "note", "value": "1"}
    spec = _SPECS[table]
    plain = {str: "x", float: 1.5, int: 1, bytes: {"$b64": "AAAAAA=="}}
    return {c: ("[]" if c in spec.json_columns else plain[t]) for c, t in spec.columns.items()}


ACCEPTED: list[str] = []  # the tables of the rows the property test saw accepted


@settings(max_examples=300, deadline=None)
@given(st.data())
def parse_a_row_with_one_column_drawn(data: st.DataObject) -> None:
    from autogen_shared_memory.transfer import _SPECS

    table = data.draw(st.sampled_from(sorted(_SPECS)))
    spec = _SPECS[table]
    scope = {"kind": "global", "owner": ""}
    base = valid_row(table)
    column = data.draw(st.sampled_from([*spec.columns, "extra"]))
    typed = {
        str: st.text(max_size=12),
        float: st.floats(allow_nan=False, allow_infinity=False) | st.integers(),
        int: st.integers(min_value=-(2**64), max_value=2**64),
    }
    base[column] = data.draw(json_values | typed.get(spec.columns.get(column, bytes), st.nothing()))
    line = json.dumps({"type": "row", "scope": scope, "table": table, "row": base})
    try:
        parsed = _parse(1, line)
    except ImportFormatError:
        event("refused")
        return
    event("accepted")
    ACCEPTED.append(table)
    assert not isinstance(parsed, dict)
    _, _, row = parsed
    for name, value in row.items():
        want = spec.columns[name]
        assert value is None or isinstance(value, (int, float) if want is float else want)
        assert not isinstance(value, bool)
        if want in (int, float) and value is not None:
            assert -(2**63) <= value < 2**63 if want is int else math.isfinite(value)
    for name in spec.not_null:
        assert row.get(name) is not None


def test_parsing_a_row_either_refuses_it_or_gives_columns_of_their_types() -> None:
    # the check is total: any value in any column is an ImportFormatError or a row the tables can hold; and
    # the property is checked on accepted rows of most tables (with every column null, none was accepted)
    for table in _storage_and_records():
        _parse(1, json.dumps({"type": "row", "scope": {"kind": "global"}, "table": table, "row": valid_row(table)}))
    ACCEPTED.clear()
    parse_a_row_with_one_column_drawn()
    assert len(ACCEPTED) >= 30 and len(set(ACCEPTED)) >= 6, ACCEPTED


def _storage_and_records() -> list[str]:
    from autogen_shared_memory.transfer import _SPECS

    return sorted(_SPECS)


def test_a_store_s_own_export_imports_whatever_restatements_added(make_store: StoreFactory, tmp_path: Path) -> None:
    # restatements merged their tags without the per-write limit of 32 before it applied to them too, and
    # stores before the invisible-text rule kept a Hangul filler as content: the import check refused such a
    # store's own backup, whole
    src: SharedMemoryStore = make_store()
    fact = src.operator.remember("The runbook lives in the wiki", "global", tags=[f"a{i}" for i in range(20)])
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
    assert len(target.operator.get(fact.id).tags) == 40 and target.operator.get("w_" + "f" * 20).content == "\u3164"


def test_a_fact_held_here_is_closed_whatever_purge_events_came_with_imports(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A purged event imported from a store that purged X (expired there) must not stop a later export, where
    # X was forgotten, from closing the X this store still holds: it was skipped as "purged here". The clock
    # is the test's: X lives a day, and the purge runs two days later, however slow the setup was.
    a: SharedMemoryStore = make_store()
    fact = a.operator.remember("The office opens at nine", "global", ttl_days=1)
    first, purged, later = tmp_path / "first.jsonl", tmp_path / "purged.jsonl", tmp_path / "later.jsonl"
    a.export(first)
    b: SharedMemoryStore = make_store()
    d: SharedMemoryStore = make_store()
    for s in (b, d):
        s.import_(first)
        s.operator.remember("The office opens at nine", "global")  # restated without a ttl: it lives on here
        assert s.operator.get(fact.id).reinforcement == 2 and s.operator.get(fact.id).expires_at is None
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 2 * 86400)
    assert a.operator.purge(0) == 1
    a.export(purged)
    assert b.import_(purged).purged == 0 and b.operator.get(fact.id).status == "active"  # and b holds its purged event
    d.operator.forget(fact.id, "the office moved")
    d.export(later)
    report = b.import_(later)
    assert (report.closed, report.purged) == (1, 0) and b.operator.get(fact.id).status == "forgotten"


def test_an_export_file_gets_the_mode_of_any_new_file(make_store: StoreFactory, tmp_path: Path) -> None:
    import os

    mask = os.umask(0o022)
    try:
        store: SharedMemoryStore = make_store()
        store.operator.remember("x", "global")
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
        source.operator.add_member("crew", agent)
    fact = source.as_agent("alice", "crew").remember("The launch is on March 3", "group")
    source.as_agent("bob", "crew").remember("The launch is on March 3", "group")
    target.import_(copy(source), policy=True)
    source.as_agent("alice", "crew").forget_all("group")
    target.import_(copy(source))
    assert target.operator.get(fact.id).stated_by == ("bob",)
    time.sleep(0.01)  # the restatement's time after the withdrawal's, even on a coarse clock (a slower machine
    # only widens the gap; equal times would fail the test, never pass it)
    source.as_agent("alice", "crew").remember("The launch is on March 3", "group")
    target.import_(copy(source))
    assert target.operator.get(fact.id).stated_by == ("bob", "alice") == source.operator.get(fact.id).stated_by
    fresh: SharedMemoryStore = make_store()
    fresh.import_(copy(source), policy=True)
    assert fresh.operator.get(fact.id).stated_by == ("bob", "alice")


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
    s.operator.remember("The launch is on March 3", "global")
    s.export(tmp_path / "backup.jsonl")
    assert not left.exists() and alive.exists()


# --------------------------------------------------------------------------- what an import may change
def edited(store: SharedMemoryStore, fact_id: str, change: dict[str, Any], drop_events: bool = True) -> io.StringIO:
    """``store``'s export with the row of ``fact_id`` changed and, with ``drop_events``, none of its audit
    events: a file that says the fact changed without the events that changed it."""
    out = []
    for line in export_lines(store):
        item = json.loads(line)
        if item.get("table") == "facts" and item["row"]["id"] == fact_id:
            item["row"].update(change)
        if drop_events and item.get("table") == "audit" and item["row"]["fact_id"] == fact_id:
            continue
        out.append(item)
    out[-1] = {"type": "end", "rows": len(out) - 2}
    return io.StringIO("".join(json.dumps(item) + "\n" for item in out))


def test_an_export_row_never_approves_a_held_fact(make_store: StoreFactory) -> None:
    store: SharedMemoryStore = make_store(policy=WritePolicy(review_global_writes=True, global_writers=["lead"]))
    store.operator.add_member("crew", "mallory")
    held = store.as_agent("mallory").remember("Refunds need no receipt", "global")
    feed = len(store.changes())
    before = rows_of(store)
    report = store.import_(edited(store, held.id, {"status": "active"}), policy=True)
    assert (report.updated, report.changes) == (0, [])
    assert store.operator.get(held.id).status == "pending" and [f.id for f in store.operator.pending()] == [held.id]
    assert rows_of(store) == before and len(store.changes()) == feed
    assert held.id not in {h.id for h in store.as_agent("lead").search("refunds receipt")}


def test_a_later_export_approves_with_its_event_and_as_of_sees_the_fact_held_until_then(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    src: SharedMemoryStore = make_store(policy=WritePolicy(review_global_writes=True, global_writers=["lead"]))
    src.operator.add_member("crew", "mallory")
    held = src.as_agent("mallory").remember("Refunds need a receipt", "global")
    first = tmp_path / "first.jsonl"
    src.export(first)
    dst: SharedMemoryStore = make_store(policy=WritePolicy(review_global_writes=True, global_writers=["lead"]))
    dst.import_(first, policy=True)
    # A moment strictly between the fact's creation and its approval, even on a coarse clock (checked below:
    # a moment before the fact existed would find nothing as well).
    time.sleep(0.05)
    while_held = time.time()
    time.sleep(0.05)
    src.as_agent("lead").approve(held.id)
    seen = len(dst.changes())
    report = dst.import_(io.StringIO("\n".join(export_lines(src)) + "\n"))
    assert report.changes == [f"global: fact {held.id} approved by lead"] and report.updated == 1
    assert [c.event for c in dst.changes()][seen:] == ["approved"]  # the change feed sees it
    assert dst.operator.pending() == []
    assert held.id in {h.id for h in dst.as_agent("lead").search("refunds need a receipt")}
    assert dst.operator.get(held.id).created_at < while_held
    assert held.id not in {h.id for h in dst.operator.search("refunds need a receipt", as_of=while_held)}


def test_an_export_row_never_closes_co_authors_or_extends_a_fact(make_store: StoreFactory) -> None:
    store: SharedMemoryStore = make_store(policy=WritePolicy(global_writers=["*"]))
    fact = store.as_agent("alice").remember("The deploy freeze starts Friday", "global", ttl_days=3, tags=["ops"])
    other = store.as_agent("bob").remember("Badges are blue", "global")
    before, feed = rows_of(store), len(store.changes())
    forged = [
        {"status": "forgotten", "tombstone_by": "mallory", "tombstone_at": 1.0, "tombstone_reason": "forged"},
        {"stated_by": json.dumps(["alice", "mallory"]), "reinforcement": 50},
        {"tags": json.dumps(["ops", "urgent"]), "expires_at": None, "confidence": 1.0, "category": "x"},
        {"metadata": json.dumps({"owner": "mallory"})},
    ]
    for change in forged:
        report = store.import_(edited(store, fact.id, change))
        assert (report.closed, report.updated, report.changes) == (0, 0, [])
    assert rows_of(store) == before and len(store.changes()) == feed
    kept = store.operator.get(fact.id)
    assert (kept.status, kept.stated_by, kept.reinforcement, kept.tags) == ("active", ("alice",), 1, ("ops",))
    # a row whose id is another fact here (other content or author) is refused whole, with its line
    for change in ({"content": "The deploy freeze is cancelled"}, {"created_by": "mallory"}):
        with pytest.raises(ImportFormatError, match=rf"line \d+: fact {other.id} is another fact in global"):
            store.import_(edited(store, other.id, change, drop_events=False))
    assert rows_of(store) == before


def test_every_change_an_import_makes_to_a_fact_here_has_its_event_and_is_reported(
    make_store: StoreFactory,
) -> None:
    def copy(store: SharedMemoryStore) -> io.StringIO:
        return io.StringIO("\n".join(export_lines(store)) + "\n")

    a: SharedMemoryStore = make_store(policy=WritePolicy(global_writers=["*"]))
    b: SharedMemoryStore = make_store(policy=WritePolicy(global_writers=["*"]))
    said = a.as_agent("alice").remember("The build uses Bazel", "global", ttl_days=2)
    gone = a.as_agent("alice").remember("The VPN password rotates monthly", "global")
    b.import_(copy(a))
    a.as_agent("bob").remember("The build uses Bazel", "global", ttl_days=1)  # another author: counted only
    a.as_agent("alice").remember("The build uses Bazel", "global", tags=["ci"])  # the author: no expiry now
    a.operator.forget(gone.id, "rotated weekly now")
    seen = len(b.changes())
    report = b.import_(copy(a))
    assert report.changes == [
        f"global: fact {said.id} restated by bob",
        f"global: fact {said.id} restated by alice",
        f"global: fact {gone.id} closed (forgotten by system)",
    ]
    assert (report.updated, report.closed) == (1, 1)
    assert [(c.fact_id, c.event) for c in b.changes()][seen:] == [
        (said.id, "reinforced"),
        (said.id, "reinforced"),
        (gone.id, "forgotten"),
    ]
    for field in ("reinforcement", "stated_by", "tags", "expires_at", "status"):
        assert getattr(b.operator.get(said.id), field) == getattr(a.operator.get(said.id), field), field
    assert (b.operator.get(gone.id).tombstone_reason, b.operator.get(gone.id).tombstone_by) == (
        "rotated weekly now",
        "system",
    )
    assert b.import_(copy(a)).changes == []  # repeated: nothing more


# --------------------------------------------------------------------------- access policy
def test_membership_and_privacy_are_imported_only_when_asked_and_listed(make_store: StoreFactory) -> None:
    src: SharedMemoryStore = make_store()
    src.operator.add_member("crew", "mallory")
    src.as_agent("mallory", "crew").remember("The launch is on March 3", "group")
    src.operator.set_private("mallory")
    src.as_agent("mallory").remember("my notes", "agent")
    text = "\n".join(export_lines(src)) + "\n"
    target: SharedMemoryStore = make_store()
    target.operator.remember("already here", "global")
    before = rows_of(target)
    with pytest.raises(ImportFormatError, match=r"line \d+: the export sets access policy \(") as refused:
        target.import_(io.StringIO(text))
    assert "policy=True" in str(refused.value)
    assert rows_of(target) == before and not target.operator.members("crew")
    report = target.import_(io.StringIO(text), policy=True)
    assert sorted(report.changes) == [
        "agent:mallory: policy set: private (closed to other agents' reads)",
        "group:crew: policy set: member 'mallory'",
    ]
    assert target.operator.members("crew") == {"mallory"} and target.engine.access.is_private("mallory")
    assert target.import_(io.StringIO(text)).changes == []  # already set here: nothing to ask for


def test_an_import_never_creates_a_scope_for_the_operator_id(make_store: StoreFactory) -> None:
    src: SharedMemoryStore = make_store(policy=WritePolicy(operator_id="root"))
    src.as_agent("system").remember("I am not the operator elsewhere", "agent")
    text = "\n".join(export_lines(src)) + "\n"
    target: SharedMemoryStore = make_store()  # operator_id "system"
    for policy in (False, True):
        with pytest.raises(ImportFormatError, match=r"line 2: agent:system is the scope of this store's operator_id"):
            target.import_(io.StringIO(text), policy=policy)
    assert rows_of(target) == [] and target.backend.scopes() == []


# --------------------------------------------------------------------------- a snapshot per scope
def _write_while_exported(place: tuple[str, ...], stop: str) -> None:
    from test_feed import open_place

    store = open_place(place)
    i = 0
    while not os.path.exists(stop):
        fact = store.operator.remember(f"written by the other process {i}", "global")
        store.operator.forget(fact.id, "churn")
        i += 1
    store.close()


@pytest.mark.processes
def test_an_export_taken_while_another_process_writes_is_consistent(make_store: StoreFactory, tmp_path: Path) -> None:
    import multiprocessing as mp

    from test_feed import place_of

    store: SharedMemoryStore = make_store(policy=WritePolicy(global_writers=["*"]))
    store.operator.remember_many([f"fact number {i} before the export" for i in range(2500)], "global")
    stop = tmp_path / "stop"
    writer = mp.get_context("spawn").Process(target=_write_while_exported, args=(place_of(store), str(stop)))
    writer.start()
    try:
        start = len(store.changes())
        deadline = time.monotonic() + 120
        while len(store.changes()) < start + 10 and time.monotonic() < deadline:  # the writer is writing
            time.sleep(0.05)
        for _ in range(3):
            assert _export_is_consistent(list(export_lines(store))) == (0, 0)
        assert len(store.changes()) > start + 20  # it wrote during the exports
    finally:
        stop.touch()
        writer.join(timeout=60)


# --------------------------------------------------------------------------- files that are not exports
@pytest.mark.sqlite_only
def test_an_export_never_takes_the_name_of_a_scope_file(make_store: StoreFactory) -> None:
    store: SharedMemoryStore = make_store()
    store.operator.remember("The office opens at nine", "global")
    root = Path(store.root)
    for name in ("agent_newbie.db", "group_crew.db", "global.db-wal", "agent_x.db-journal"):
        existed = (root / name).exists()  # the WAL of global.db: it is there
        with pytest.raises(FileExistsError, match="a scope's file"):
            store.export(root / name)
        assert (root / name).exists() == existed and not list(root.glob("*.tmp"))
    store.as_agent("newbie").remember("my first note", "agent")  # its file is still free
    store.export(root / "backup.jsonl")  # another name in the store's directory is fine
    assert store.import_(root / "backup.jsonl").inserted == 0


def test_a_line_longer_than_the_limit_is_refused_with_its_number(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    import autogen_shared_memory.transfer as transfer

    src: SharedMemoryStore = make_store()
    src.operator.remember("The office opens at nine", "global")
    lines = list(export_lines(src))
    monkeypatch.setattr(transfer, "MIN_LINE_CHARS", 0)
    limit = transfer.max_line_chars(src)
    long = '{"type": "row", "x": "' + "a" * limit + '"}'
    target: SharedMemoryStore = make_store()
    with pytest.raises(ImportFormatError, match=rf"line 2: longer than {limit} characters"):
        target.import_(io.StringIO("\n".join([lines[0], long, *lines[1:]]) + "\n"))
    assert target.import_(io.StringIO("\n".join(lines) + "\n")).inserted == len(lines) - 2


@pytest.mark.sqlite_only
def test_the_cli_refuses_to_import_a_device_or_a_pipe(make_store: StoreFactory, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autogen_shared_memory.cli import app

    store: SharedMemoryStore = make_store()
    store.operator.remember("The office opens at nine", "global")
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    for source in ("/dev/zero", str(fifo)):
        result = CliRunner().invoke(app, ["--root", str(store.root), "import", source])
        assert result.exit_code == 1 and result.stdout == "", result.stdout
        assert result.stderr.strip().splitlines() == [
            f"error: {source} is not a regular file (a device, a pipe or a socket): import reads an export file"
        ]
