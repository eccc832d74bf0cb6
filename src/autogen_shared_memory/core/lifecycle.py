"""The fact lifecycle, decided once for every backend.

A backend opens a write transaction on one scope and hands it to these functions as a :class:`WriteTx`: a
handful of primitive reads and writes (find by hash, nearest vectors, insert, update, delete, audit). Every
decision is taken here, in Python, the same way for SQLite, PostgreSQL and any third backend:

* **Reinforce only what says the same thing.** A draft reinforces a live fact when the two texts are equal
  after :func:`normalise` (NFKC, case, whitespace, the sentence's frame: bullet, quotes, final stop), or
  when their cosine reaches the near-duplicate threshold *and* they have the same :func:`wording` (the same
  words in the same order, up to the sentence's punctuation, case, contractions, digit grouping and
  articles): a number, date, name, unit,
  negation, antonym or role that differs keeps them apart. Cosine alone never merges: "due on October 14"
  and "due on October 21" embed at 0.97 with MiniLM. (A rule that compared only details such as numbers
  and names still merged 152 of 420 adversarial pairs: antonyms, roles, comparatives, "if"/"unless".)
* **Similar but distinct facts are stored**, and the receipt lists them (``Receipt.similar``) so the writer
  can declare a replacement; invalidation is never inferred.
* **A correction always wins.** A draft that ``supersedes`` facts is inserted as a new fact (never merged
  into anything) and closes what it supersedes, in the same transaction; the old fact's ``valid_to`` is the
  new fact's ``created_at``.
* **Reinforcement never edits another author's fact**: it only records who stated it again (``stated_by``,
  the audit trail). The author restating its own fact refreshes it (tags, confidence, a later expiry). A
  restatement that would outlive another author's expiring fact is stored as its own fact, so it is not
  lost when the first one expires.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
import unicodedata
from collections.abc import Collection, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol

from ..errors import InvalidInputError
from .types import MAX_METADATA_BYTES, MAX_TAGS, Draft, Fact, FactNotFoundError, Receipt, ScopeRef, Status

# ------------------------------------------------------------------------------------ normalisation
# Marks written in several ways that say the same: curly and straight quotes, the ideographic full stop; an
# emoji's presentation selector is dropped.
_MARKS = str.maketrans(
    {
        "‘": "'",
        "’": "'",
        "‚": "'",
        "‛": "'",
        "“": '"',
        "”": '"',
        "„": '"',
        "‟": '"',
        "。": ".",
        "\ufe0f": None,
    }
)


def nfkc(text: str) -> str:
    """Unicode NFKC (full-width, ligatures, compatibility forms), with super- and subscripts kept apart: NFKC
    folds them into plain characters (``2³²`` would read ``232``, ``O(2ⁿ)`` ``O(2n)``), so they are spelled
    out first (``2^32``, ``O(2^n)``, ``H_2O``); then the marks of :data:`_MARKS` in one spelling."""
    if not text.isascii():
        out, run = [], ""  # a run of super- (or sub-) scripts is marked once: 2³² is 2^32, not 2^3^2
        for ch in text:
            mark = _script(ch) if ord(ch) > 0x7F else ""
            if mark and mark != run:
                out.append(mark)
            out.append(unicodedata.normalize("NFKC", ch).replace("−", "-") if mark else ch)  # ⁻ is a minus
            run = mark
        text = unicodedata.normalize("NFKC", "".join(out)).translate(_MARKS)
    return text


@lru_cache(maxsize=1024)
def _script(ch: str) -> str:
    """``^`` for a superscript character, ``_`` for a subscript, else nothing."""
    form = unicodedata.decomposition(ch)
    return "^" if form.startswith("<super>") else "_" if form.startswith("<sub>") else ""


# A quoted span on one line: whitespace inside it is what was said (``split("  ")``, ``cut -d '\t'``).
_QUOTED = re.compile(r"(?<!\w)(\"[^\"\n]*\"|`[^`\n]*`|'[^'\n]*')(?!\w)")  # not the apostrophes of Let's, Bob's
_SPACES = re.compile(r"\s+")
_ONE_LINE = re.compile(r"[^\n\r\v\f\x1c-\x1e\x85\u2028\u2029]*")  # nothing str.splitlines() splits at


def _layout(text: str) -> str:
    """Whitespace runs as one space (but inside quotes or backticks), blank lines dropped; a line indented
    under the first keeps its line break and indentation, which say what belongs to what in code and YAML
    (``upload(f)`` inside the loop or after it). A line that is not indented is only wrapped text: it joins
    the one before with a space."""
    if _ONE_LINE.fullmatch(text) and not _QUOTED.search(text):
        return " ".join(text.split())  # most texts: one line, nothing quoted
    out: list[str] = []
    first = ""  # the first line's indentation: the others' counts from it ("  a:\n  b" is two siblings)
    for line in text.splitlines():
        if _QUOTED.search(line):
            parts = _QUOTED.split(line)
            body = "".join(p if i % 2 else _SPACES.sub(" ", p) for i, p in enumerate(parts)).strip()
        else:
            body = " ".join(line.split())
        if not body:
            continue
        indent = line[: len(line) - len(line.lstrip())]
        if not out:
            first = indent
        elif indent.startswith(first) and len(indent) > len(first):
            out.append("\n" + indent[len(first) :] + body)
            continue
        out.append((" " if out else "") + body)
    return "".join(out)


_FINAL = frozenset(".!…")  # end a text where they follow a word (never , ; or :, which can be the value)
_FINAL_RUNS = re.compile(r"(?:\.|\.\.\.|…|!+)")  # "1.." is a range, not a sentence's end
_CLOSING = frozenset(")]}\"'`%»")  # a final "." after them ends the sentence: "99.9%.", "(02:00 UTC).", "`main`."
_QUOTE_PAIRS = {'"': '"', "'": "'", "`": "`", "«": "»", "»": "«", "「": "」", "『": "』"}
_BRACKET_PAIRS = {"(": ")", "[": "]", "{": "}"}
_BULLETS = frozenset("-*•–—")
_WORDLIKE = re.compile(r"[^\W\d_]{2,}")


def _soft_stop(mark: str, word: str) -> bool:
    """Whether ``mark`` after ``word`` only ends a sentence: a ``!`` only after a plain word or a number
    (``n!``, ``Summer2024!`` and ``record.save!`` say something else)."""
    return mark != "!" or (word.isalpha() and len(word) > 1) or word.isdigit()


def _encloses(text: str) -> bool:
    """Whether the text's first and last characters are one pair around all of it: quotes (that do not occur
    inside), or brackets around a sentence without commas (``(1, 2, 3)`` is a tuple, not ``[1, 2, 3]``)."""
    first, last, inner = text[0], text[-1], text[1:-1]
    if _QUOTE_PAIRS.get(first) == last:
        return first not in inner and last not in inner
    if _BRACKET_PAIRS.get(first) != last or not _WORDLIKE.search(inner) or len(inner.split()) < 2 or "," in inner:
        return False  # a tuple, a list, a set: (1, 2, 3) is not [1, 2, 3], ('r', 'w') not ['r', 'w']
    depth = 0
    for ch in inner:
        depth += (ch == first) - (ch == last)
        if depth < 0:
            return False
    return depth == 0


def _frame(text: str) -> tuple[int, int]:
    """Where a text's sentence starts and ends inside its frame: surrounding whitespace, a list bullet, a
    final ``.``, ``!`` or ellipsis that follows a word (:func:`_soft_stop`), and a pair of quotes, or of
    brackets around a sentence, around the whole text. Anything else is what was said: a stop after a
    space or a mark (``git add .``, ``'...'``), a final ``,`` ``;`` or ``:`` (``is ','``, ``C:``), one quote or
    bracket without its partner (``6'``, ``[0, 10)``)."""
    start, end = 0, len(text)
    while True:
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end - start > 2 and text[start] in _BULLETS and text[start + 1] == " ":
            start += 2  # "- fact", "* fact", "• fact" (a minus before a digit has no space: "-5 is the offset")
            continue
        cut = end
        while cut > start and text[cut - 1] in _FINAL:
            cut -= 1
        if start < cut < end and _FINAL_RUNS.fullmatch(text, cut, end):
            words = text[start:cut].split()
            word = words[-1].lstrip("".join(_QUOTE_PAIRS) + "([{") if words else ""
            after_word = text[cut - 1].isalnum() and all(_soft_stop(mark, word) for mark in text[cut:end])
            if after_word or (text[cut:end] == "." and text[cut - 1] in _CLOSING and cut - 1 > start):
                end = cut
                continue
        if end - start >= 2 and _encloses(text[start:end]):
            start, end = start + 1, end - 1
            continue
        return start, end


# Words that an all-caps spelling makes another word: IT, US, NO, OR... (in a text that is not all caps)
_CAPS_WORDS = frozenset("it us no or on in at as is be so do up we he me an to if".split())
_NUMBER = re.compile(r"[-+]?\d[\d.,:]*")
_DIGIT = re.compile(r"\d")
_FLAG = re.compile(r"--?[^\W\d_]")  # -P is not -p, git branch -D is not -d
_EDGES = ".,;:!?\"'`()[]{}"
# What a text needs for _fold to keep any of its case: a digit (a key, a number before a unit), a dash (a
# flag), two capitals (a word of _CAPS_WORDS), a quote (a quoted span).
_CASE_KEPT = re.compile(r"[\d\-\"`]|[A-Z][A-Z]|(?<!\w)'")


def _fold(token: str, before: str = "", shouting: bool = True) -> str:
    """A token in lower case, unless case is part of it: a key or a hash, with digits among letters whose case
    changes more than once (``sk-AbC123``, ``3fA9b``; ``OAuth2`` and ``IPv6`` are names, ``3FA9B`` is hex);
    and, in a text that is not all in capitals (``shouting``), a unit after a number (``100 MB/s``, ``5 mW``), a
    one-letter flag (``-P``) or a word that capitals make another one (``IT``, ``US``, ``NO``). ``lower``, not
    ``casefold``: ``Maßen`` is not ``Massen``."""
    low = token.lower()
    if low == token:
        return token
    if _DIGIT.search(token):
        letters = [c.isupper() for c in token if c.isalpha()]
        if sum(a != b for a, b in itertools.pairwise(letters)) >= 2:
            return token
    if not shouting:
        if _NUMBER.fullmatch(before) and 0 < sum(c.isalpha() for c in token) <= 3:
            return token
        word = token.strip(_EDGES)  # "IT," and "(-P)" are IT and -P
        if _FLAG.fullmatch(word) or (word.lower() in _CAPS_WORDS and word.isupper()):
            return token
    return low


def _cased(text: str) -> str:
    """Each token of ``text`` through :func:`_fold`; a quoted span stays as written (``'Summer2024'``)."""
    if not _CASE_KEPT.search(text):
        return text.lower()  # most texts: no digit, dash, quoted span or two capitals
    if text.lower() == text:
        return text
    shouting = text.upper() == text
    parts = _QUOTED.split(text)
    out, before = [], ""
    for i, part in enumerate(parts):
        if i % 2:
            out.append(part)
            before = part
            continue
        tokens = part.split(" ")
        for j, token in enumerate(tokens):
            if token:
                if token.lower() != token:
                    tokens[j] = _fold(token, before, shouting)
                before = token
        out.append(" ".join(tokens))
    return "".join(out)


@lru_cache(maxsize=8192)  # a batch compares each text with several neighbours
def normalise(text: str) -> str:
    """The form in which two texts count as exact duplicates: Unicode NFKC (:func:`nfkc`), lower case
    (:func:`_fold`), whitespace as :func:`_layout` keeps it, and the sentence's frame (:func:`_frame`)
    stripped. ``"Answers are formatted as markdown tables."``, ``answers are formatted as Markdown tables``
    and ``- "Answers are formatted as markdown tables!"`` are one fact. Marks that are part of what was said
    stay: ``"The answer is yes?"`` is not ``"The answer is yes"``, nor ``"The regex is a*"`` ``"... is a"``,
    nor ``"The delimiter is ','"`` ``"... is ';'"``; symbols such as ``$``, ``%`` or emoji stay too."""
    laid = _layout(nfkc(text))
    start, end = _frame(laid)
    core = laid[start:end] or laid  # punctuation only: its own form
    if start and laid[start - 1] in _QUOTE_PAIRS:
        core = _layout(core)  # the quotes around it all are gone: its whitespace is no longer quoted
    return _cased(core)


def content_hash(text: str) -> str:
    """SHA-256 of :func:`normalise`: the exact-duplicate key within a scope."""
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()


# ------------------------------------------------------------------------------------- the wording
# Words joined by - _ . / : @ ' or , stay one token (us-east-1, v2.3.1, 10:30, a@b.io, don't, 10,000,
# 80,443); every other non-space character is a token of its own ($, €, <, ≥, emoji, %, #, &).
_TOKEN = re.compile(r"\w+(?:[-_./:@',]\w+)*|[!<>=]=|[^\w\s]", re.UNICODE)
_CONTRACTIONS = {"n't": "not", "'re": "are", "'ve": "have", "'ll": "will", "'m": "am", "'d": "would"}
_IRREGULAR = {"can't": ("can", "not"), "won't": ("will", "not"), "cannot": ("can", "not"), "shan't": ("shall", "not")}
# Words whose presence never changes what a fact says; an article's may not (:func:`same_wording`).
IGNORED_WORDS = frozenset({"please"})
ARTICLE = "\x00"  # marks an article in a wording
_QUANTITIES = frozenset({"few", "little", "lot", "bit"})
_BOLD = re.compile(r"\*\*(?=[\w'])([\w' -]*?[\w'])\*\*")  # **tables**: never *.tmp, *cache*, **/x/**, 2 ** 3


def _words(line: str) -> Iterator[re.Match[str]]:
    """The line's tokens (:data:`_TOKEN`), a quoted span (:data:`_QUOTED`) being one token."""
    last = 0
    for quoted in _QUOTED.finditer(line):
        yield from _TOKEN.finditer(line, last, quoted.start())
        yield quoted
        last = quoted.end()
    yield from _TOKEN.finditer(line, last)


@lru_cache(maxsize=8192)  # a batch compares each text with several neighbours
def wording(text: str) -> tuple[str, ...]:
    """The words and marks of ``text`` that a near duplicate must repeat, in order (:func:`same_wording`
    compares two): in lower case (:func:`_fold`), without its frame (:func:`_frame`), markdown's bold
    (``**tables**``), "please", or a ``:`` that ends a word (``Staging: port 5432``); contractions spelled out
    (``don't`` = ``do not``); articles marked (``ARTICLE + "the"``: an article one text has and the other has
    not is ignored, ``the`` against ``a`` counts; ``a few`` is not ``few``; a capital ``A`` after the first
    word is a name: "vitamin A"). Every other word and mark counts: numbers, dates, names, units, negations,
    antonyms, roles, comparatives, pronouns, the order that tells who did what to whom, stops, commas and
    ``!`` (``frozen. Until Monday`` is not ``frozen until Monday.``, ``save!`` not ``save``), ``?``, ``*``,
    ``-``, ``_``, symbols, quotes and brackets inside the text (``[0, 10)`` is not ``[0, 10]``), a quoted span
    as written, whether a mark is glued to what is next to it (``rm -rf /tmp`` is not ``rm -rf / tmp``), and
    the indentation of a text's lines."""
    out: list[str] = []
    plain = _layout(_BOLD.sub(r"\1", nfkc(text)))
    start, end = _frame(plain)
    shouting = not any(c.islower() for c in plain[start:end])
    for n, line in enumerate(plain[start:end].split("\n")):
        if n:
            out.append("\n" + line[: len(line) - len(line.lstrip())])  # an indented line: it belongs above
        last_end, last_mark, before = -1, False, ""
        for match in _words(line):
            token, at = match.group(), match.start()
            if _QUOTED.fullmatch(token):  # a quoted literal counts as written, spaces, case and all
                out.append(("+" if at == last_end else "") + token)
                last_end, last_mark, before = match.end(), True, token
                continue
            mark = not token[0].isalnum() and token[0] != "_"
            glued = at == last_end and (mark or last_mark)  # "$500", "/tmp", "-rf": the mark and the word are one
            last_end, last_mark, previous, before = match.end(), mark, before, token
            if len(token) == 1 and mark:
                if token == ":" and at > 0 and line[at - 1].isalnum() and line[at + 1 : at + 2].isspace():
                    continue
                out.append("+" + token if glued else token)
                continue
            if token in ("!=", "<=", ">=", "=="):
                out.append("+" + token if glued else token)
                continue
            if token == "A" and out:  # "Vitamin A", "plan A": a name, not the article (which leads a sentence)
                out.append("a")
                continue
            flag = glued and previous in ("-", "--") and len(token) == 1  # -P is not -p
            low = token if flag else _fold(token, previous, shouting).strip("'")
            if low in _IRREGULAR:
                out += _IRREGULAR[low]
                continue
            suffix = next((s for s in _CONTRACTIONS if low.endswith(s) and len(low) > len(s)), None)
            if suffix is not None:
                out += [low[: -len(suffix)], _CONTRACTIONS[suffix]]
            elif low.endswith("'s") and low[:-2].isdigit():  # "the 1990's" is "the 1990s", not "the 1990"
                out.append(low[:-2] + "s")
            elif low.endswith("'s") and len(low) > 3 and low[:-2].isalpha():  # possessive or "is": the word
                out.append(low[:-2])  # itself is what must match (not after one letter: "A's" is a plural)
            elif low in ("a", "an", "the"):
                out.append(ARTICLE + ("the" if low == "the" else "a"))
            elif low in _QUANTITIES and out and out[-1] == ARTICLE + "a":
                out[-1] = "a " + low  # "a few" is not "few"
            elif low and low not in IGNORED_WORDS:
                out.append("+" + low if glued else low)
    return tuple(out)


def same_wording(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether two :func:`wording` tuples say the same: equal once an article that only one of them has at a
    place is left out (``the reports`` = ``reports``; ``the reviewer`` is not ``a reviewer``)."""
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            i, j = i + 1, j + 1
        elif a[i].startswith(ARTICLE) and not b[j].startswith(ARTICLE):
            i += 1
        elif b[j].startswith(ARTICLE) and not a[i].startswith(ARTICLE):
            j += 1
        else:
            return False
    return all(t.startswith(ARTICLE) for t in (*a[i:], *b[j:]))


def says_the_same(a: str, b: str, cosine: float | None, threshold: float) -> bool:
    """The merge rule: equal after :func:`normalise`, or a near duplicate (``cosine >= threshold``) with the
    same :func:`wording`. Cosine alone never merges: MiniLM puts "due on October 14" and "due on October 21"
    at 0.97, "ascending" and "descending" order at 0.99, and reads only a text's first 256 tokens. (Case is
    folded, as the model does: identifiers that differ only in case, ``ls -r`` and ``ls -R``, are one.)"""
    if normalise(a) == normalise(b):
        return True
    return cosine is not None and cosine >= threshold and same_wording(wording(a), wording(b))


# ------------------------------------------------------------------------------- the transaction
class WriteTx(Protocol):
    """What a backend offers the lifecycle inside one write transaction on one scope.

    The backend holds the scope's write lock for the whole transaction (SQLite ``BEGIN IMMEDIATE``,
    PostgreSQL a row lock on the scope), commits when the lifecycle function returns and rolls back if it
    raises. ``now`` is the transaction's time (``time.time()`` when it began). Facts inserted earlier in the
    transaction are visible to every read below. "Active, unexpired" means ``status == "active"`` and
    ``expires_at`` NULL or after ``now`` (so never ``pending``).
    """

    now: float

    def get(self, fact_ids: Sequence[str]) -> list[Fact]:
        """The facts with these ids in the scope (any status), in any order."""

    def live_by_hash(self, content_hash: str) -> list[Fact]:
        """Active, unexpired facts with this content hash, oldest first."""

    def live_hashes(self, content_hashes: Collection[str]) -> set[str]:
        """Which of these content hashes an active, unexpired fact has (a superset will do): a write asks
        :meth:`live_by_hash` only for those, and for the ones it inserts itself."""

    def nearest(self, j: int, floor: float, exact_from: float) -> list[tuple[str, float]]:
        """``(id, cosine)`` of the active, unexpired facts (those inserted earlier in this write included)
        whose cosine with the ``j``-th vector of this write reaches ``floor`` (``>=``), best first, at most 8.
        Vectors are L2-normalised: the cosine is the dot product. A cosine that may reach ``exact_from`` must
        be the exact float32 one (it decides a merge); below it, an approximation within 1e-4 is enough (it
        only names similar facts)."""

    def insert(self, draft: Draft, j: int) -> None:
        """Insert ``draft`` as a new fact with its status (``active``, or ``pending`` for a write held for
        review) and the ``j``-th vector of this write: the row ``backends.base.draft_values`` describes, with
        ``reinforcement`` and ``version`` 1, ``updated_at`` = ``now`` and the next ``seq``."""

    def update(self, fact_id: str, changes: Mapping[str, Any]) -> None:
        """Set columns of a fact (``status``, ``superseded_by``, ``tombstone_by``, ``tombstone_at``,
        ``tombstone_reason``, ``reinforcement``, ``stated_by``, ``confidence``, ``tags``, ``expires_at``,
        ``category``, ``metadata``) and bump its ``version`` (+1) and set ``updated_at`` to ``now``. Tuples are
        stored as JSON lists; ``metadata`` comes as JSON text (as :func:`~autogen_shared_memory.backends.base.
        draft_values` gives it); ``None`` sets NULL."""

    def purgeable(self) -> list[Fact]:
        """Every fact whose stored status is not ``active`` or that has an expiry (the candidates of
        :func:`purge_due`; a superset is fine, it decides)."""

    def delete(self, fact_ids: Sequence[str]) -> None:
        """Physically delete facts (their audit trail stays)."""

    def audit(self, fact_id: str, event: str, actor: str, detail: Mapping[str, Any]) -> None:
        """Append an event to a fact's audit trail, at ``now`` (``detail`` stored as JSON text,
        ``json.dumps(detail, default=str)``), with the next audit ``seq``."""


# -------------------------------------------------------------------------------------- writing
MAX_SIMILAR = 3


def write(
    tx: WriteTx, scope: ScopeRef, drafts: Sequence[Draft], near_duplicate_threshold: float, similar_threshold: float
) -> list[Receipt]:
    """Apply ``drafts`` (with vectors ``0..n-1`` of this write) in order and return one receipt each.

    Raises (and so rolls the whole transaction back) when a draft supersedes a fact that is not an active
    fact of this scope.
    """
    drafts = [_stamped(d, tx.now) for d in drafts]
    done = {f.id for f in tx.get([d.id for d in drafts])}  # a retried transaction that had in fact committed
    floor = min(near_duplicate_threshold, similar_threshold)
    # the hashes a live fact may have: the stored ones (one query for the batch), and this batch's inserts
    stated = tx.live_hashes({d.content_hash for d in drafts})
    receipts: list[Receipt] = []
    for j, draft in enumerate(drafts):
        if draft.id in done:
            receipts.append(Receipt(draft.id, scope, "created"))
        elif draft.status == "pending":  # held for review: stored as said, merged into nothing, recalled by no one
            _insert(tx, draft, j)
            receipts.append(Receipt(draft.id, scope, "held"))
        elif draft.supersedes:
            receipts.append(_correct(tx, scope, draft, j))
        else:
            receipts.append(_state(tx, scope, draft, j, near_duplicate_threshold, similar_threshold, floor, stated))
        stated.add(draft.content_hash)
    return receipts


def _stamped(draft: Draft, now: float) -> Draft:
    """``draft`` as of the write's transaction (its time-to-live kept): a draft's time is taken before the
    embedding and the wait for the lock, and ``search(as_of=t)`` must not find, at a ``t`` before the commit,
    a fact (or a correction) nobody could read yet."""
    if draft.created_at >= now:
        return draft
    later = now - draft.created_at
    stamped = copy.copy(draft)  # a batch stamps every draft: dataclasses.replace cost more than its insert
    vars(stamped).update(created_at=now, expires_at=None if draft.expires_at is None else draft.expires_at + later)
    return stamped


def _state(
    tx: WriteTx,
    scope: ScopeRef,
    draft: Draft,
    j: int,
    threshold: float,
    similar_threshold: float,
    floor: float,
    stated: set[str],
) -> Receipt:
    same, same_text, near = _restated(tx, draft, j, threshold, floor, stated)
    if same is not None:
        return _reinforce(tx, scope, *same, draft)
    _insert(tx, draft, j)
    similar = [*same_text, *(fid for fid, cos in near if cos >= similar_threshold)][:MAX_SIMILAR]
    return Receipt(draft.id, scope, "created", similar=tuple(similar))


def _restated(
    tx: WriteTx, draft: Draft, j: int, threshold: float, floor: float, stated: set[str] | None = None
) -> tuple[tuple[Fact, float | None] | None, set[str], list[tuple[str, float]]]:
    """The live fact ``draft`` says again (with the cosine when it is a near duplicate), or None; and the
    live facts of the same text and those at or above ``floor`` (for the receipt's ``similar``). ``stated``:
    the content hashes a live fact may have (None: any)."""
    exact = tx.live_by_hash(draft.content_hash) if stated is None or draft.content_hash in stated else []
    same_text = {f.id for f in exact}
    near = [(fid, cos) for fid, cos in tx.nearest(j, floor, threshold) if fid not in same_text]
    # only facts that reach the threshold can be merged into: the others are not even read
    near_facts = {f.id: f for f in tx.get([fid for fid, cos in near if cos >= threshold])}
    candidates: list[tuple[Fact, float | None]] = [(f, None) for f in exact]
    candidates += [(near_facts[fid], cos) for fid, cos in near if fid in near_facts]
    for fact, cosine in candidates:
        if says_the_same(draft.content, fact.content, cosine, threshold) and _may_reinforce(fact, draft):
            return (fact, cosine), same_text, near
    return None, same_text, near


def _may_reinforce(fact: Fact, draft: Draft) -> bool:
    """Another author's fact absorbs a restatement only if it lives at least as long: else the restatement
    would vanish when that fact expires."""
    if fact.created_by == draft.created_by or fact.expires_at is None:
        return True
    return draft.expires_at is not None and draft.expires_at <= fact.expires_at


def _reinforce(tx: WriteTx, scope: ScopeRef, fact: Fact, cosine: float | None, draft: Draft) -> Receipt:
    """The fact said again: counted, and what the restatement adds is kept. The author's own fact takes its
    tags, confidence, expiry, a category it lacked and metadata keys it lacked (values already there stay);
    everything the restatement carried is in the audit trail, so another author's words are never lost."""
    changes: dict[str, Any] = {"reinforcement": fact.reinforcement + 1}
    if draft.created_by not in fact.stated_by:
        changes["stated_by"] = (*fact.stated_by, draft.created_by)
    if draft.created_by == fact.created_by:  # the author said it again: its own fact is refreshed
        changes["confidence"] = max(fact.confidence, draft.confidence)
        added = tuple(t for t in draft.tags if t not in fact.tags)[: max(0, MAX_TAGS - len(fact.tags))]
        changes["tags"] = fact.tags + added  # at most MAX_TAGS, as a write (all of them in the audit trail)
        if fact.expires_at is not None:
            changes["expires_at"] = None if draft.expires_at is None else max(fact.expires_at, draft.expires_at)
        if fact.category is None and draft.category is not None:
            changes["category"] = draft.category
        merged = {**draft.metadata, **fact.metadata}
        if len(merged) > len(fact.metadata) and len(json.dumps(merged).encode()) <= MAX_METADATA_BYTES:
            changes["metadata"] = json.dumps(merged)
    tx.update(fact.id, changes)
    detail: dict[str, Any] = {"confidence": draft.confidence}
    if draft.tags:
        detail["tags"] = list(draft.tags)
    if draft.expires_at is not None:
        detail["expires_at"] = draft.expires_at
    if draft.category is not None:
        detail["category"] = draft.category
    if draft.metadata:
        detail["metadata"] = draft.metadata
    if draft.session_id is not None and draft.session_id != fact.session_id:
        detail["session_id"] = draft.session_id
    if cosine is not None:
        detail["similarity"] = round(cosine, 4)
    if draft.content != fact.content:  # written differently: the words are kept with the restatement
        detail["content"] = draft.content
    tx.audit(fact.id, "reinforced", draft.created_by, detail)
    return Receipt(fact.id, scope, "reinforced", duplicate_of=fact.id, similarity=cosine)


def _insert(tx: WriteTx, draft: Draft, j: int) -> None:
    tx.insert(draft, j)
    tx.audit(draft.id, "created", draft.created_by, {"session_id": draft.session_id})


def _correct(tx: WriteTx, scope: ScopeRef, draft: Draft, j: int) -> Receipt:
    """A correction: always a new fact; what it supersedes is closed with a link to it."""
    olds = {f.id: f for f in tx.get(draft.supersedes)}
    for old_id in draft.supersedes:
        old = olds.get(old_id)
        if old is None:
            raise FactNotFoundError(f"cannot supersede {old_id!r}: no such fact in {scope}")
        if old.status != "active":
            raise InvalidInputError(f"cannot supersede {old_id!r}: it is already {old.status}")
    _insert(tx, draft, j)
    for old_id in draft.supersedes:
        tx.update(
            old_id,
            {
                "status": "superseded",
                "superseded_by": draft.id,
                "tombstone_by": draft.created_by,
                "tombstone_at": draft.created_at,  # = the successor's created_at: valid_to of the old fact
                "tombstone_reason": f"superseded by {draft.id}",
            },
        )
        tx.audit(old_id, "superseded", draft.created_by, {"superseded_by": draft.id})
    return Receipt(draft.id, scope, "created", superseded=tuple(draft.supersedes))


# ---------------------------------------------------------------------------------- status changes
def set_status(
    tx: WriteTx, scope: ScopeRef, fact_id: str, status: Status, actor: str, at: float, reason: str | None
) -> None:
    """Tombstone a fact (``forgotten``; a held one's event is ``rejected``), or approve a fact held for review
    (``pending`` to ``active``); a no-op when it already has that status, and forgetting a superseded fact
    is one too: it is closed already, and a new tombstone would rewrite its history (who closed it, when, for
    what) and what ``as_of`` recalls."""
    found = tx.get([fact_id])
    if not found:
        raise FactNotFoundError(f"no fact {fact_id!r} in {scope}")
    if found[0].status == status or (status == "forgotten" and found[0].status == "superseded"):
        return
    if status == "active":
        approve(tx, scope, fact_id, actor, at, reason, near_duplicate_threshold=None)
        return
    tx.update(fact_id, {"status": status, "tombstone_by": actor, "tombstone_at": at, "tombstone_reason": reason})
    # a held fact forgotten is rejected: its event says so, and ``as_of`` never recalls it (it was never believed)
    tx.audit(fact_id, "rejected" if found[0].status == "pending" else status, actor, {"reason": reason})


def withdraw(tx: WriteTx, scope: ScopeRef, fact_id: str, actor: str, at: float, reason: str | None) -> bool:
    """Take back ``actor``'s statement of an active fact: the fact is forgotten if no one else stated it,
    else only ``actor`` leaves ``stated_by`` (a ``withdrawn`` event), and the others' statements stay. Whether
    anything changed (nothing for a fact that is not active or that ``actor`` never stated)."""
    found = tx.get([fact_id])
    if not found or found[0].status != "active" or actor not in found[0].stated_by:
        return False
    others = tuple(a for a in found[0].stated_by if a != actor)
    if not others:
        set_status(tx, scope, fact_id, "forgotten", actor, at, reason)
        return True
    tx.update(fact_id, {"stated_by": others})
    tx.audit(fact_id, "withdrawn", actor, {"reason": reason})
    return True


def approve(
    tx: WriteTx,
    scope: ScopeRef,
    fact_id: str,
    actor: str,
    at: float,
    reason: str | None,
    near_duplicate_threshold: float | None,
) -> str:
    """Release a fact held for review into recall; return the id of the fact that now holds what it says.

    While it was held, the same thing may have been said by someone allowed to (a held fact is merged into
    nothing): then the approval is a restatement, by the rule a write follows (the same text, or a near
    duplicate at ``near_duplicate_threshold`` with the same wording of numbers and names, the write's vector
    0 being the held fact's; None compares texts only). The live fact is reinforced in the held
    author's name and the held one is closed (``forgotten``, its reason naming the fact it joined), so recall
    holds one copy and nothing that was said is lost. A no-op for a fact that is already active.
    """
    found = tx.get([fact_id])
    if not found:
        raise FactNotFoundError(f"no fact {fact_id!r} in {scope}")
    held = found[0]
    if held.status == "active":
        return fact_id
    if held.status != "pending":
        raise InvalidInputError(f"only a fact held for review can be approved; {fact_id!r} is {held.status}")
    said = Draft(
        id=held.id,
        content=held.content,
        created_by=held.created_by,
        created_at=held.created_at,
        confidence=held.confidence,
        tags=held.tags,
        category=held.category,
        metadata=dict(held.metadata),
        session_id=held.session_id,
        expires_at=held.expires_at,
        content_hash=held.content_hash,
    )
    threshold = 2.0 if near_duplicate_threshold is None else near_duplicate_threshold  # > 1: no cosine merges
    same, _, _ = _restated(tx, said, 0, threshold, threshold)
    if same is None:
        tx.update(fact_id, {"status": "active"})
        tx.audit(fact_id, "approved", actor, {"reason": reason})
        return fact_id
    fact, cosine = same
    _reinforce(tx, scope, fact, cosine, said)
    tx.update(
        fact_id,
        {
            "status": "forgotten",
            "tombstone_by": actor,
            "tombstone_at": at,
            "tombstone_reason": f"approved as a restatement of {fact.id}",
        },
    )
    tx.audit(fact_id, "approved", actor, {"reason": reason, "merged_into": fact.id})
    return fact.id


def purge_due(fact: Fact, before: float, now: float) -> bool:
    """Whether ``purge(before)`` deletes a fact: closed (forgotten, superseded) before ``before``, or expired
    before ``before`` (and by now)."""
    if fact.status in ("forgotten", "superseded"):
        return fact.tombstone_at is not None and fact.tombstone_at < before
    return fact.expires_at is not None and fact.expires_at < min(before, now)


def purge(tx: WriteTx, before: float, actor: str) -> list[str]:
    """Delete what :func:`purge_due` selects, with a ``purged`` audit event each; returns their ids."""
    ids = [f.id for f in tx.purgeable() if purge_due(f, before, tx.now)]
    if ids:
        tx.delete(ids)
        for fact_id in ids:
            tx.audit(fact_id, "purged", actor, {"before": before})
    return ids


# ------------------------------------------------------------------------------------------ time
def valid_at(fact: Fact, at: float) -> bool:
    """Whether a fact was believed at time ``at``: written by then, and not yet superseded, forgotten or
    expired (the rule ``search(as_of=...)`` applies)."""
    if fact.created_at > at:
        return False
    end = fact.valid_to
    return end is None or end > at
