"""The inspector on a PostgreSQL store: the same pages, policy and operator actions as on SQLite files."""

from __future__ import annotations

import re
import uuid

from conftest import OPERATOR, POLICY, TOKEN, HashEmbedder, seed
from starlette.testclient import TestClient

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.ui import create_app, open_inspector


def test_the_inspector_works_on_postgresql(pg_dsn: str, tmp_path: object) -> None:
    from autogen_shared_memory.backends.postgres import PostgresBackend

    schema = f"ui{uuid.uuid4().hex[:12]}"

    def backend() -> PostgresBackend:
        return PostgresBackend(pg_dsn, schema=schema, max_size=4)

    seeded = seed(tmp_path, backend())  # type: ignore[arg-type]
    inspector = open_inspector(backend, embedder=HashEmbedder(), policy=POLICY, writable=True)
    try:
        with TestClient(create_app(inspector, token=TOKEN), base_url="http://127.0.0.1") as client:
            scopes = {s["scope"]: s for s in client.get("/index.json").json()["scopes"]}
            assert scopes["group:team"]["counts"]["superseded"] == 1 and scopes["global"]["counts"]["pending"] == 3
            facts = client.get("/facts.json", params={"scope": "group:team", "status": "superseded"}).json()
            assert [f["id"] for f in facts["facts"]] == [seeded.old_group_fact]
            hits = client.get("/search.json", params={"q": "staging deploy", "agent": "alice", "group": "team"})
            ids = [h["fact"]["id"] for h in hits.json()["hits"]]
            assert seeded.group_fact in ids and seeded.bob_private not in ids
            for page in ("/", "/facts", "/search", "/review", "/live", "/records", f"/fact/{seeded.group_fact}"):
                assert client.get(page).status_code == 200, page
            fact_id = seeded.held[0]
            assert client.post(f"/review/{fact_id}/approve").status_code == 403
            client.post("/login", data={"token": TOKEN})
            csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/review").text)
            assert csrf is not None
            response = client.post(f"/review/{fact_id}/approve", data={"csrf": csrf.group(1)}, follow_redirects=False)
            assert response.status_code == 303
    finally:
        inspector.store.close()
    with SharedMemoryStore(backend(), embedder=HashEmbedder(), policy=POLICY) as store:
        assert store.operator.get(fact_id).status == "active"
        assert ("approved", OPERATOR) in [(e.event, e.actor) for e in store.operator.history(fact_id)]
