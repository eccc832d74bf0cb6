"""Test helpers: a deterministic, dependency-free embedder for fast unit tests of code that uses the store.

It is not semantic (it hashes words into buckets), so tests of real paraphrase recall use the real model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from .embedding import Vectors, normalize
from .recall import fold, query_terms, stem


class HashEmbedder:
    """Bag of stemmed words hashed into ``dimension`` buckets, L2-normalised."""

    def __init__(self, dimension: int = 256, model_id: str = "test-hash-embedder") -> None:
        self._dimension = dimension
        self._model_id = model_id
        self.calls: list[int] = []  # batch sizes, so tests can assert batching

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in query_terms(fold(text), max_terms=10_000):
                digest = hashlib.blake2b(stem(word).encode(), digest_size=8).digest()
                out[row, int.from_bytes(digest[:4], "little") % self._dimension] += 1.0
            if not out[row].any():
                out[row, 0] = 1.0
        return normalize(out)
