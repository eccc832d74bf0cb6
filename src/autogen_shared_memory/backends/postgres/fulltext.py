"""Record tables' full text on PostgreSQL, matched as SQLite's FTS5 matches it.

PostgreSQL's own text search (``to_tsvector('english', ...)``) keeps diacritics, drops its stop words and
cuts words its own way: ``cafe`` did not find "café", ``the`` and ``don't`` found nothing, ``10.0.0.1``
neither, where FTS5 (``porter unicode61 remove_diacritics 2``) finds them. So the backend writes each row's
``tsvector`` itself, from the tokens and Porter stems of :mod:`...search.text` (what FTS5 stores), with their
positions, and a query is the OR of the terms, each a phrase of its stems (what FTS5 reads in a quoted
string). Both are given as ``tsvector``/``tsquery`` literals, so PostgreSQL's parser and dictionaries never
see the text. Lexemes are letters and digits only (no quote or backslash to escape).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...search.text import stem, tokens

MAX_LEXEME_BYTES = 2046  # PostgreSQL refuses longer lexemes ("word is too long"); FTS5 would keep them
MAX_POSITION = 16383  # PostgreSQL's last position: later words share it (as to_tsvector does)
MAX_POSITIONS = 256  # positions PostgreSQL keeps per lexeme


def tsvector_literal(text: str | None) -> str | None:
    """The ``tsvector`` of ``text`` as a literal: each stem with its word positions (None for None)."""
    if text is None:
        return None
    positions: dict[str, list[int]] = {}
    for i, word in enumerate(tokens(text), 1):
        lexeme = stem(word)
        if len(lexeme.encode()) > MAX_LEXEME_BYTES:
            continue
        at = positions.setdefault(lexeme, [])
        if len(at) < MAX_POSITIONS and (not at or at[-1] < MAX_POSITION):
            at.append(min(i, MAX_POSITION))
    return " ".join(f"'{lexeme}':{','.join(map(str, at))}" for lexeme, at in positions.items())


def tsquery_literal(terms: Sequence[str]) -> str:
    """The ``tsquery`` of ``terms`` as a literal: the OR of the terms, each the phrase of its stems ('' when
    no term has a word: it matches nothing)."""
    phrases = []
    for term in terms:
        stems = [stem(w) for w in tokens(term)]
        stems = [s for s in stems if len(s.encode()) <= MAX_LEXEME_BYTES]
        if stems:
            phrases.append(" <-> ".join(f"'{s}'" for s in stems))
    return " | ".join(f"( {p} )" for p in dict.fromkeys(phrases))
