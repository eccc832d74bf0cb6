"""Capsules never exceed their byte budget, never split a character, and count what they leave out."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autogen_shared_memory import Hit, SharedMemoryStore
from autogen_shared_memory.capsule import capsule, truncate_utf8
from autogen_shared_memory.testing import make_fact


def make_hit(content: str, i: int = 0, **over: object) -> Hit:
    return Hit(make_fact(id=f"g_{i:020x}", content=content, **over), 0.03, 1, 1, 0.9)


@given(st.lists(st.text(min_size=1, max_size=600), max_size=30), st.integers(min_value=64, max_value=5000))
def test_capsule_within_budget_and_counts_omissions(contents: list[str], budget: int) -> None:
    hits = [make_hit(c, i) for i, c in enumerate(contents)]
    text = capsule(hits, budget)
    data = text.encode("utf-8")
    assert len(data) <= budget
    data.decode("utf-8")  # strict: no split character
    if hits:
        m = re.match(r"\[memory: (\d+) of (\d+) facts(?:, (\d+) left out by the size limit)?\]", text)
        assert m is not None
        shown, total, left = int(m[1]), int(m[2]), int(m[3] or 0)
        assert total == len(hits) and shown + left == total
        assert text.count("\n- [") == shown


@given(st.text(max_size=200), st.integers(min_value=0, max_value=300))
def test_truncate_utf8(text: str, limit: int) -> None:
    out = truncate_utf8(text, limit)
    assert len(out.encode()) <= limit and text.startswith(out)


def test_capsule_shows_ids_and_provenance() -> None:
    hit = make_hit(
        "Deploys happen on Thursdays",
        7,
        confidence=0.75,
        reinforcement=5,
        stated_by=("alice", "bob", "carol"),
        tags=("ops",),
    )
    text = capsule([hit], 2048)
    assert hit.id in text and "group:crew" in text and "by alice" in text and "2023-11-14" in text
    assert "conf 0.75" in text and "x3" in text and "x5" not in text and "#ops" in text
    # one agent repeating itself 20 times is one voice, not "x20"
    assert "x20" not in capsule([make_hit("Deploys happen on Thursdays", 8, reinforcement=20)], 2048)


def test_long_fact_is_cut_with_marker() -> None:
    text = capsule([make_hit("word " * 1000)], 300)
    assert len(text.encode()) <= 300 and text.endswith("…")
    assert text.startswith("[memory: 1 of 1 facts]")


def test_capsule_rejects_silly_budgets() -> None:
    with pytest.raises(ValueError):
        capsule([], 10)
    with pytest.raises(TypeError):
        capsule([], 100.5)  # type: ignore[arg-type]
    assert capsule([], 64) == "[memory: no matching facts]"


def test_store_recall_returns_a_capsule(store: SharedMemoryStore) -> None:
    for i in range(40):
        store.remember(f"incident {i}: the payment service timed out after deploy {i}", "global")
    text = store.recall("payment service timeout", "global", top_k=40, max_bytes=512)
    assert len(text.encode()) <= 512 and "left out by the size limit" in text
