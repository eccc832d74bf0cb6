"""The access policy is enforced by the store from the caller's identity."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from autogen_shared_memory import MemoryAccessDenied, ScopeRef, SharedMemoryStore
from autogen_shared_memory.integration.toolkit import BoundTools
from autogen_shared_memory.settings import WritePolicy
from autogen_shared_memory.testing import HashEmbedder


def test_agent_scope_only_owner_writes_and_forgets(store: SharedMemoryStore) -> None:
    r = store.as_agent("alice").remember("alice's private note on retries", "agent")
    with pytest.raises(MemoryAccessDenied, match="'bob' may not forget facts in the agent scope of 'alice'"):
        store.as_agent("bob").forget(r.id)
    assert store.operator.get(r.id).status == "active"
    # writing "agent" scope always means the caller's own scope
    own = store.as_agent("bob").remember("bob's note", "agent")
    assert own.scope.owner == "bob"


def test_cross_agent_read_is_explicit_and_can_be_refused(store: SharedMemoryStore) -> None:
    store.as_agent("alice").remember("alice knows the staging password rotates", "agent")
    assert store.as_agent("bob", "crew").search("staging password") == []  # not in bob's scopes
    hits = store.as_agent("bob").search("staging password", "agent", other_agent="alice")
    assert len(hits) == 1
    store.operator.set_private("alice")
    with pytest.raises(MemoryAccessDenied, match="'alice': that agent is private"):
        store.as_agent("bob").search("staging password", "agent", other_agent="alice")
    assert len(store.as_agent("alice").search("staging password", "agent")) == 1
    assert len(store.operator.search("staging password", "agent", other_agent="alice")) == 1  # trusted code
    store.operator.set_private("alice", False)
    assert len(store.as_agent("bob").search("staging password", "agent", other_agent="alice")) == 1


def test_group_scope_is_for_members(store: SharedMemoryStore) -> None:
    store.as_agent("alice", "crew").remember("crew decision: use postgres", "group")
    with pytest.raises(MemoryAccessDenied, match="'mallory' may not write to group 'crew'"):
        store.as_agent("mallory", "crew").remember("crew decision: use mongo", "group")
    with pytest.raises(MemoryAccessDenied, match="may not read group 'crew'"):
        store.as_agent("mallory", "crew").search("decision", "group")
    assert store.operator.members("crew") == {"alice", "bob", "lead"}
    store.operator.remove_member("crew", "bob")
    with pytest.raises(MemoryAccessDenied):
        store.as_agent("bob", "crew").search("decision", "group")


def test_global_writers_allow_list(store: SharedMemoryStore) -> None:
    with pytest.raises(MemoryAccessDenied, match="'alice' may not write to the global scope"):
        store.as_agent("alice").remember("policy: no PII in logs", "global")
    r = store.as_agent("lead").remember("policy: no PII in logs", "global")
    assert store.operator.get(r.id).created_by == "lead"
    with pytest.raises(MemoryAccessDenied, match="forget facts in the global scope"):
        store.as_agent("alice").forget(r.id)
    assert len(store.as_agent("alice").search("PII logs")) == 1  # everyone reads global
    store.as_agent("lead").forget(r.id)


def test_global_writers_default_none_and_star(tmp_path: Path) -> None:
    closed = SharedMemoryStore(tmp_path / "a", embedder=HashEmbedder())
    with pytest.raises(MemoryAccessDenied):
        closed.as_agent("anyone").remember("x", "global")
    assert closed.operator.remember("x", "global").status == "created"  # trusted code
    open_ = SharedMemoryStore(tmp_path / "b", embedder=HashEmbedder(), policy=WritePolicy(global_writers=["*"]))
    assert open_.as_agent("anyone").remember("x", "global").status == "created"


def test_denied_write_writes_nothing(store: SharedMemoryStore) -> None:
    with pytest.raises(MemoryAccessDenied):
        store.as_agent("alice").remember_many(["ok for alice", {"content": "not ok", "scope": "global"}], "agent")
    assert store.root is None or not (store.root / "agent_alice.db").exists()
    assert not store.backend.exists(ScopeRef("agent", "alice"))
    assert isinstance(MemoryAccessDenied("x"), PermissionError)


def test_one_agents_forget_of_another_agents_fact_is_denied(store: SharedMemoryStore) -> None:
    private = store.as_agent("alice").remember("alice's private note on retries", "agent")
    ruled = store.as_agent("lead").remember("policy: refunds need approval", "global")
    for fact_id in (private.id, ruled.id):
        with pytest.raises(MemoryAccessDenied, match="'bob' may not forget facts in the"):
            store.as_agent("bob").forget(fact_id, "not needed")
        assert store.operator.get(fact_id).status == "active"
        assert store.operator.history(fact_id)[-1].event == "created"


def test_the_bound_forget_tool_acts_as_its_agent_and_in_its_group(store: SharedMemoryStore) -> None:
    private = store.as_agent("alice").remember("alice's private note on retries", "agent")
    ruled = store.as_agent("lead").remember("policy: refunds need approval", "global")
    store.operator.add_member("other-team", "bob")
    elsewhere = store.as_agent("bob", "other-team").remember("other team: ship on Fridays", "group")
    bob = BoundTools(store, "bob", "crew")
    answers = [asyncio.run(bob.forget(fact_id, "not needed")) for fact_id in (private.id, ruled.id, elsewhere.id)]
    assert answers[0].startswith("DENIED: agent 'bob' may not forget facts in the agent scope of 'alice'")
    assert answers[1].startswith("DENIED: agent 'bob' may not forget facts in the global scope")
    # bob is in other-team too, but these tools are bound to crew: that fact is not theirs to reach
    assert answers[2] == f"ERROR: no fact with id '{elsewhere.id}'. Search memory to find the right id."
    for fact_id in (private.id, ruled.id, elsewhere.id):
        assert store.operator.get(fact_id).status == "active"
    assert "forgot fact" in asyncio.run(BoundTools(store, "bob", "other-team").forget(elsewhere.id))
    assert store.operator.get(elsewhere.id).status == "forgotten"


def test_in_a_shared_scope_an_agent_forgets_only_what_it_stated(store: SharedMemoryStore) -> None:
    alice = store.as_agent("alice", "crew", join=True)
    bob = store.as_agent("bob", "crew", join=True)
    fact = alice.remember("The deploy key rotates weekly.", "group")
    with pytest.raises(MemoryAccessDenied, match="forgets only what it stated"):
        bob.forget(fact.id)
    answer = asyncio.run(BoundTools(store, "bob", "crew").forget(fact.id))
    assert answer.startswith("DENIED") and store.operator.get(fact.id).status == "active", answer
    assert bob.remember("The deploy key rotates weekly.", "group").id == fact.id  # bob states it too
    kept = alice.forget(fact.id)  # alice takes back her statement; bob's stays
    assert (kept.status, kept.stated_by) == ("active", ("bob",))
    assert [e.event for e in store.operator.history(fact.id)][-1] == "withdrawn"
    assert bob.forget(fact.id).status == "forgotten"
    other = alice.remember("Standups are at nine.", "group")
    assert store.operator.forget(other.id).status == "forgotten"  # the operator may forget any fact
