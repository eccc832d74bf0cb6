"""Neighbour context is on by default, and only inside a session the writer named: a recalled turn lends
credit to the turns written next to it in a conversation, never to facts that merely followed one another in
a store's run. Runs on every backend (the rule is in each backend's ``neighbours``)."""

from __future__ import annotations

from collections.abc import Callable

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.core.types import RUN_SESSION_PREFIX, Hit

StoreFactory = Callable[..., SharedMemoryStore]

TURNS = [
    "Caroline: what is your favourite sport?",
    "Melanie: swimming, every morning since I was six",
    "Caroline: nice, I prefer chess",
    "Melanie: unrelated note about groceries",
]
QUERY = "favourite sport"


def _ids(hits: list[Hit]) -> list[str]:
    return [h.id for h in hits]


def test_the_default_recalls_the_answer_next_to_the_matching_turn_of_a_named_session(make_store: StoreFactory) -> None:
    store = make_store()
    receipts = store.operator.remember_many(TURNS, "global", session_id="chat-1")
    store.operator.remember("Other session: sport talk elsewhere", "global", session_id="chat-2")
    answer, question = receipts[1].id, receipts[0].id
    # the answer shares no word with the question: only its neighbour can bring it in
    assert answer not in _ids(store.operator.search(QUERY, "global", top_k=3, context_weights=(0.0, 0.0)))
    hits = {h.id: h for h in store.operator.search(QUERY, "global", top_k=3)}
    assert answer in hits and hits[answer].context_of == question
    assert hits[question].context_of is None


def test_facts_written_without_a_session_lend_their_neighbours_nothing(make_store: StoreFactory) -> None:
    store = make_store()
    receipts = store.operator.remember_many(TURNS, "global")  # no session named: the store's run
    assert store.operator.get(receipts[0].id).session_id.startswith(RUN_SESSION_PREFIX)
    store.operator.remember("Other note: sport talk elsewhere", "global")
    hits = store.operator.search(QUERY, "global", top_k=3)
    assert receipts[0].id in _ids(hits) and receipts[1].id not in _ids(hits)
    assert all(h.context_of is None for h in hits)
