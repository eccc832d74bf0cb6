"""Bench-only embedders: real core-sentence vectors plus calibrated noise, so large stores cost no model time."""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence

import numpy as np

from autogen_shared_memory.embedding import Embedder, Vectors, normalize
from common.corpus import Corpus
from common.measure import pct


class PooledNoiseEmbedder:
    """Bench-only embedder: the REAL vector of a fact's core sentence + deterministic noise, re-normalised.

    Presents the real model's id and dimension, so the stores it fills are searched with the real model.
    """

    def __init__(self, model_id: str, core_vectors: Vectors, core_of: dict[str, int], sigma: float, seed: int) -> None:
        self._model_id = model_id
        self._vectors = core_vectors
        self._core_of = core_of
        self._sigma = sigma
        self._seed = seed

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimension(self) -> int:
        return int(self._vectors.shape[1])

    def embed(self, texts: Sequence[str]) -> Vectors:
        dim = self.dimension
        base = self._vectors[[self._core_of[t] for t in texts]]
        noise = np.empty((len(texts), dim), dtype=np.float32)
        for i, text in enumerate(texts):
            rng = np.random.default_rng((self._seed, zlib.crc32(text.encode())))
            noise[i] = rng.standard_normal(dim, dtype=np.float32)
        return normalize(base + self._sigma * noise)


def calibrate_noise(
    embedder: Embedder, corpus: Corpus, core_vectors: Vectors, sample: int, seed: int
) -> dict[str, float]:
    """Sigma such that E[cos(noisy, core)] = the measured mean cos(real fact vector, real core vector)."""
    rng = random.Random(seed)
    texts = rng.sample(corpus.facts, min(sample, len(corpus.facts)))
    real = embedder.embed(texts)
    cores = core_vectors[[corpus.core_of[t] for t in texts]]
    cos = np.sum(real * cores, axis=1)
    c = float(np.clip(np.mean(cos), 0.05, 0.999))
    dim = core_vectors.shape[1]
    sigma = float(np.sqrt((1.0 / c**2 - 1.0) / dim))
    noisy = PooledNoiseEmbedder("x", core_vectors, corpus.core_of, sigma, seed).embed(texts)
    return {
        "sample": len(texts),
        "cos_real_fact_to_core_mean": c,
        "cos_real_fact_to_core_p5": pct(cos.tolist(), 5),
        "sigma": sigma,
        "cos_noisy_to_core_mean": float(np.mean(np.sum(noisy * cores, axis=1))),
        "cos_noisy_to_real_fact_mean": float(np.mean(np.sum(noisy * real, axis=1))),
    }
