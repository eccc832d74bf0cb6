"""Query text to plain word terms, as FTS5 tokenizes and stems them: the first stage of the search.

User (or model) text never reaches a full-text engine as syntax. It is cut into plain word tokens,
stop-words dropped, and each token is passed as a quoted string literal, so quotes, ``-``, ``:``, ``*``,
``^``, ``NEAR(``, upper-case ``AND``/``OR``/``NOT`` and emoji can neither raise nor inject operators.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

import snowballstemmer

MAX_QUERY_TERMS = 32
_WORD = re.compile(r"\w+", re.UNICODE)
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)  # letters and digits: what FTS5's unicode61 tokenizer keeps
_TOKEN_OR_BREAK = re.compile(r"[^\W_]+|\x00", re.UNICODE)

# A compact English stop-word list: these occur in most facts, so an OR over them would rank by noise and
# scan every posting list. Kept only when a query has nothing else.
STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most
    my myself no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves s t d ll m re ve y don doesn didn isn aren wasn weren hasn
    haven hadn won wouldn shouldn couldn mustn also us let get got ever
    """.split()
)

_local = threading.local()  # snowball stemmers keep state while stemming: one per thread


def fold(text: str) -> str:
    """Case-fold and strip diacritics, as FTS5's ``unicode61 remove_diacritics 2`` tokenizer does."""
    if text.isascii():  # the common case, without a Python loop over every character
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def query_terms(text: str, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """Distinct word tokens of ``text`` in order, stop-words removed (unless nothing else is left)."""
    if not isinstance(text, str):
        raise TypeError(f"query must be a str, got {type(text).__name__}")
    words: list[str] = []
    for word in _WORD.findall(fold(text)):
        word = word.strip("_")
        if word and word not in words:
            words.append(word)
    content = [w for w in words if w not in STOP_WORDS]
    return (content or words)[:max_terms]


@lru_cache(maxsize=65536)
def stem(term: str) -> str:
    """The Porter stem, equal to what the FTS5 ``porter`` tokenizer stores in its index."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = snowballstemmer.stemmer("porter")
    return str(stemmer.stemWord(term))


def stems_of(text: str) -> set[str]:
    """The Porter stems of the words of ``text``: the index terms FTS5 stores for it."""
    return {stem(w) for w in _TOKEN.findall(fold(text))}


def tokens(text: str) -> list[str]:
    """Every word token of ``text``, folded, in order (stop words included), as FTS5's ``unicode61`` tokenizer
    cuts it; :func:`stem` of each is what its ``porter`` tokenizer stores."""
    return _TOKEN.findall(fold(text))


def tokens_many(texts: Sequence[str]) -> list[str]:
    """:func:`tokens` of each text, in one list with ``"\\x00"`` after each text but the last: one regex pass
    over all of them (the texts' own NULs are spaces)."""
    joined = "\x00".join(map(fold, texts))
    if joined.count("\x00") != len(texts) - 1:
        joined = "\x00".join(fold(t.replace("\x00", " ")) for t in texts)
    return _TOKEN_OR_BREAK.findall(joined)


def _vocabulary() -> sqlite3.Connection:
    """This thread's in-memory FTS5 table, tokenized as the SQLite backend's record tables are."""
    conn: sqlite3.Connection | None = getattr(_local, "fts5", None)
    if conn is None:
        conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(content, tokenize='porter unicode61 remove_diacritics 2')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        _local.fts5 = conn
    return conn


def fts5_terms(text: str) -> list[str]:
    """The terms SQLite's FTS5 (``porter unicode61 remove_diacritics 2``) indexes for ``text``, in order: FTS5's
    own tokenizer and stemmer, read back from an in-memory table's ``fts5vocab``. Where another engine must
    match record text as FTS5 does (PostgreSQL's record tables), it uses these; :func:`stem` and :func:`fold`
    differ from them at the edges (Snowball's Porter, NFKD)."""
    conn = _vocabulary()
    conn.execute("INSERT INTO t (rowid, content) VALUES (1, ?)", (text,))
    try:
        return [term for (term,) in conn.execute("SELECT term FROM v WHERE doc = 1 ORDER BY offset")]
    finally:
        conn.execute("DELETE FROM t")
