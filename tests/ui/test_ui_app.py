"""The inspector's pages and their JSON, its access rules and its escaping, through Starlette's TestClient."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import pytest
from conftest import HOSTILE, HOSTILE_AGENT, OPERATOR, TOKEN, Seeded, make_inspector, operator_store
from starlette.testclient import TestClient

from autogen_shared_memory.errors import StorageError
from autogen_shared_memory.ui import create_app
from autogen_shared_memory.ui.app import CSP

PAGES = ["/overview", "/facts", "/search", "/review", "/live", "/records"]


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def sign_in(client: TestClient) -> str:
    """Open an operator session; the CSRF token of its forms."""
    response = client.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert response.status_code == 303
    return csrf_of(client.get("/review").text)


def status_of(root: Path, fact_id: str) -> str:
    with operator_store(root) as store:
        return store.operator.get(fact_id).status


# ------------------------------------------------------------------------------------------ pages
@pytest.mark.parametrize("path", ["/", *PAGES])
def test_every_page_renders_with_the_security_headers(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in CSP and "script-src 'self'" in CSP and "unsafe-inline" not in CSP
    assert "<script>" not in response.text  # the one script is a file (/static/app.js), never inline
    assert re.search(r"(src|href)=\"(https?:)?//", response.text) is None  # nothing from another origin


@pytest.mark.parametrize("path", PAGES)
def test_every_page_is_also_json(client: TestClient, path: str) -> None:
    by_suffix = client.get(path + ".json")
    by_query = client.get(path + "?format=json")
    assert by_suffix.status_code == by_query.status_code == 200
    assert by_suffix.headers["content-type"] == "application/json"
    assert by_suffix.json() == by_query.json() or path == "/facts"  # (the facts page reports its own timing)


def test_static_files_and_errors_carry_the_headers_too(client: TestClient) -> None:
    for path, status in (("/static/app.js", 200), ("/static/app.css", 200), ("/fact/g_00000000000000000000", 404)):
        response = client.get(path)
        assert response.status_code == status
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["x-frame-options"] == "DENY"


def test_a_request_for_another_host_name_is_refused(client: TestClient) -> None:
    """A page of another site that rebinds its DNS name to 127.0.0.1 cannot read the inspector."""
    assert client.get("/facts.json", headers={"host": "attacker.example"}).status_code == 400
    assert client.get("/facts.json", headers={"host": "localhost:8765"}).status_code == 200


def test_the_overview_counts_every_scope(client: TestClient) -> None:
    scopes = {s["scope"]: s for s in client.get("/index.json").json()["scopes"]}
    assert set(scopes) >= {"global", "group:team", "agent:bob", "agent:carol"}
    assert scopes["group:team"]["counts"]["active"] == 2  # bob's correction and the hostile agent's note
    assert scopes["group:team"]["counts"]["superseded"] == 1
    assert scopes["global"]["counts"]["pending"] == 3
    assert scopes["group:team"]["members"] == sorted(["alice", "bob", HOSTILE_AGENT])
    assert scopes["group:team"]["embedding_model"] == "test-hash-embedder"
    html = client.get("/").text
    assert "<svg" in html and "facts over time per scope" in html and "writes per agent" in html


def test_the_facts_table_filters_by_status_author_tag_and_time(client: TestClient, seeded: Seeded) -> None:
    def ids(**params: str) -> list[str]:
        return [f["id"] for f in client.get("/facts.json", params=params).json()["facts"]]

    assert ids(scope="group:team", status="superseded") == [seeded.old_group_fact]
    assert seeded.group_fact in ids(scope="group:team", status="active")
    assert ids(scope="group:team", author="alice") == [seeded.old_group_fact]
    assert set(ids(scope="group:team", tag="ops")) == {seeded.old_group_fact, seeded.group_fact}
    assert ids(scope="global", status="pending") == seeded.held[::-1]  # newest first
    assert ids(scope="global", status="pending", since=str(time.time() + 60)) == []
    page1, page2 = (
        ids(scope="global", status="pending", per_page="2"),
        ids(scope="global", status="pending", per_page="2", page="2"),
    )
    assert page1 + page2 == seeded.held[::-1]
    with operator_store(seeded.root) as store:  # seeded with a TTL of under a second: wait for it to pass
        deadline = store.operator.get(seeded.expired).expires_at or 0.0
    while time.time() <= deadline:
        time.sleep(0.01)
    assert ids(scope="global", status="expired") == [seeded.expired]
    assert client.get("/facts.json", params={"status": "nonsense"}).status_code == 400


def test_a_fact_page_shows_provenance_audit_chain_and_similar_facts(client: TestClient, seeded: Seeded) -> None:
    data = client.get(f"/fact/{seeded.old_group_fact}.json").json()
    assert data["fact"]["created_by"] == "alice" and data["fact"]["status"] == "superseded"
    assert [f["id"] for f in data["chain"]] == [seeded.old_group_fact, seeded.group_fact]  # both directions
    events = [(e["fact_id"], e["event"]) for e in data["history"]]
    assert (seeded.old_group_fact, "created") in events and (seeded.old_group_fact, "superseded") in events
    assert seeded.group_fact in [s["fact"]["id"] for s in data["similar"]]
    from_new = client.get(f"/fact/{seeded.group_fact}.json").json()
    assert [f["id"] for f in from_new["chain"]] == [seeded.old_group_fact, seeded.group_fact]
    html = client.get(f"/fact/{seeded.group_fact}").text
    assert "17:00 UTC" in html and "superseded" in html


# ----------------------------------------------------------------------------------------- search
def test_search_as_an_agent_applies_its_policy(client: TestClient, seeded: Seeded) -> None:
    as_alice = client.get("/search.json", params={"q": "staging deploy", "agent": "alice", "group": "team"}).json()
    hits = {h["fact"]["id"]: h for h in as_alice["hits"]}
    assert seeded.group_fact in hits
    assert seeded.bob_private not in hits  # bob's own scope: not alice's to recall
    hit = hits[seeded.group_fact]
    assert hit["fact"]["created_by"] == "bob" and hit["scope"] == "group:team"
    assert hit["lexical_rank"] == 1 and hit["semantic_rank"] is not None and hit["score"] > 0
    as_operator = client.get("/search.json", params={"q": "staging deploy"}).json()
    assert seeded.bob_private in [h["fact"]["id"] for h in as_operator["hits"]]  # the operator sees every scope


def test_search_as_an_outsider_to_the_group_is_refused(client: TestClient, seeded: Seeded) -> None:
    response = client.get("/search.json", params={"q": "staging deploy", "agent": "carol", "group": "team"})
    assert response.status_code == 403
    assert "not a member" in response.json()["error"]
    assert status_of(seeded.root, seeded.group_fact) == "active"
    with operator_store(seeded.root) as store:
        assert "carol" not in store.operator.members("team")  # looking never enrols the agent


def test_search_as_of_shows_what_was_believed_then(client: TestClient, seeded: Seeded) -> None:
    with operator_store(seeded.root) as store:
        between = store.operator.get(seeded.group_fact).created_at - 1e-6
    then = client.get("/search.json", params={"q": "staging deploy key", "as_of": str(between)}).json()
    now = client.get("/search.json", params={"q": "staging deploy key"}).json()
    assert seeded.old_group_fact in [h["fact"]["id"] for h in then["hits"]]
    assert seeded.group_fact not in [h["fact"]["id"] for h in then["hits"]]
    assert seeded.old_group_fact not in [h["fact"]["id"] for h in now["hits"]]


# ----------------------------------------------------------------------------------------- review
def test_approve_without_a_session_is_refused_and_changes_nothing(fresh_client: TestClient, fresh: Seeded) -> None:
    fact_id = fresh.held[0]
    assert fresh_client.post(f"/review/{fact_id}/approve").status_code == 403
    assert fresh_client.post(f"/review/{fact_id}/approve", data={"csrf": "0" * 64}).status_code == 403
    assert status_of(fresh.root, fact_id) == "pending"


def test_a_wrong_token_opens_no_session(fresh_client: TestClient, fresh: Seeded) -> None:
    response = fresh_client.post("/login", data={"token": TOKEN[:-1] + "x"}, follow_redirects=False)
    assert response.status_code == 403 and "set-cookie" not in response.headers
    assert fresh_client.post(f"/review/{fresh.held[0]}/approve").status_code == 403
    assert status_of(fresh.root, fresh.held[0]) == "pending"


def test_approve_needs_the_csrf_token_of_the_session(fresh_client: TestClient, fresh: Seeded) -> None:
    csrf = sign_in(fresh_client)
    fact_id = fresh.held[0]
    assert fresh_client.post(f"/review/{fact_id}/approve").status_code == 403  # the session alone is not enough
    wrong = csrf[:-1] + ("1" if csrf.endswith("0") else "0")  # one hex digit off (a token may end in 0)
    assert fresh_client.post(f"/review/{fact_id}/approve", data={"csrf": wrong}).status_code == 403
    assert status_of(fresh.root, fact_id) == "pending"
    response = fresh_client.post(f"/review/{fact_id}/approve", data={"csrf": csrf}, follow_redirects=False)
    assert response.status_code == 303
    assert status_of(fresh.root, fact_id) == "active"
    with operator_store(fresh.root) as store:
        approved = [e for e in store.operator.history(fact_id) if e.event == "approved"]
    assert [(e.actor, e.detail.get("reason")) for e in approved] == [(OPERATOR, "approved in the inspector")]


def test_reject_forgets_the_held_fact_audited_under_the_operator(fresh_client: TestClient, fresh: Seeded) -> None:
    csrf = sign_in(fresh_client)
    fact_id = fresh.held[1]
    response = fresh_client.post(f"/review/{fact_id}/reject", data={"csrf": csrf, "reason": "not our policy"})
    assert response.status_code == 200 and "rejected" in response.text
    with operator_store(fresh.root) as store:
        assert store.operator.get(fact_id).status == "forgotten"
        events = [(e.event, e.actor) for e in store.operator.history(fact_id)]
    assert ("rejected", OPERATOR) in events
    csrf = csrf_of(fresh_client.get("/review").text)
    again = fresh_client.post(f"/review/{fresh.group_fact}/reject", data={"csrf": csrf})  # not a held fact
    assert again.status_code == 400
    assert status_of(fresh.root, fresh.group_fact) == "active"


def test_a_read_only_inspector_refuses_every_action(fresh: Seeded) -> None:
    inspector = make_inspector(fresh.root, writable=False)
    try:
        with TestClient(create_app(inspector), base_url="http://127.0.0.1") as client:
            assert client.post("/login", data={"token": TOKEN}, follow_redirects=False).status_code == 403
            assert client.post(f"/review/{fresh.held[0]}/approve", data={"csrf": "x"}).status_code == 403
            assert "operator sign-in" not in client.get("/review").text
    finally:
        inspector.store.close()
    assert status_of(fresh.root, fresh.held[0]) == "pending"


# ------------------------------------------------------------------------------------ read-only files
def test_browsing_never_writes_a_store_file(fresh: Seeded) -> None:
    """Every page, search and fact lookup by id leaves every file of the store as it was (the SQLite
    backend's read_only option: files opened mode=ro, no ids.db lookup), and a write through the
    inspector's store is refused."""

    def files() -> dict[str, str]:
        return {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(fresh.root.iterdir())
            # SQLite's shared-memory index of the WAL is not data, and a reader of a WAL-mode file opens an
            # empty WAL when there is none
            if not p.name.endswith("-shm") and not (p.name.endswith("-wal") and p.stat().st_size == 0)
        }

    with operator_store(fresh.root):
        pass  # a clean close folds the WAL in
    for index in fresh.root.glob("ids.db*"):  # as a store written before the id index had it: a lookup by id
        index.unlink()  # would build it, if the store were not read-only
    before = files()
    inspector = make_inspector(fresh.root)
    try:
        with TestClient(create_app(inspector, token=TOKEN), base_url="http://127.0.0.1") as client:
            for path in ["/", *PAGES, "/fact/a_00000000000000000000"]:
                client.get(path)
            assert "password hint is blue" in client.get(f"/fact/{fresh.bob_private}").text  # found without ids.db
            client.get("/search", params={"q": "deploy", "agent": "alice", "group": "team"})
            client.get("/records", params={"agent": "bob"})
        with pytest.raises(StorageError, match="read-only"):
            inspector.store.as_operator("team").remember("written through the inspector's reader", "group")
        with pytest.raises(StorageError, match="read-only"):
            inspector.store.as_agent("dave").remember("a new agent's first fact", "agent")
    finally:
        inspector.store.close()
    assert files() == before


# ---------------------------------------------------------------------------------------- hostile data
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_text_is_escaped_everywhere(client: TestClient, seeded: Seeded, name: str) -> None:
    pages = [
        client.get(f"/fact/{seeded.hostile[name]}").text,
        client.get("/facts", params={"scope": "global", "per_page": "500"}).text,
        client.get("/search", params={"q": "script picture caption javascript invoice bell"}).text,
        client.get("/live").text,
    ]
    for html in pages:
        assert "<script>window" not in html and "<img src=x" not in html and 'href="javascript' not in html
        assert "\u202e" not in html and "\x1b" not in html and "\x07" not in html
    fact_page = pages[0]
    if name == "script":
        assert "&lt;script&gt;window.__pwned = 1; alert(1)&lt;/script&gt;" in fact_page
    if name == "bidi":
        assert "\\u202e" in fact_page  # shown as a visible mark, not acting on the page
    if name == "long":
        assert "L" * 65536 in fact_page  # the fact page shows all of it
        assert "L" * 241 not in pages[1]  # a table cell is cut


def test_a_hostile_agent_id_is_escaped(client: TestClient) -> None:
    for path in ("/", "/facts?scope=group:team", "/search", "/records"):
        html = client.get(path).text
        assert HOSTILE_AGENT not in html
    assert "&lt;img src=x onerror=alert(5)&gt;" in client.get("/facts?scope=group:team").text


# --------------------------------------------------------------------------------------------- records
def test_records_show_conversations_tools_tasks_case_log_and_directory(client: TestClient, seeded: Seeded) -> None:
    data = client.get("/records.json", params={"agent": "alice", "group": "team"}).json()
    assert [m["content"] for m in data["conversation"]] == ["Please rotate the staging deploy key."]
    assert [c["tool_name"] for c in data["tool_history"]] == ["memory_search"]
    assert [t["title"] for t in data["tasks"]] == [seeded.task_title]
    assert [e["summary"] for e in data["case_log"]] == [seeded.case_entry]
    assert [a["agent_id"] for a in data["directory"]] == ["alice"]
    html = client.get("/records", params={"agent": "alice", "group": "team"}).text
    assert seeded.task_title in html and seeded.case_entry in html and "memory_search" in html


def test_live_json_lists_the_latest_changes(client: TestClient, seeded: Seeded) -> None:
    recent = client.get("/live.json").json()["recent"]
    assert recent[0]["at"] >= recent[-1]["at"]
    created = {c["fact_id"] for c in recent if c["event"] == "created"}
    assert seeded.hostile["long"] in created


def test_the_inspector_module_is_the_only_store_caller() -> None:
    """The routes reach the store through the Inspector only (the handles API changes in one place)."""
    source = (Path(__file__).parents[2] / "src/autogen_shared_memory/ui/app.py").read_text()
    assert ".store." not in source and "store.operator" not in source
