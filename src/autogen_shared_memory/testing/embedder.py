"""A deterministic, dependency-free embedder for fast tests of code that uses the store.

It is not semantic (it hashes words into buckets), so tests of real paraphrase recall use the real model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel
from typing_extensions import Self

from ..component import Component, ComponentBase
from ..embedding import Vectors, normalize
from ..search.text import fold, query_terms, stem


class HashEmbedderConfig(BaseModel):
    dimension: int = 256
    model_id: str = "test-hash-embedder"


class HashEmbedder(ComponentBase[HashEmbedderConfig], Component[HashEmbedderConfig]):
    """Bag of stemmed words hashed into ``dimension`` buckets, L2-normalised."""

    component_type = "embedder"
    component_provider_override = "autogen_shared_memory.testing.HashEmbedder"
    component_config_schema = HashEmbedderConfig

    def __init__(self, dimension: int = 256, model_id: str = "test-hash-embedder") -> None:
        self._dimension = dimension
        self._model_id = model_id
        self.calls: list[int] = []  # batch sizes, so tests can assert batching

    def _to_config(self) -> HashEmbedderConfig:
        return HashEmbedderConfig(dimension=self._dimension, model_id=self._model_id)

    @classmethod
    def _from_config(cls, config: HashEmbedderConfig) -> Self:
        return cls(config.dimension, config.model_id)

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
