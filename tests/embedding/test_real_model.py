"""Recall with the real all-MiniLM-L6-v2 (packaged copy, offline). These run in CI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autogen_shared_memory import EmbeddingModelError, OnnxEmbedder, SentenceTransformerEmbedder, SharedMemoryStore
from autogen_shared_memory.embedding import DEFAULT_MODEL_ID

pytestmark = pytest.mark.model

FACTS = [
    "The staging database is rebuilt from production snapshots every Sunday night.",
    "Invoices must be approved by the finance lead before payment.",
    "The customer's preferred contact channel is email, never phone calls.",
    "Error code E1042 means the payment gateway rejected the card.",
    "Our mobile app supports iOS 16 and newer only.",
    "The office coffee machine is descaled on the first Monday of the month.",
    "Pull requests need two approvals before merging to main.",
    "The CEO wants weekly summaries as bullet points, no longer than one page.",
]


@pytest.fixture
def real_store(tmp_path: Path, minilm: OnnxEmbedder) -> SharedMemoryStore:
    store = SharedMemoryStore(tmp_path, embedder=minilm)
    store.operator.remember_many(FACTS, "global")
    return store


def test_model_identity_and_vectors(minilm: OnnxEmbedder) -> None:
    assert minilm.model_id == DEFAULT_MODEL_ID and minilm.dimension == 384
    v = minilm.embed(["hello world", "a second text"])
    assert v.shape == (2, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


def test_paraphrase_without_shared_keyword_finds_its_fact(real_store: SharedMemoryStore) -> None:
    hits = real_store.operator.search("How should I reach out to the client?", "global", top_k=3)
    assert hits[0].content == FACTS[2]
    assert hits[0].lexical_rank is None and hits[0].semantic_rank == 1  # found by meaning alone
    hits = real_store.operator.search(
        "Which operating system versions is our application compatible with?", "global", top_k=3
    )
    assert hits[0].content == FACTS[4]


def test_hybrid_puts_keyword_and_paraphrase_facts_on_top(real_store: SharedMemoryStore) -> None:
    real_store.operator.remember("Reviewers reject code changes that lack tests.", "global")
    # "E1042" is a keyword only the lexical leg can match; "card declined" is a paraphrase of the same fact
    hits = real_store.operator.search("E1042 card declined", "global", top_k=3)
    assert hits[0].content == FACTS[3] and hits[0].lexical_rank == 1
    hits = real_store.operator.search("merging rules: approvals and review of code changes", "global", top_k=3)
    top = {h.content for h in hits[:2]}
    assert FACTS[6] in top and "Reviewers reject code changes that lack tests." in top


def test_near_duplicate_paraphrase_reinforces(real_store: SharedMemoryStore) -> None:
    # the same words up to the final stop, an article and a contraction: a near duplicate (not an exact one)
    r = real_store.operator.remember(
        "Pull-requests need two approvals before merging to main; don't skip them.", "global"
    )
    again = real_store.operator.remember(
        "Pull-requests need two approvals before merging to the main; do not skip them", "global"
    )
    assert again.status == "reinforced" and again.duplicate_of == r.id
    assert again.similarity is not None and again.similarity >= 0.95
    assert real_store.operator.remember("Pull requests need one approval.", "global").status == "created"


@pytest.mark.parametrize("kind", [OnnxEmbedder, SentenceTransformerEmbedder])
def test_missing_model_is_a_clear_error_and_writes_nothing(tmp_path: Path, kind: type) -> None:
    store = SharedMemoryStore(tmp_path / "mem", embedder=kind(tmp_path / "no-model"))
    with pytest.raises(EmbeddingModelError, match="no-model"):
        store.operator.remember("anything", "global")
    assert not (tmp_path / "mem" / "global.db").exists()


@pytest.mark.parametrize("kind", [OnnxEmbedder, SentenceTransformerEmbedder])
def test_broken_model_folder_is_a_clear_error(tmp_path: Path, kind: type) -> None:
    folder = tmp_path / "broken"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "1_Pooling" / "config.json").write_text('{"word_embedding_dimension": 384}')
    store = SharedMemoryStore(tmp_path / "mem", embedder=kind(folder))
    with pytest.raises(EmbeddingModelError, match="broken"):  # the message names the folder
        store.operator.remember("anything", "global")
    assert not (tmp_path / "mem" / "global.db").exists()
