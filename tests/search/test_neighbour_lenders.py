"""Neighbour context asks for the neighbours of the best candidates only, and lends nothing at weight 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from autogen_shared_memory.core.types import ScopeRef
from autogen_shared_memory.search.fusion import neighbour_context

GROUP = ScopeRef("group", "crew")
SESSION = {"a": (None, "a2"), "b": (None, "b2"), "c": (None, "c2")}  # each candidate's reply follows it


def test_only_the_best_candidates_lend_and_their_neighbours_are_all_that_is_looked_up() -> None:
    asked: list[str] = []

    def neighbours(
        wanted: Mapping[ScopeRef, Sequence[str]],
    ) -> dict[ScopeRef, dict[str, tuple[str | None, str | None]]]:
        for ids in wanted.values():
            asked.extend(ids)
        return {scope: {i: SESSION[i] for i in ids} for scope, ids in wanted.items()}

    base = {(GROUP, "c"): 0.1, (GROUP, "a"): 0.3, (GROUP, "b"): 0.2}
    final, lender = neighbour_context(base, (0.5, 0.2), neighbours, pull_in=True, lenders=2)
    assert sorted(asked) == ["a", "b"]  # "c", the weakest, is not looked up
    assert final[(GROUP, "a2")] == pytest.approx(0.15) and final[(GROUP, "b2")] == pytest.approx(0.1)
    assert (GROUP, "c2") not in final and lender == {(GROUP, "a2"): "a", (GROUP, "b2"): "b"}
    everyone, _ = neighbour_context(base, (0.5, 0.2), neighbours, pull_in=True)
    assert everyone[(GROUP, "c2")] == pytest.approx(0.05)


def test_a_zero_weight_pulls_in_nothing() -> None:
    base = {(GROUP, "a"): 0.3}
    final, lender = neighbour_context(base, (0.5, 0.0), lambda wanted: {GROUP: {"a": ("before", "a2")}}, pull_in=True)
    assert final == pytest.approx({(GROUP, "a"): 0.3, (GROUP, "a2"): 0.15}) and lender == {(GROUP, "a2"): "a"}
