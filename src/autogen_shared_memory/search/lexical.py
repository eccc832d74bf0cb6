"""The lexical leg's choice of terms: FTS5's IDF, and which query terms are worth scoring (the postings
budget). Scoring them is :mod:`.postings`'s."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def idf(n_facts: int, hits: int) -> float:
    """Inverse document frequency as FTS5's ``bm25()`` computes it."""
    return max(math.log((n_facts - hits + 0.5) / (hits + 0.5)), 1e-6)


def choose_terms(
    terms: Sequence[str],
    stems: Mapping[str, str],
    n: int,
    df: Mapping[str, int],
    *,
    common_ratio: float,
    budget: float,
) -> list[str]:
    """The terms worth scoring in a file of ``n`` facts with document frequencies ``df`` (by stem).

    Terms are taken rarest first while each is in at most ``common_ratio`` of the facts and their posting
    lists together hold at most ``budget`` rows (the rarest term is always kept; files under 1,000 facts keep
    every term). Terms like "team" or "deploy" in a 100k-fact scope barely move the ranking (low IDF) while
    the rare terms decide it, yet scoring them costs per posting (FTS5: about a microsecond each, 20 ms a
    search; in memory far less, but their matches still crowd out rarer ones'). The budget makes the leg's
    cost independent of the scope size and its ranking the same on every backend; the semantic leg still
    sees every fact.
    """
    if n < 1000 or len(terms) < 2:
        return list(terms)
    common = common_ratio * n
    kept: set[str] = set()
    postings = 0
    # "reports", "reported": one stem. Ties go to the query's earlier term (a set's order would change with
    # the process's hash seed, and with it the ranking of the same query on the same facts).
    for term in sorted(dict.fromkeys(stems[t] for t in terms), key=lambda t: df.get(t, 0)):
        count = df.get(term, 0)
        if kept and (count > common or postings + count > budget):
            break
        kept.add(term)
        postings += count
    return [t for t in terms if stems[t] in kept]
