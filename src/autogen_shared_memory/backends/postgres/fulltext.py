"""Record tables' full text on PostgreSQL, matched as SQLite's FTS5 matches it.

PostgreSQL's own text search (``to_tsvector('english', ...)``) keeps diacritics, drops its stop words and
cuts words its own way: ``cafe`` did not find "café", ``the`` and ``don't`` found nothing, ``10.0.0.1``
neither, where FTS5 (``porter unicode61 remove_diacritics 2``) finds them. So the backend writes each row's
``tsvector`` itself from the terms and positions FTS5 gives the text (read from an in-memory FTS5 table's
``fts5vocab``: FTS5's own tokenizer and stemmer, not a copy of them), and a query is the OR of the terms,
each the phrase of its FTS5 terms (what FTS5 reads in a quoted string). Both are given as
``tsvector``/``tsquery`` literals, so PostgreSQL's parser and dictionaries never see the text.

Where PostgreSQL's limits bind (FTS5 has none of them), a row keeps what fits: terms of at most 2046 bytes,
256 positions per term and about 1 MB in all; words after the 16383rd share that position, so they are found
alone but not in a phrase.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ...search.text import fts5_terms

MAX_LEXEME_BYTES = 2046  # PostgreSQL refuses longer lexemes ("word is too long")
MAX_POSITION = 16383  # PostgreSQL's last position
MAX_POSITIONS = 256  # positions PostgreSQL keeps per lexeme
MAX_TSVECTOR_BYTES = 1_000_000  # PostgreSQL refuses a tsvector past 1 MB (lexemes, positions, headers)


def quoted(lexeme: str) -> str:
    """A lexeme as a ``tsvector``/``tsquery`` literal's quoted string."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector_literal(text: str | None) -> str | None:
    """The ``tsvector`` of ``text`` as a literal: each FTS5 term with its positions (None for None)."""
    return None if text is None else tsvector_of_terms(fts5_terms(text))


def tsvector_of_terms(terms: Iterable[str]) -> str:
    """The ``tsvector`` literal of a text's ``terms`` (in order; the first is at position 1)."""
    positions: dict[str, list[int]] = {}
    size = 0
    for i, term in enumerate(terms, 1):
        i = min(i, MAX_POSITION)  # later words share the last position, as to_tsvector gives them
        at = positions.get(term)
        if at is None:
            cost = len(term.encode()) + 8
            if cost - 8 > MAX_LEXEME_BYTES or size + cost > MAX_TSVECTOR_BYTES:
                continue
            positions[term] = at = []
            size += cost
        if len(at) < MAX_POSITIONS and (not at or at[-1] < i) and size + 2 <= MAX_TSVECTOR_BYTES:
            at.append(i)
            size += 2
    return " ".join(f"{quoted(term)}:{','.join(map(str, at))}" for term, at in positions.items())


def tsquery_literal(terms: Sequence[str]) -> str:
    """The ``tsquery`` of ``terms`` as a literal: the OR of the terms, each the phrase of its FTS5 terms (''
    when no term has a word: it matches nothing)."""
    phrases = []
    for term in terms:
        words = fts5_terms(term)
        if words and all(len(w.encode()) <= MAX_LEXEME_BYTES for w in words):
            phrases.append(" <-> ".join(map(quoted, words)))
    return " | ".join(f"( {p} )" for p in dict.fromkeys(phrases))
