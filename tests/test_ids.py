"""Ids that become file names cannot escape the root or collide."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autogen_shared_memory import ScopeRef, SharedMemoryStore
from autogen_shared_memory.backends.sqlite import owner_file_token, scope_file_name
from autogen_shared_memory.core.types import kind_of_fact_id, new_fact_id, validate_owner_id


@pytest.mark.parametrize(
    ("bad", "rule"),
    [
        ("../x", "path separator"),
        ("a/b", "path separator"),
        ("a\\b", "path separator"),
        ("nul\x00byte", "control character"),
        ("line\nbreak", "control character"),
        ("x" * 500, "limit is 128"),
        ("x" * 129, "is 129 characters; the limit is 128"),
        ("é" * 129, "is 129 characters; the limit is 128"),  # characters, not bytes
        ("", "empty"),
        ("   ", "blank"),
        ("..", "relative path"),
        (".", "relative path"),
    ],
)
def test_rejected_ids_name_the_rule(bad: str, rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        validate_owner_id(bad, "agent id")
    with pytest.raises(ValueError, match=rule):
        ScopeRef("agent", bad)


def test_an_id_of_128_characters_is_accepted() -> None:
    for longest in ("x" * 128, "é" * 128):  # 256 bytes in UTF-8: the limit counts characters
        assert validate_owner_id(longest, "agent id") == longest
        assert ScopeRef("agent", longest).owner == longest


def test_non_string_id_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        validate_owner_id(42)


def test_safe_ids_are_verbatim_and_others_encoded() -> None:
    assert scope_file_name(ScopeRef("agent", "researcher")) == "agent_researcher.db"
    assert scope_file_name(ScopeRef("group", "team-1")) == "group_team-1.db"
    assert scope_file_name(ScopeRef("global")) == "global.db"
    encoded = scope_file_name(ScopeRef("agent", "Alice"))
    assert encoded.startswith("agent_alice~") and encoded != "agent_alice.db"
    assert "~" in scope_file_name(ScopeRef("agent", "café ☕"))
    assert "~" in scope_file_name(ScopeRef("agent", "a..b"))


def test_case_variants_get_different_files_even_case_insensitively() -> None:
    names = {scope_file_name(ScopeRef("agent", i)).lower() for i in ("alice", "Alice", "ALICE", "aLiCe")}
    assert len(names) == 4


@given(st.lists(st.text(min_size=1, max_size=60), min_size=2, max_size=8, unique=True))
def test_tokens_never_collide_or_escape(ids: list[str]) -> None:
    valid = []
    for i in ids:
        try:
            valid.append(validate_owner_id(i))
        except ValueError:
            continue
    tokens = [owner_file_token(i).lower() for i in valid]
    assert len(set(tokens)) == len(tokens)
    for token in tokens:
        assert "/" not in token and "\\" not in token and "\x00" not in token
        assert token not in (".", "..") and not token.startswith(".")
        assert len(token.encode()) < 100


def test_store_files_stay_inside_root(store: SharedMemoryStore, tmp_path: Path) -> None:
    for agent in ("Alice", "alice", "éclair", "x.y", "名字"):
        store.as_agent(agent).remember(f"fact of {agent}", "agent")
    root = store.root.resolve()
    files = sorted(p.name for p in root.iterdir() if p.suffix == ".db")
    assert len([f for f in files if f.startswith("agent_")]) == 5
    assert all(p.resolve().parent == root for p in root.iterdir())
    # each agent reads back only its own fact
    for agent in ("Alice", "alice", "éclair"):
        hits = store.as_agent(agent).search("fact", "agent")
        assert [h.content for h in hits] == [f"fact of {agent}"]


def test_bad_agent_id_through_the_store_writes_nothing(store: SharedMemoryStore, tmp_path: Path) -> None:
    store.root.mkdir(parents=True, exist_ok=True)
    before = sorted(store.root.iterdir())
    with pytest.raises(ValueError, match="path separator"):
        store.as_agent("../evil").remember("x", "agent")
    assert sorted(store.root.iterdir()) == before
    assert not (tmp_path / "evil.db").exists()


def test_fact_ids_never_repeat_and_sort_in_creation_order() -> None:
    """A batch creates thousands of ids per millisecond (32 random bits alone collided in a benchmark)."""
    ids = [new_fact_id("group") for _ in range(200_000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert {kind_of_fact_id(i) for i in ids[:10]} == {"group"}
