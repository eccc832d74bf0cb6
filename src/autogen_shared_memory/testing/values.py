"""Values for tests of code that reads facts and vectors: a fact with every field set, a vector at a chosen
cosine."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.types import Fact, ScopeRef


def make_fact(**fields: Any) -> Fact:
    """An active group fact by ``alice`` with every field set, for tests of code that reads facts; any field
    can be given."""
    values: dict[str, Any] = {
        "id": "g_00000000000000000001",
        "scope": ScopeRef("group", "crew"),
        "content": "a fact",
        "created_by": "alice",
        "created_at": 1_700_000_000.0,
        "confidence": 1.0,
        "tags": (),
        "category": None,
        "metadata": {},
        "session_id": None,
        "expires_at": None,
        "supersedes": (),
        "superseded_by": None,
        "status": "active",
        "tombstone_by": None,
        "tombstone_at": None,
        "tombstone_reason": None,
        "reinforcement": 1,
        "content_hash": "",
        "version": 1,
        "updated_at": 1_700_000_000.0,
        **fields,
    }
    return Fact(**values)


def vector_at_cosine(c: float, dim: int, rng: np.random.Generator) -> np.ndarray:
    """A unit vector of ``dim`` components whose cosine with the first axis is ``c`` (tests choose cosines)."""
    w = rng.standard_normal(dim)
    w[0] = 0.0
    v = np.sqrt(1.0 - c * c) * w / np.linalg.norm(w)
    v[0] = c
    return np.asarray(v, dtype=np.float64)
