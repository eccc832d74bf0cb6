"""The lexical leg's arithmetic: FTS5's IDF, which query terms are worth scoring (the postings budget), which
facts are worth ranking (the anchor terms), and BM25 made comparable across files. The SQL that runs it is
the backend's."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

MARKED = re.compile("\x01([^\x02]*)\x02")  # a token FTS5's highlight() marked as matched


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
    every term). FTS5 computes BM25 for every row matching the OR of the terms, about a microsecond per
    posting: without a bound, a 100k-fact scope spends 20 ms on terms like "team" or "deploy" that barely move
    the ranking (low IDF) while the rare terms decide it. The budget makes the leg's cost independent of the
    scope size; the semantic leg still sees every fact.
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


def split_anchors(
    kept: Sequence[str], stems: Mapping[str, str], df: Mapping[str, int], budget: float
) -> tuple[list[str], list[str]]:
    """``kept`` split into anchor terms and the rest: the facts worth ranking are those holding an anchor.

    Anchors are taken rarest first while their posting lists together hold at most ``budget`` rows (the
    rarest term is always one). FTS5 spends ~2 us per matching row on BM25 alone (a ``docsize`` lookup and
    the row's positions), whatever the row's score: at 100k facts the kept terms match ~3,000 rows, mostly
    through their commoner terms, for a top 50. Ranking only the facts that hold an anchor, with every kept
    term still counted in their scores, bounds that work by ``budget``; a fact with commoner terms only is
    left out, as it rarely outranks one with a rarer term. (Terms sharing a stem go to the same side.)
    When everything fits, the rest is empty: one ordinary query.
    """
    anchors: set[str] = set()
    postings = 0
    for term in sorted(dict.fromkeys(stems[t] for t in kept), key=lambda t: df.get(t, 0)):  # ties: query order
        count = df.get(term, 0)
        if anchors and postings + count > budget:
            break
        anchors.add(term)
        postings += count
    return [t for t in kept if stems[t] in anchors], [t for t in kept if stems[t] not in anchors]


def shared_bm25(bm25: float, matched: Sequence[tuple[float, float]]) -> float:
    """A hit's BM25 in its own file, as it would be if the searched files were one collection.

    ``matched`` holds ``(file IDF, shared IDF)`` of each query term the hit contains: BM25 is scaled by
    ``sum(shared) / sum(file)``, exact for terms occurring once. A 5-fact agent scope's perfect match would
    otherwise score far below a big group scope's one-word match.
    """
    local, shared = sum(m[0] for m in matched), sum(m[1] for m in matched)
    return bm25 * shared / local if local > 0 else bm25
