"""The records and views under an agent's (or an attacker's) arguments, on every backend: one clear answer,
the same everywhere, and nothing changed by a refused call."""

from __future__ import annotations

from typing import Any

import pytest

from autogen_shared_memory import MemoryAccessDenied, SharedMemoryStore
from autogen_shared_memory.views.agents import TaskNotFoundError, UnknownAgentError
from autogen_shared_memory.views.caselog import CheckpointError


@pytest.fixture
def crew(store: SharedMemoryStore) -> SharedMemoryStore:
    for agent in ("lead", "alice", "bob"):
        store.operator.add_member("crew", agent)
    return store


def test_a_task_reassigned_before_its_completion_is_written_is_not_completed(crew: SharedMemoryStore) -> None:
    """The assignee was checked before the write's transaction: a task reassigned meanwhile was completed by
    the agent it no longer belonged to."""
    lead, alice = crew.for_agent("lead", "crew"), crew.for_agent("alice", "crew")
    task = lead.create_task("Summarise the report", assignee="alice")
    remember = crew.engine.remember

    def reassign_meanwhile(*args: Any, **kwargs: Any) -> Any:  # between alice's check and her write
        lead.assign_task(task.id, "bob")
        return remember(*args, **kwargs)

    crew.engine.remember = reassign_meanwhile  # type: ignore[method-assign]
    with pytest.raises(MemoryAccessDenied, match="assigned to 'bob'"):
        alice.complete_task(task.id, "done")
    crew.engine.remember = remember  # type: ignore[method-assign]
    assert lead.get_task(task.id).status == "assigned" and lead.get_task(task.id).agent_id == "bob"
    assert crew.as_operator("crew").search("Summarise the report", "group") == []  # its result fact went


def test_losing_a_completion_race_keeps_the_fact_the_winner_holds(crew: SharedMemoryStore) -> None:
    """Two completions with the same result share one fact (a restatement): the loser forgot it, and the
    completed task pointed at a forgotten fact."""
    lead, alice = crew.for_agent("lead", "crew"), crew.for_agent("alice", "crew")
    task = lead.create_task("Count the votes", assignee="alice")
    remember = crew.engine.remember

    def win_meanwhile(*args: Any, **kwargs: Any) -> Any:
        receipt = remember(*args, **kwargs)
        crew.engine.remember = remember  # type: ignore[method-assign]
        alice.complete_task(task.id, "42 votes")  # the same result: the same fact, reinforced
        return receipt

    crew.engine.remember = win_meanwhile  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="already completed"):
        alice.complete_task(task.id, "42 votes")
    done = lead.get_task(task.id)
    assert done.status == "completed" and crew.operator.get(done.fact_id or "").status == "active"


def test_lookups_with_keys_no_backend_can_hold_answer_not_found(crew: SharedMemoryStore) -> None:
    lead = crew.for_agent("lead", "crew")
    lead.case_log.append("The vendor was chosen")
    with pytest.raises(TaskNotFoundError):
        lead.get_task("k\x00")
    with pytest.raises(TypeError, match="task_id must be a str"):
        lead.get_task(5)  # type: ignore[arg-type]
    with pytest.raises(UnknownAgentError):
        lead.get_agent("a\x00")
    assert lead.get_user_profile("a\x00") is None and lead.get_user_profile("\ud800") is None
    with pytest.raises(CheckpointError):
        lead.case_log.checkpoint("c\x00")
    with pytest.raises(ValueError, match="status must be one of"):
        lead.list_tasks(status="bogus")  # type: ignore[arg-type]
    for bad in (-1, 0, True):
        with pytest.raises(ValueError, match="limit"):
            lead.search_all_conversations("vendor", limit=bad)
        with pytest.raises(ValueError, match="limit"):
            lead.case_log.entries(limit=bad)
    with pytest.raises(ValueError, match="without NUL"):
        crew.state.retrieve_conversation("s\x00")


def test_text_no_backend_stores_as_given_is_refused_and_nothing_is_written(crew: SharedMemoryStore) -> None:
    lead = crew.for_agent("lead", "crew")
    for title in ("a\x00b", "a\ud800b"):
        with pytest.raises(ValueError):
            lead.create_task(title)
        with pytest.raises(ValueError):
            lead.case_log.append(title)  # append-only: a NUL would have stayed for good
    with pytest.raises(ValueError):
        crew.state.store_agent_state("a", "o", "k\ud800", 1)
    assert lead.list_tasks() == [] and lead.case_log.entries() == []


def test_record_fields_are_checked_and_text_is_kept_escaped(crew: SharedMemoryStore) -> None:
    """A 10k-character session id broke PostgreSQL's index (reported as an outage); a list as a role was
    stored as '{x}' there and refused by SQLite; a lone surrogate in a result lost the record; deep context
    raised RecursionError; a huge duration OverflowError."""
    with pytest.raises(ValueError, match="session_id is 10000 bytes"):
        crew.as_agent("alice").log_message("hello", session_id="s" * 10_000)
    with pytest.raises(TypeError, match="role must be a str"):
        crew.as_agent("alice").log_message("hello", role=["x"])  # type: ignore[arg-type]
    deep: Any = {}
    for _ in range(3000):
        deep = {"a": deep}
    with pytest.raises(TypeError, match="context must be JSON-serialisable"):
        crew.as_agent("alice").log_message("hello", context=deep)
    with pytest.raises(ValueError, match="duration_ms"):
        crew.as_agent("alice").log_tool_call("t", {}, "ok", duration_ms=10**400)
    assert crew.as_agent("alice").log_tool_call("t", {}, "r\ud800").result == "r\\ud800"
    assert crew.as_agent("alice").log_message("a\ud800b").content == "a\\ud800b"
    assert [r.content for r in crew.operator.conversation("alice")] == ["a\\ud800b"]


def test_directory_fields_are_checked(crew: SharedMemoryStore) -> None:
    lead = crew.for_agent("lead", "crew")
    with pytest.raises(TypeError, match="last_active_at must be a number"):
        lead.register(last_active_at="yesterday")
    with pytest.raises(ValueError, match="finite"):
        lead.register(last_active_at=float("nan"))
    with pytest.raises(ValueError, match="description is 8000 characters"):
        lead.register(description="x" * 8000)
