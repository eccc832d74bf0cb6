"""The access policy is enforced by the store from the caller's identity."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from autogen_shared_memory import MemoryAccessDenied, SharedMemoryStore
from autogen_shared_memory.integration.toolkit import BoundTools
from autogen_shared_memory.testing import HashEmbedder


def test_agent_scope_only_owner_writes_and_forgets(store: SharedMemoryStore) -> None:
    r = store.remember("alice's private note on retries", "agent", agent_id="alice")
    with pytest.raises(MemoryAccessDenied, match="'bob' may not forget facts in the agent scope of 'alice'"):
        store.forget(r.id, agent_id="bob")
    assert store.get(r.id).status == "active"
    # writing "agent" scope always means the caller's own scope
    own = store.remember("bob's note", "agent", agent_id="bob")
    assert own.scope.owner == "bob"


def test_cross_agent_read_is_explicit_and_can_be_refused(store: SharedMemoryStore) -> None:
    store.remember("alice knows the staging password rotates", "agent", agent_id="alice")
    assert store.search("staging password", agent_id="bob", group_id="crew") == []  # not in bob's scopes
    hits = store.search("staging password", "agent", agent_id="bob", other_agent="alice")
    assert len(hits) == 1
    store.set_agent_private("alice")
    with pytest.raises(MemoryAccessDenied, match="'alice': that agent is private"):
        store.search("staging password", "agent", agent_id="bob", other_agent="alice")
    assert len(store.search("staging password", "agent", agent_id="alice")) == 1
    assert len(store.search("staging password", "agent", other_agent="alice")) == 1  # trusted code
    store.set_agent_private("alice", False)
    assert len(store.search("staging password", "agent", agent_id="bob", other_agent="alice")) == 1


def test_group_scope_is_for_members(store: SharedMemoryStore) -> None:
    store.remember("crew decision: use postgres", "group", agent_id="alice", group_id="crew")
    with pytest.raises(MemoryAccessDenied, match="'mallory' may not write to group 'crew'"):
        store.remember("crew decision: use mongo", "group", agent_id="mallory", group_id="crew")
    with pytest.raises(MemoryAccessDenied, match="may not read group 'crew'"):
        store.search("decision", "group", agent_id="mallory", group_id="crew")
    assert store.group_members("crew") == {"alice", "bob", "lead"}
    store.remove_group_member("crew", "bob")
    with pytest.raises(MemoryAccessDenied):
        store.search("decision", "group", agent_id="bob", group_id="crew")


def test_global_writers_allow_list(store: SharedMemoryStore) -> None:
    with pytest.raises(MemoryAccessDenied, match="'alice' may not write to the global scope"):
        store.remember("policy: no PII in logs", "global", agent_id="alice")
    r = store.remember("policy: no PII in logs", "global", agent_id="lead")
    assert store.get(r.id).created_by == "lead"
    with pytest.raises(MemoryAccessDenied, match="forget facts in the global scope"):
        store.forget(r.id, agent_id="alice")
    assert len(store.search("PII logs", agent_id="alice")) == 1  # everyone reads global
    store.forget(r.id, agent_id="lead")


def test_global_writers_default_none_and_star(tmp_path: Path) -> None:
    closed = SharedMemoryStore(tmp_path / "a", embedder=HashEmbedder())
    with pytest.raises(MemoryAccessDenied):
        closed.remember("x", "global", agent_id="anyone")
    assert closed.remember("x", "global").status == "created"  # trusted code
    open_ = SharedMemoryStore(tmp_path / "b", embedder=HashEmbedder(), global_writers=["*"])
    assert open_.remember("x", "global", agent_id="anyone").status == "created"


def test_denied_write_writes_nothing(store: SharedMemoryStore) -> None:
    with pytest.raises(MemoryAccessDenied):
        store.remember_many(["ok for alice", {"content": "not ok", "scope": "global"}], "agent", agent_id="alice")
    assert not (store.root / "agent_alice.db").exists()
    assert isinstance(MemoryAccessDenied("x"), PermissionError)


def test_one_agents_forget_of_another_agents_fact_is_denied(store: SharedMemoryStore) -> None:
    private = store.remember("alice's private note on retries", "agent", agent_id="alice")
    ruled = store.remember("policy: refunds need approval", "global", agent_id="lead")
    for fact_id in (private.id, ruled.id):
        with pytest.raises(MemoryAccessDenied, match="'bob' may not forget facts in the"):
            store.forget(fact_id, "not needed", agent_id="bob")
        assert store.get(fact_id).status == "active"
        assert store.history(fact_id)[-1].event == "created"


def test_the_bound_forget_tool_acts_as_its_agent_and_in_its_group(store: SharedMemoryStore) -> None:
    private = store.remember("alice's private note on retries", "agent", agent_id="alice")
    ruled = store.remember("policy: refunds need approval", "global", agent_id="lead")
    store.add_group_member("other-team", "bob")
    elsewhere = store.remember("other team: ship on Fridays", "group", agent_id="bob", group_id="other-team")
    bob = BoundTools(store, "bob", "crew")
    answers = [asyncio.run(bob.forget(fact_id, "not needed")) for fact_id in (private.id, ruled.id, elsewhere.id)]
    assert answers[0].startswith("DENIED: agent 'bob' may not forget facts in the agent scope of 'alice'")
    assert answers[1].startswith("DENIED: agent 'bob' may not forget facts in the global scope")
    # bob is in other-team too, but these tools are bound to crew: that fact is not theirs to reach
    assert answers[2] == f"ERROR: no fact with id '{elsewhere.id}'. Search memory to find the right id."
    for fact_id in (private.id, ruled.id, elsewhere.id):
        assert store.get(fact_id).status == "active"
    assert "forgot fact" in asyncio.run(BoundTools(store, "bob", "other-team").forget(elsewhere.id))
    assert store.get(elsewhere.id).status == "forgotten"
