"""Per-agent records, tasks, the shared profile and directory, the case log, the state store, transfer."""

from __future__ import annotations

import base64
import io
import json
import multiprocessing as mp
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import SingleThreadedAgentRuntime

from autogen_shared_memory import MemoryAccessDenied, SharedMemoryStore
from autogen_shared_memory.settings import WritePolicy
from autogen_shared_memory.testing import HashEmbedder
from autogen_shared_memory.testing.conformance import _populate
from autogen_shared_memory.transfer import ImportFormatError
from autogen_shared_memory.views.agents import TaskNotFoundError, UnknownAgentError
from autogen_shared_memory.views.caselog import CheckpointError
from autogen_shared_memory.views.state import (
    ConversationStateStore,
    InMemoryConversationStateStore,
)


def raw_sql(store: SharedMemoryStore, group: str, statement: str) -> None:
    """Run SQL directly against the group's storage, bypassing the library (to test the database's guards)."""
    from autogen_shared_memory.backends.sqlite import SQLiteBackend

    if isinstance(store.backend, SQLiteBackend):
        with sqlite3.connect(store.root / f"group_{group}.db") as conn:
            conn.execute(statement.format(case_log="case_log"))
        return
    if type(store.backend).__name__ == "InMemoryBackend":
        pytest.skip("in-process backend: no SQL runs around the library, so there is no database guard to test")
    import psycopg

    backend = store.backend
    with psycopg.connect(backend.dsn, autocommit=True) as conn:  # type: ignore[attr-defined]
        conn.execute(statement.format(case_log=f"{backend.schema}.asm_case_log"))  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------ AgentMemory


def test_own_records_and_insights(store: SharedMemoryStore) -> None:
    alice = store.for_agent("alice", "crew")
    alice.log_conversation("user", "please index the Q3 sales report", {"task": "index"})
    alice.log_tool_call("index_pdf", {"path": "q3.pdf"}, "45 chunks", True, 812.5)
    alice.log_tool_call("index_pdf", {"path": "bad.pdf"}, None, False, 3.0, error="OCR failed")
    history = alice.get_my_tool_history()
    assert [(h.success, h.error) for h in history] == [(False, "OCR failed"), (True, None)]
    assert alice.get_my_tool_history("nope") == []
    r = alice.store_insight("quality", "q3.pdf has poor OCR quality", source="observed_pattern")
    alice.store_insight("preference", "User wants summaries as bullet points", source="user_correction")
    fact = store.operator.get(r.id)
    assert (fact.scope.kind, fact.owner, fact.category, fact.metadata["source"]) == (
        "agent",
        "alice",
        "quality",
        "observed_pattern",
    )
    assert [f.content for f in alice.get_my_insights("quality")] == ["q3.pdf has poor OCR quality"]
    assert len(alice.get_my_insights()) == 2
    store.as_agent("alice").remember("a plain note, not an insight", "agent")
    assert len(alice.get_my_insights()) == 2  # insights are the categorised facts


def test_cross_agent_insights_and_errors(store: SharedMemoryStore) -> None:
    store.for_agent("doc").store_insight("quality", "sales_report.pdf has 45 indexed chunks")
    gaia = store.for_agent("gaia")
    assert [f.content for f in gaia.get_agent_insights("doc")] == ["sales_report.pdf has 45 indexed chunks"]
    with pytest.raises(UnknownAgentError, match="'ghost'"):
        gaia.get_agent_insights("ghost")
    store.operator.set_private("doc")
    with pytest.raises(MemoryAccessDenied, match="private"):
        gaia.get_agent_insights("doc")


def test_search_all_conversations(store: SharedMemoryStore) -> None:
    store.for_agent("alice").log_conversation("assistant", "The staging deploy failed at 3pm")
    store.for_agent("bob").log_conversation("assistant", "I restarted the staging deploy")
    store.for_agent("bob").log_conversation("assistant", "lunch order placed")
    me = store.for_agent("carol")
    found = me.search_all_conversations("staging deploy")
    assert {r.agent_id for r in found} == {"alice", "bob"}
    assert [r.content for r in me.search_all_conversations("deploy", agent_id="bob")] == [
        "I restarted the staging deploy"
    ]
    assert me.search_all_conversations("") == []
    with pytest.raises(UnknownAgentError):
        me.search_all_conversations("x", agent_id="nobody")


def test_user_profile_is_shared_and_json(store: SharedMemoryStore) -> None:
    store.for_agent("gaia").update_user_profile("reply_style", "concise", confidence=0.8)
    store.for_agent("email").update_user_profile("timezone", {"tz": "Europe/Paris", "dst": True})
    entry = store.for_agent("calendar").get_user_profile("reply_style")
    assert entry is not None and (entry.value, entry.source_agent, entry.confidence) == ("concise", "gaia", 0.8)
    profile = store.for_agent("calendar").get_user_profile()
    assert isinstance(profile, dict) and profile["timezone"].value == {"tz": "Europe/Paris", "dst": True}
    with pytest.raises(TypeError, match="JSON"):
        store.for_agent("gaia").update_user_profile("bad", object())
    with pytest.raises(ValueError, match="limit"):
        store.for_agent("gaia").update_user_profile("huge", "x" * 70_000)
    assert store.for_agent("gaia").get_user_profile("bad") is None
    assert len(store.for_agent("x").get_user_profile()) == 2  # type: ignore[arg-type]


def test_agent_directory(store: SharedMemoryStore) -> None:
    doc = store.for_agent("doc_agent")
    doc.register(display_name="DocAgent", capabilities=["pdf", "ocr"], model="gpt-x", status="active")
    store.for_agent("web").register(capabilities=["browse"], status="idle")
    assert [a.agent_id for a in doc.list_agents()] == ["doc_agent", "web"]
    assert [a.agent_id for a in doc.list_agents("idle")] == ["web"]
    assert doc.get_agent_capabilities("doc_agent") == ["pdf", "ocr"]
    doc.register(status="unavailable")  # a partial update keeps the other fields
    info = doc.get_agent("doc_agent")
    assert (info.display_name, info.model, info.status) == ("DocAgent", "gpt-x", "unavailable")
    with pytest.raises(UnknownAgentError):
        doc.get_agent_capabilities("nobody")
    with pytest.raises(ValueError, match="status"):
        doc.list_agents("sleeping")


def test_tasks_lifecycle_and_result_fact(store: SharedMemoryStore) -> None:
    lead, alice = store.for_agent("lead", "crew"), store.for_agent("alice", "crew")
    task = lead.create_task("Summarise the Q3 report", assignee="bob", context={"doc": "q3.pdf"})
    assert (task.status, task.agent_id, task.created_by) == ("assigned", "bob", "lead")
    task = lead.assign_task(task.id, "alice")
    assert alice.list_tasks(assigned_to="alice")[0].id == task.id
    assert alice.update_task_status(task.id, "in_progress").status == "in_progress"
    with pytest.raises(MemoryAccessDenied, match="assigned to 'alice'"):
        lead.complete_task(task.id, "done by lead")
    done = alice.complete_task(task.id, {"summary": "Revenue up 12%", "pages": 4})
    assert done.status == "completed" and done.completed_at is not None and done.fact_id
    fact = store.operator.get(done.fact_id)
    assert fact.scope.kind == "group" and fact.category == "task_result" and "Revenue up 12%" in fact.content
    assert fact.metadata["task_id"] == task.id and fact.created_by == "alice"
    with pytest.raises(ValueError, match="already completed"):
        alice.complete_task(task.id, "again")
    with pytest.raises(ValueError, match="already completed"):
        lead.update_task_status(task.id, "blocked")
    with pytest.raises(ValueError, match="complete_task"):
        lead.update_task_status(task.id, "completed")  # type: ignore[arg-type]
    long = lead.create_task("Translate the brief", assignee="alice")
    result = "日本語の要約。" * 1500  # 31,500 bytes in 10,500 characters: a cut by characters was 3x too long
    done = alice.complete_task(long.id, result)
    assert done.status == "completed" and alice.get_task(long.id).result == result
    fact = store.operator.get(done.fact_id or "")
    assert len(fact.content.encode()) <= store.policy.max_fact_bytes // 2 and "[truncated from" in fact.content
    with pytest.raises(TaskNotFoundError):
        lead.get_task("k_nope")
    with pytest.raises(UnknownAgentError, match="not a member"):
        lead.create_task("x", assignee="stranger")
    with pytest.raises(MemoryAccessDenied):
        store.for_agent("stranger", "crew").list_tasks()
    with pytest.raises(TypeError, match="JSON"):
        lead.create_task("bad context", context={"x": object()})
    solo = store.for_agent("solo")
    own = solo.create_task("personal errand")
    assert solo.complete_task(own.id, "ok").status == "completed"
    assert store.operator.get(solo.get_task(own.id).fact_id or "").scope.kind == "agent"
    with pytest.raises(ValueError, match="only create tasks for itself"):
        solo.create_task("x", assignee="other")


# ------------------------------------------------------------------------------------------ case log


def test_case_log_append_read_checkpoint_resume(store: SharedMemoryStore) -> None:
    alice, bob = store.as_agent("alice", "crew").case_log(), store.as_agent("bob", "crew").case_log()
    first = alice.append("Customer reports login failures since 09:00")
    assert len(first.ids) == 1 and first.context_version == 1
    batch = bob.append(["Root cause: expired SSO certificate", "Certificate renewed at 10:15"])
    assert batch.context_version == 3 and alice.version == 3
    entries = alice.entries()
    assert [e.version for e in entries] == [1, 2, 3] and entries[0].author == "alice"
    assert entries[0].session_id == store.engine.session_id
    assert alice.checkpoint(first.ids[0]) is not None
    assert [e.summary for e in alice.resume()] == [
        "Root cause: expired SSO certificate",
        "Certificate renewed at 10:15",
    ]
    alice.checkpoint()
    assert alice.resume() == []
    assert bob.last_checkpoint() is None and len(bob.resume()) == 3
    with pytest.raises(CheckpointError, match="no entry 'c_missing'"):
        alice.checkpoint("c_missing")
    with pytest.raises(CheckpointError):
        alice.entries(after="c_missing")


def test_case_log_reconcile_current_view_and_search(store: SharedMemoryStore) -> None:
    log = store.as_agent("alice", "crew").case_log()
    a = log.append("Refund approved: 120 EUR").ids[0]
    b = store.as_agent("bob", "crew").case_log().append("Refund approved: 150 EUR").ids[0]
    fix = log.append([{"summary": "Refund is 150 EUR (reconciled)", "supersedes": [a, b]}]).ids[0]
    assert len(log.entries()) == 3  # full history
    assert [e.id for e in log.entries(current=True)] == [fix]
    hits = log.search("refund amount")
    assert [h.id for h in hits] == [fix]
    assert {h.id for h in log.search("refund amount", include_superseded=True)} == {a, b, fix}
    with pytest.raises(CheckpointError, match="cannot supersede"):
        log.append([{"summary": "x", "supersedes": ["c_nope"]}])


def test_case_log_bad_input_writes_nothing(store: SharedMemoryStore) -> None:
    log = store.as_agent("alice", "crew").case_log()
    with pytest.raises(ValueError, match="at most 512"):
        log.append(["fine", "x" * 513])
    with pytest.raises(ValueError, match="1 to 20"):
        log.append([f"entry {i}" for i in range(21)])
    with pytest.raises(ValueError, match="1 to 20"):
        log.append([])
    with pytest.raises(ValueError, match="non-empty"):
        log.append("   ")
    assert log.version == 0
    with pytest.raises(MemoryAccessDenied, match="not a member"):
        store.as_agent("mallory", "crew").case_log().append("I was here")


def test_case_log_is_append_only_in_the_database(store: SharedMemoryStore) -> None:
    store.as_agent("alice", "crew").case_log().append("an entry")
    with pytest.raises(Exception, match="append-only"):
        raw_sql(store, "crew", "UPDATE {case_log} SET summary = 'rewritten'")
    with pytest.raises(Exception, match="append-only"):
        raw_sql(store, "crew", "DELETE FROM {case_log}")
    with pytest.raises(ValueError, match="append-only"):
        store.backend.delete_records(store.engine.scope_ref("group", group_id="crew"), "case_log")
    assert store.as_agent("bob", "crew").case_log().entries()[0].summary == "an entry"


def _append_worker(root: str, proc: int, n: int, out: Any) -> None:
    store = SharedMemoryStore(root, embedder=HashEmbedder())
    log = store.as_agent(f"p{proc}", "crew").case_log()
    results = []
    i = 0
    while i < n:
        size = 1 + (i % 3)
        res = log.append([f"process {proc} entry {j}" for j in range(i, min(n, i + size))])
        results.append((list(res.ids), res.context_version))
        i += size
    out.put((proc, results))


def test_concurrent_appends_from_processes_lose_nothing(tmp_path: Path) -> None:
    store = SharedMemoryStore(tmp_path, embedder=HashEmbedder())
    for p in range(4):
        store.operator.add_member("crew", f"p{p}")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_append_worker, args=(str(tmp_path), p, 30, out)) for p in range(4)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=240) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    entries = store.as_agent("p0", "crew").case_log().entries()
    assert len(entries) == 120 and len({e.id for e in entries}) == 120
    versions = [e.version for e in entries]
    assert versions == sorted(versions) and len(set(versions)) == 120
    by_id = {e.id: e for e in entries}
    for proc, appends in results.items():
        mine = [by_id[i] for ids, _ in appends for i in ids]
        assert [e.summary for e in mine] == [f"process {proc} entry {j}" for j in range(30)]  # order kept
        for ids, version in appends:  # the context version is the batch's last entry
            assert by_id[ids[-1]].version == version
            assert [by_id[i].version for i in ids] == list(range(version - len(ids) + 1, version + 1))


def test_agent_memory_search_spans_own_memory_and_case_log(store: SharedMemoryStore) -> None:
    alice = store.for_agent("alice", "crew")
    alice.store_insight("ops", "the payment gateway times out under load")
    alice.case_log.append("Incident 42: payment gateway outage, mitigated by failover")
    store.for_agent("bob").store_insight("ops", "bob thinks the payment gateway needs a retry budget")
    hits = alice.search("payment gateway")
    assert {h.content for h in hits} == {
        "the payment gateway times out under load",
        "Incident 42: payment gateway outage, mitigated by failover",
    }
    wider = alice.search("payment gateway", include_agents=["bob"])
    assert "bob thinks the payment gateway needs a retry budget" in {h.content for h in wider}


# ------------------------------------------------------------------------------------------ state store


@pytest.fixture(params=["memory", "sqlite"])
def state_store(request: pytest.FixtureRequest, store: SharedMemoryStore) -> ConversationStateStore:
    return InMemoryConversationStateStore() if request.param == "memory" else store.state


def test_conversation_store_contract(state_store: ConversationStateStore) -> None:
    conv = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    state_store.store_conversation("s1", "u1", conv)
    time.sleep(0.01)
    state_store.store_conversation("s2", "u1", [{"role": "user", "content": "second"}])
    state_store.store_conversation("s3", "u2", conv)
    assert state_store.retrieve_conversation("s1") == conv
    assert state_store.retrieve_conversation("nope") is None
    listed = state_store.list_conversations_for_user("u1")
    assert [m["session_id"] for m in listed] == ["s2", "s1"]
    assert listed[1]["message_count"] == 2 and listed[1]["summary"] == "hello" and "messages" not in listed[1]
    assert listed[0]["schema_version"] == 1
    assert [m["session_id"] for m in state_store.list_conversations_for_user("u1", limit=1, offset=1)] == ["s1"]
    state_store.store_conversation("s1", "u1", {"messages": []})  # replace
    assert state_store.retrieve_conversation("s1") == {"messages": []}
    assert state_store.delete_conversation("s1") is True and state_store.delete_conversation("s1") is False
    with pytest.raises(TypeError, match="JSON"):
        state_store.store_conversation("s4", "u1", {"when": time})
    assert state_store.retrieve_conversation("s4") is None
    with pytest.raises(ValueError):
        state_store.list_conversations_for_user("u1", limit=0)


def test_agent_state_contract(state_store: ConversationStateStore) -> None:
    state_store.store_agent_state("planner", "u1", "plan", {"steps": [1, 2]})
    state_store.store_agent_state("planner", "u1", "cursor", 7)
    state_store.store_agent_state("planner", "u2", "plan", {"steps": []})
    assert state_store.retrieve_agent_state("planner", "u1", "plan") == {"steps": [1, 2]}
    assert state_store.get_all_agent_states("planner", "u1") == {"plan": {"steps": [1, 2]}, "cursor": 7}
    state_store.store_agent_state("planner", "u1", "cursor", 8)
    assert state_store.retrieve_agent_state("planner", "u1", "cursor") == 8
    assert state_store.delete_agent_state("planner", "u1", "cursor") is True
    assert state_store.delete_agent_state("planner", "u1", "cursor") is False
    assert state_store.retrieve_agent_state("planner", "u1", "cursor") is None
    with pytest.raises(TypeError, match="JSON"):
        state_store.store_agent_state("planner", "u1", "bad", {1, 2})
    with pytest.raises(ValueError, match="non-empty"):
        state_store.store_agent_state("", "u1", "k", 1)
    assert "bad" not in state_store.get_all_agent_states("planner", "u1")


async def test_team_state_round_trips_through_the_state_store(store: SharedMemoryStore) -> None:
    from autogen_ext.models.replay import ReplayChatCompletionClient

    team = RoundRobinGroupChat(
        [AssistantAgent("a", model_client=ReplayChatCompletionClient(["hi"]))],
        termination_condition=MaxMessageTermination(2),
    )
    await team.run(task="hello")
    store.state.store_agent_state("team", "user-1", "agentchat", await team.save_state())
    fresh = RoundRobinGroupChat(
        [AssistantAgent("a", model_client=ReplayChatCompletionClient(["hi"]))],
        termination_condition=MaxMessageTermination(2),
    )
    await fresh.load_state(store.state.retrieve_agent_state("team", "user-1", "agentchat"))
    assert (await fresh.save_state()) == (await team.save_state())


# ------------------------------------------------------------------------------------------ lifecycle


def test_purge_records_per_kind_and_case_log_only_when_asked(
    store: SharedMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = store.for_agent("alice", "crew")
    alice.log_conversation("assistant", "old message")
    alice.log_tool_call("t", {}, "r")
    alice.case_log.append("old case entry")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 10 * 86400)
    assert store.operator.purge_records(5, kinds=["conversations"]) == {"conversations": 1}
    assert alice.get_my_tool_history() != [] and len(alice.case_log.entries()) == 1
    counts = store.operator.purge_records(5, kinds=["tool_calls"], include_case_log=True)
    assert counts == {"tool_calls": 1, "case_log": 1}
    assert alice.case_log.entries() == []
    with pytest.raises(ValueError, match="unknown record kinds"):
        store.operator.purge_records(5, kinds=["facts"])
    for days in (10**400, float("inf"), float("nan"), -1):  # 10**400 raised OverflowError
        with pytest.raises(ValueError, match="older_than must be a number of days"):
            store.operator.purge_records(days)
        with pytest.raises(ValueError, match="older_than must be a number of days"):
            store.operator.purge(days)
    alice.case_log.append("the guard is back after a purge")
    with pytest.raises(Exception, match="append-only"):
        raw_sql(store, "crew", "DELETE FROM {case_log}")


def test_export_one_agent(store: SharedMemoryStore, tmp_path: Path) -> None:
    _populate(store)
    buffer = io.StringIO()
    store.export(buffer, agent="alice")
    lines = [json.loads(x) for x in buffer.getvalue().splitlines()]
    scopes = {(x["scope"]["kind"], x["scope"]["owner"]) for x in lines if x["type"] == "row"}
    assert scopes == {("agent", "alice"), ("global", "")}
    assert {x["table"] for x in lines if x["type"] == "row" and x["scope"]["kind"] == "global"} == {"agent_directory"}
    target = SharedMemoryStore(tmp_path / "copy", embedder=HashEmbedder())
    target.import_(io.StringIO(buffer.getvalue()), policy=True)  # alice is private
    assert target.operator.conversation("alice")[0].content == "hello from alice"


def test_bad_import_file_writes_nothing(store: SharedMemoryStore, tmp_path: Path) -> None:
    _populate(store)
    good = tmp_path / "good.jsonl"
    store.export(good)
    lines = good.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:5], "{not json", *lines[5:]]) + "\n")
    target = SharedMemoryStore(tmp_path / "copy", embedder=HashEmbedder())
    with pytest.raises(ImportFormatError, match="line 6: not JSON"):
        target.import_(bad)
    assert not (tmp_path / "copy").exists() or not list((tmp_path / "copy").glob("*.db"))
    report = target.import_(bad, skip_bad=True, policy=True)
    assert report.skipped_bad == [
        "line 6: not JSON (Expecting property name enclosed in double quotes)",
        f"the export's end line counts {len(lines) - 2} rows, the file holds {len(lines) - 1}",  # one more line
    ]
    assert report.inserted == len(lines) - 2
    other_model = SharedMemoryStore(tmp_path / "other", embedder=HashEmbedder(32, "other-model"))
    with pytest.raises(ImportFormatError, match="other-model"):
        other_model.import_(good)
    for text, message in [
        ("[]", "line 1: expected an object"),
        ('{"type": "row", "scope": {"kind": "nope"}}', "bad scope"),
    ]:
        with pytest.raises(ImportFormatError, match=message):
            target.import_(io.StringIO(text))


def _b64(value: dict[str, str]) -> bytes:
    return base64.b64decode(value["$b64"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda row, scope: {**row, "id": "w_" + row["id"][2:]} if scope["kind"] != "global" else row, "not the id"),
        (lambda row, scope: {**row, "content": "a NUL \x00 inside"}, "NUL"),
        (lambda row, scope: {**row, "content": "   "}, "empty"),
        (lambda row, scope: {**row, "status": "deleted"}, "unknown fact status"),
        (lambda row, scope: {**row, "embedding": {"$b64": base64.b64encode(b"\0" * 12).decode()}}, "float32 vector"),
        (
            lambda row, scope: {
                **row,
                "embedding": {"$b64": base64.b64encode(b"\x00\x00\xc0\x7f" + _b64(row["embedding"])[4:]).decode()},
            },
            "NaN or infinite",
        ),
    ],
)
def test_an_import_refuses_a_fact_a_write_would_refuse(
    store: SharedMemoryStore, tmp_path: Path, change: Any, message: str
) -> None:
    store.operator.add_member("crew", "alice")
    store.as_agent("alice", "crew").remember("Deploys happen on Tuesdays", "group")
    good = tmp_path / "good.jsonl"
    store.export(good)
    lines = [json.loads(line) for line in good.read_text().splitlines()]
    n = next(i for i, item in enumerate(lines) if item.get("table") == "facts" and item["scope"]["kind"] == "group")
    lines[n] = {**lines[n], "row": change(lines[n]["row"], lines[n]["scope"])}
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(item) for item in lines) + "\n")
    target = SharedMemoryStore(tmp_path / "copy", embedder=HashEmbedder())
    with pytest.raises(ImportFormatError, match=f"line {n + 1}: .*{message}"):
        target.import_(bad)
    assert not list((tmp_path / "copy").glob("*.db"))  # nothing written
    rows_first = tmp_path / "rows_first.jsonl"
    rows_first.write_text("\n".join(json.dumps(item) for item in [*lines[1:], lines[0]]) + "\n")
    with pytest.raises(ImportFormatError, match="line 1: missing the export header"):
        target.import_(rows_first)


# ------------------------------------------------------------------------------------------ automatic


async def test_automatic_recording_through_a_team_run(store: SharedMemoryStore) -> None:
    from autogen_ext.models.replay import ReplayChatCompletionClient

    recorder = store.runtime_handler()
    recorder.task_id = "k_launch"
    runtime = SingleThreadedAgentRuntime(intervention_handlers=[recorder])
    agent = AssistantAgent(
        "writer", model_client=ReplayChatCompletionClient(["draft ready"]), description="Writes drafts"
    )
    team = RoundRobinGroupChat([agent], termination_condition=MaxMessageTermination(2), runtime=runtime)
    store.attach(team, group_id="crew")
    runtime.start()
    await team.run(task="write the draft")
    await runtime.stop_when_idle()
    assert await recorder.aflush()  # True: nothing left pending
    me = store.for_agent("crew:writer", "crew")  # attach names the team's agents "<group_id>:<name>"
    info = me.get_agent("crew:writer")
    assert info.description == "Writes drafts" and info.status == "active" and info.last_active_at is not None
    said = store.operator.conversation("crew:writer")
    assert said[0].content == "draft ready" and said[0].task_id == "k_launch"
    assert said[0].session_id == recorder.session_id
    recorder.close()


def test_a_later_export_closes_what_it_forgot_or_superseded(make_store: Any, tmp_path: Path) -> None:
    """Importing an export taken later applies the forgets and corrections made since: the fact it forgot
    and the one it superseded were recalled again here, next to their correction."""
    a, b = make_store(policy=WritePolicy(global_writers=["*"])), make_store(policy=WritePolicy(global_writers=["*"]))
    forgotten = a.operator.remember("The VPN password rotates monthly.", "global")
    old = a.operator.remember("The office closes at 18:00.", "global")
    kept = a.operator.remember("Badges are blue.", "global")
    a.export(tmp_path / "first.jsonl")
    b.import_(tmp_path / "first.jsonl")
    a.operator.forget(forgotten.id, reason="wrong")
    new = a.operator.remember("The office closes at 19:00.", "global", supersedes=[old.id])
    a.export(tmp_path / "later.jsonl")
    report = b.import_(tmp_path / "later.jsonl")
    assert report.closed == 2
    assert [b.operator.get(f.id).status for f in (forgotten, old, kept, new)] == [
        "forgotten",
        "superseded",
        "active",
        "active",
    ]
    assert b.operator.get(old.id).superseded_by == new.id
    assert [h.id for h in b.operator.search("office closes", "global")] == [new.id]
    assert forgotten.id not in [h.id for h in b.operator.search("VPN password", "global")]
    b.import_(tmp_path / "first.jsonl")  # an older export never reopens a closed fact
    assert b.operator.get(forgotten.id).status == "forgotten" and b.operator.get(old.id).status == "superseded"
    lines = [json.loads(line) for line in (tmp_path / "later.jsonl").read_text().splitlines()]
    for item in lines:  # another history of the same fact never rewrites its tombstone
        if item.get("table") == "facts" and item["row"]["id"] == forgotten.id:
            item["row"].update(tombstone_reason="another story", tombstone_by="mallory")
    (tmp_path / "other.jsonl").write_text("".join(json.dumps(item) + "\n" for item in lines))
    assert b.import_(tmp_path / "other.jsonl").closed == 0
    assert b.operator.history(forgotten.id)[-1].detail == {"reason": "wrong"}
    assert (b.operator.get(forgotten.id).tombstone_reason, b.operator.get(forgotten.id).tombstone_by) == (
        "wrong",
        "system",
    )


def test_two_first_registrations_of_an_agent_keep_both_fields(make_store: Any) -> None:
    """A registration is one transaction: a second one that lands between the first's look-up and its insert
    waits for it, then adds its fields (two transactions let the first overwrite the second's with defaults)."""
    import threading

    s = make_store()
    backend = s.backend
    real = backend.update_record
    other = threading.Thread(target=lambda: s.for_agent("doc").register(model="gpt-4o"))

    def slow_update(*args: Any, **kwargs: Any) -> Any:  # what a two-step registration would look up first
        found = real(*args, **kwargs)
        if not other.is_alive() and other.ident is None:
            other.start()
            other.join()
        return found

    backend.update_record = slow_update  # type: ignore[method-assign]
    s.for_agent("doc").register(capabilities=["pdf", "ocr"], description="reads documents")
    if other.ident is None:
        other.start()
    other.join()
    entry = s.for_agent("doc").get_agent("doc")
    assert (entry.model, entry.capabilities, entry.description) == ("gpt-4o", ("pdf", "ocr"), "reads documents")


def test_a_later_export_brings_what_was_added_and_what_was_purged(make_store: Any, tmp_path: Path) -> None:
    """Restatements, their authors, tags and metadata keys, a task's progress and a profile change made after
    a first import arrive with a later export; a fact forgotten and then purged there is closed here; events
    of one transaction that share their time are all kept."""
    a, b = make_store(policy=WritePolicy(global_writers=["*"])), make_store(policy=WritePolicy(global_writers=["*"]))
    fact = a.as_agent("alice").remember("The build uses Bazel.", "global", tags=["ops"])
    secret = a.operator.remember("The admin password is hunter2.", "global")
    alice = a.for_agent("alice")
    task = alice.create_task("write docs")
    alice.update_user_profile("tz", "UTC")
    a.export(tmp_path / "first.jsonl")
    b.import_(tmp_path / "first.jsonl")
    a.as_agent("alice").remember_many(  # three restatements in one transaction: same time, same actor, three details
        [
            "The build uses Bazel.",
            {"content": "The build uses Bazel.", "tags": ["ci"], "metadata": {"src": "wiki"}, "category": "build"},
            {"content": "the build uses bazel", "confidence": 0.9},
        ],
        "global",
    )
    a.as_agent("bob").remember("The build uses Bazel.", "global")
    alice.complete_task(task.id, "done")
    alice.update_user_profile("tz", "Europe/Paris")
    a.operator.forget(secret.id, "leaked")
    a.operator.purge(older_than=0)
    a.export(tmp_path / "later.jsonl")
    report = b.import_(tmp_path / "later.jsonl")
    source, copy = a.operator.get(fact.id), b.operator.get(fact.id)
    for field in ("reinforcement", "stated_by", "tags", "metadata", "category"):
        assert getattr(copy, field) == getattr(source, field), field
    assert [e.detail for e in b.operator.history(fact.id)] == [e.detail for e in a.operator.history(fact.id)]
    assert b.operator.get(secret.id).status == "forgotten" and b.operator.get(secret.id).tombstone_reason == "leaked"
    assert secret.id not in [h.id for h in b.operator.search("admin password", "global")]
    assert b.for_agent("alice").get_user_profile("tz").value == "Europe/Paris"  # type: ignore[union-attr]
    assert b.for_agent("alice").get_task(task.id).status == "completed"
    assert report.closed == 1 and report.updated == 3  # the fact, the task, the profile entry
    again = b.import_(tmp_path / "later.jsonl")  # repeatable: nothing more
    assert (again.inserted, again.closed, again.updated) == (0, 0, 0)
    assert len(b.operator.history(fact.id)) == len(a.operator.history(fact.id))


@pytest.mark.parametrize("duration", [float("inf"), float("nan"), "5", True])
def test_a_tool_call_duration_must_be_a_finite_number(store: SharedMemoryStore, duration: Any) -> None:
    # an infinite duration was stored, exported as a bare Infinity (not JSON), and refused by every import
    alice = store.for_agent("alice")
    with pytest.raises(ValueError, match="duration_ms"):
        alice.log_tool_call("search", {"q": "x"}, "ok", True, duration)
    assert alice.get_my_tool_history() == []
    alice.log_tool_call("search", {"q": "x"}, "ok", True, 12)
    assert [c.duration_ms for c in alice.get_my_tool_history()] == [12]


def test_a_limit_shorter_than_the_cut_marker_still_bounds_the_text() -> None:
    from autogen_shared_memory.core.records import bounded_text

    assert bounded_text("x" * 100, "text", 10, truncate=True) == "x" * 10
    assert bounded_text("é" * 100, "text", 5, truncate=True) == "éé"
    assert bounded_text("x" * 100, "text", 80, truncate=True).endswith("[truncated from 100 bytes]")
