"""The store's settings, grouped by what they govern: recall, deduplication, the write policy.

Each group is a small frozen value object, checked when it is made (a bad value raises
:class:`~autogen_shared_memory.errors.InvalidInputError` there, not at the first search), so one object can be
shared by many stores, dumped into an AutoGen declarative config and compared::

    SharedMemoryStore(
        "./memory",
        recall=RecallSettings(context_weights=None),
        dedup=DedupSettings(near_duplicate=1.01),
        policy=WritePolicy(global_writers=("crew:lead",), review_global_writes=True),
    )

Storage knobs (the vector index of SQLite files, a PostgreSQL pool's size) are not here: they belong to the
backend (``open_backend(location, **options)``), which refuses an option it does not support.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from .core.types import DEFAULT_MAX_FACT_BYTES, SCOPE_KINDS, validate_owner_id
from .errors import InvalidInputError, InvalidInputTypeError

__all__ = ["DedupSettings", "RecallSettings", "WritePolicy"]


def _number(value: object, what: str, low: float, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputTypeError(f"{what} must be a number, got {type(value).__name__}")
    if math.isnan(value) or not low <= value <= high:
        raise InvalidInputError(f"{what} must be between {low} and {high}, got {value}")
    return float(value)


def _count(value: object, what: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputTypeError(f"{what} must be an int, got {type(value).__name__}")
    if not 1 <= value <= maximum:
        raise InvalidInputError(f"{what} must be between 1 and {maximum}, got {value}")
    return value


@dataclass(frozen=True)
class RecallSettings:
    """How a search ranks: the two legs, their fusion, and neighbour context (docs/recall-quality.md).

    Attributes:
        rrf_k: the Reciprocal Rank Fusion constant. 5: a fact at rank 1 of one leg beats one at rank 30 of
            both (with the textbook 60 it does not, which recalled less on LoCoMo).
        lexical_weight: the BM25 leg's weight in the fusion.
        semantic_weight: the embedding leg's weight in the fusion.
        scope_weights: multipliers of each scope kind's contribution when a search fuses scopes (``agent``,
            ``group``, ``global``; a kind left out weighs 1).
        search_depth: candidates taken from each leg of each scope before fusion.
        min_similarity: semantic candidates below this cosine are dropped (noise, not recall); lexical
            matches are kept regardless.
        context_weights: ``(prev, next)``: neighbour context. A recalled fact lends these shares of its
            score to the facts written just before and after it in the same session, so the answer that follows
            the turn matching the question's words is recalled with it. Only sessions the writer named count
            (``session_id`` given to ``remember``/``remember_many``): facts written without one share their
            store's run, whose order means nothing, and never lend. ``None`` (or ``(0, 0)`` for one search):
            off.
    """

    rrf_k: float = 5.0
    lexical_weight: float = 1.0
    semantic_weight: float = 0.5
    scope_weights: Mapping[str, float] = field(default_factory=dict)
    search_depth: int = 50
    min_similarity: float = 0.15
    context_weights: tuple[float, float] | None = (0.5, 0.2)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # a frozen dataclass normalises its own fields this way
        set_(self, "rrf_k", _number(self.rrf_k, "rrf_k", 0.0))
        set_(self, "lexical_weight", _number(self.lexical_weight, "lexical_weight", 0.0, 1e6))
        set_(self, "semantic_weight", _number(self.semantic_weight, "semantic_weight", 0.0, 1e6))
        if not isinstance(self.scope_weights, Mapping):
            raise InvalidInputTypeError("scope_weights must be a mapping of scope kind to weight")
        weights = {"agent": 1.0, "group": 1.0, "global": 1.0}
        for name, weight in self.scope_weights.items():
            if name not in SCOPE_KINDS:
                raise InvalidInputError(f"scope_weights takes agent/group/global, got {name!r}")
            weights[name] = _number(weight, f"scope_weights[{name!r}]", 0.0, 1e6)
        set_(self, "scope_weights", weights)
        set_(self, "search_depth", _count(self.search_depth, "search_depth", 10_000))
        set_(self, "min_similarity", _number(self.min_similarity, "min_similarity", -1.0, 1.0))
        if self.context_weights is not None:
            pair = self.context_weights
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise InvalidInputError(f"context_weights must be (prev, next) in [0, 1], got {pair!r}")
            set_(self, "context_weights", tuple(_number(w, "context_weights", 0.0, 1.0) for w in pair))

    def __hash__(self) -> int:
        return hash(
            (
                self.rrf_k,
                self.lexical_weight,
                self.semantic_weight,
                tuple(sorted(self.scope_weights.items())),
                self.search_depth,
                self.min_similarity,
                self.context_weights,
            )
        )


@dataclass(frozen=True)
class DedupSettings:
    """When a new fact is merged into one the scope already holds, and when it is only reported as similar.

    Exact duplicates (equal after Unicode, case, whitespace and punctuation normalisation) always reinforce
    the fact they repeat, whatever these thresholds.

    Attributes:
        near_duplicate: cosine at or above which a new fact reinforces an existing one *if* the two have the
            same wording (the same words in order, up to punctuation, case, contractions and articles);
            ``> 1`` switches near duplicates off.
        similar: cosine at or above which a stored fact that was not merged is listed in the receipt's
            ``similar``, so the writer can supersede it; ``> 1`` lists none.
    """

    near_duplicate: float = 0.95
    similar: float = 0.8

    def __post_init__(self) -> None:
        for name in ("near_duplicate", "similar"):
            value = _number(getattr(self, name), name, 0.0, 1e6)
            if value == 0.0:
                raise InvalidInputError(f"{name} must be > 0 (use a value > 1 to disable)")
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class WritePolicy:
    """Who may write where, and how much.

    Attributes:
        global_writers: agent ids allowed to write the global scope (``"*"``: every agent). The operator
            (``store.operator``) always may.
        review_global_writes: let other agents write the global scope too, but hold their facts for review
            (status ``pending``, never recalled) until the operator or a global writer approves them. Off:
            such writes are denied.
        write_budget: at most this many facts an agent may write into one scope in 24 hours (``None``: no
            limit). Bounds how fast one agent, or a prompt injected into it, can flood a shared scope; the
            operator is not limited.
        max_fact_bytes: the largest fact accepted, in UTF-8 bytes.
        operator_id: the author recorded for the operator's writes; no agent may use it.
    """

    global_writers: tuple[str, ...] = ()
    review_global_writes: bool = False
    write_budget: int | None = None
    max_fact_bytes: int = DEFAULT_MAX_FACT_BYTES
    operator_id: str = "system"

    def __post_init__(self) -> None:
        writers = self.global_writers
        if isinstance(writers, str):
            writers = (writers,)
        if not isinstance(writers, (tuple, list, set, frozenset)):
            raise InvalidInputTypeError("global_writers must be a list of agent ids")
        checked = sorted({w if w == "*" else validate_owner_id(w, "global writer id") for w in writers})
        object.__setattr__(self, "global_writers", tuple(checked))
        if not isinstance(self.review_global_writes, bool):
            raise InvalidInputTypeError("review_global_writes must be a bool")
        if self.write_budget is not None:
            object.__setattr__(self, "write_budget", _count(self.write_budget, "write_budget", 10**9))
        object.__setattr__(self, "max_fact_bytes", _count(self.max_fact_bytes, "max_fact_bytes", 16 * 1024 * 1024))
        object.__setattr__(self, "operator_id", validate_owner_id(self.operator_id, "operator_id"))
