"""The data model: scopes, facts, receipts, hits, audit events, and the validation at the boundary.

Everything a backend stores or returns is one of these plain, frozen dataclasses, so the SQLite and any
other backend speak the same language and the store's logic (policy, fusion, capsules) is written once.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import secrets
import threading
import time
import unicodedata
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

# the errors this module raises, and the ones code imports from here, live in ..errors
from ..errors import EmbeddingModelError as EmbeddingModelError
from ..errors import EmbeddingModelMismatchError as EmbeddingModelMismatchError
from ..errors import FactNotFoundError as FactNotFoundError
from ..errors import GroupIdRequired as GroupIdRequired
from ..errors import InvalidInputError, InvalidInputTypeError, PositionError
from ..errors import MemoryAccessDenied as MemoryAccessDenied
from ..errors import NotAStoreError as NotAStoreError
from ..errors import SharedMemoryError as SharedMemoryError

ScopeKind = Literal["agent", "group", "global"]
ScopeName = Literal["agent", "group", "global", "all"]
Status = Literal["active", "pending", "forgotten", "superseded", "expired"]

SCOPE_KINDS: tuple[ScopeKind, ...] = ("agent", "group", "global")
STATUSES: tuple[Status, ...] = ("active", "pending", "forgotten", "superseded", "expired")
_ID_PREFIX: dict[ScopeKind, str] = {"agent": "a", "group": "g", "global": "w"}
_PREFIX_KIND: dict[str, ScopeKind] = {v: k for k, v in _ID_PREFIX.items()}

MAX_ID_CHARS = 128
DEFAULT_MAX_FACT_BYTES = 8 * 1024


# --------------------------------------------------------------------------------------------- scopes
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def validate_owner_id(value: object, what: str = "id") -> str:
    """Check an agent or group id that will end up in a file name and return it unchanged.

    Rules (each violation is a ValueError naming the rule): a string of 1..128 characters, not blank, no
    control characters (NUL included), no path separators ``/`` or ``\\``, not ``.`` or ``..``. Every other
    id (unicode, upper case, dots, spaces) is accepted: a backend that names files after ids encodes it (SQLite:
    :func:`~autogen_shared_memory.backends.sqlite.files.owner_file_token`).
    """
    if not isinstance(value, str):
        raise InvalidInputTypeError(f"{what} must be a str, got {type(value).__name__}")
    if not value or not value.strip():
        raise InvalidInputError(f"{what} must not be empty or blank")
    if len(value) > MAX_ID_CHARS:
        raise InvalidInputError(f"{what} is {len(value)} characters; the limit is {MAX_ID_CHARS}")
    if _CONTROL.search(value) or any(_layout_char(ch) for ch in value):
        raise InvalidInputError(
            f"{what} {shown(value)} contains a control character (NUL, newline, a format or line-break character); "
            "not allowed"
        )
    require_utf8(value, what)
    if "/" in value or "\\" in value:
        raise InvalidInputError(f"{what} {shown(value)} contains a path separator ('/' or '\\'); not allowed")
    if value in (".", ".."):
        raise InvalidInputError(f"{what} {shown(value)} is a relative path component; not allowed")
    return value


@dataclass(frozen=True, order=True)
class ScopeRef:
    """One scope instance: the kind plus its owner (agent id, group id, or "" for global)."""

    kind: ScopeKind
    owner: str = ""

    def __post_init__(self) -> None:
        if self.kind not in SCOPE_KINDS:
            raise InvalidInputError(f"scope must be one of {SCOPE_KINDS}, got {self.kind!r}")
        if self.kind == "global":
            if self.owner:
                raise InvalidInputError("the global scope has no owner")
        else:
            validate_owner_id(self.owner, f"{self.kind} id")

    def __str__(self) -> str:
        return "global" if self.kind == "global" else f"{self.kind}:{self.owner}"


_ID_LOCK = threading.Lock()
_last_id = [0, 0]  # (milliseconds, 32-bit sequence) of this process's newest id


def _forget_last_id() -> None:
    _last_id[:] = [0, 0]  # a forked child must not continue its parent's sequence


os.register_at_fork(after_in_child=_forget_last_id)


def new_fact_id(kind: ScopeKind) -> str:
    """A time-ordered id whose first letter names the scope kind (``a``/``g``/``w``), e.g. ``g_0193a1…``.

    Milliseconds, then a 32-bit sequence: random for a process's first id in a millisecond, incremented for
    the next ones (a batch writes thousands of facts per millisecond; random bits alone collided), so ids
    never repeat within a process and sort in creation order even if the clock steps back.
    """
    with _ID_LOCK:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_id[0]:
            ms, seq = _last_id[0], _last_id[1] + 1
            if seq >= 1 << 32:
                ms, seq = ms + 1, secrets.randbits(31)
        else:
            seq = secrets.randbits(31)  # (a system call: only for a millisecond's first id)
        _last_id[:] = [ms, seq]
    return f"{_ID_PREFIX[kind]}_{ms:012x}{seq:08x}"


def kind_of_fact_id(fact_id: str) -> ScopeKind:
    """The scope kind encoded in a fact id; ValueError for a string that is not a fact id."""
    if not isinstance(fact_id, str):
        raise InvalidInputTypeError(f"fact id must be a str, got {type(fact_id).__name__}")
    if not re.fullmatch(r"[agw]_[0-9a-f]{20}", fact_id):
        raise InvalidInputError(f"{shown(fact_id)} is not a fact id (expected e.g. 'g_0193a1b2c3d4e5f60718')")
    return _PREFIX_KIND[fact_id[0]]


# ---------------------------------------------------------------------------------------------- facts
def validate_content(content: object, max_bytes: int, *, stored: bool = False) -> str:
    """Fact text a write accepts. ``stored``: text an earlier version stored (an import), held to that
    version's blank rule (whitespace, control and format characters), not the later one (marks and fillers)."""
    if not isinstance(content, str):
        raise InvalidInputTypeError(f"fact content must be a str, got {type(content).__name__}")
    blank = (lambda ch: ch.isspace() or _layout_char(ch)) if stored else _invisible
    if not content.strip() or all(blank(ch) for ch in content):
        raise InvalidInputError("fact content must not be empty, whitespace or invisible characters only")
    size = len(require_utf8(content, "fact content").encode("utf-8"))
    if size > max_bytes:
        raise InvalidInputError(f"fact content is {size} bytes; the limit is {max_bytes} (max_fact_bytes)")
    if "\x00" in content:
        raise InvalidInputError("fact content contains a NUL character")
    return content


def require_utf8(value: str, what: str) -> str:
    """Refuse text that cannot be stored as UTF-8 (a lone surrogate, e.g. half of an emoji cut off in JSON)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{what} is not valid Unicode text (a lone surrogate at position {exc.start})"
        ) from None
    return value


def finite_number(value: object, what: str) -> float:
    """``value`` as a finite float: a TypeError for a non-number (bools included), a ValueError naming
    ``what`` for NaN, infinities and integers too large for a float (``10**400``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputTypeError(f"{what} must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise InvalidInputError(f"{what} is too large: {str(value)[:20]}...") from None
    if not math.isfinite(number):
        raise InvalidInputError(f"{what} must be a finite number, got {shown(value)}")
    return number


def validate_confidence(value: object, what: str = "confidence") -> float:
    try:
        number = finite_number(value, what)
    except ValueError:
        raise InvalidInputError(f"{what} must be in [0, 1], got {str(value)[:20]}") from None
    if not 0.0 <= number <= 1.0:
        raise InvalidInputError(f"{what} must be in [0, 1], got {shown(value)}")
    return number


MAX_TTL_DAYS = 36_525.0  # a century: beyond it, leave ttl_days out (no expiry)


def expiry_from_ttl(ttl_days: object, now: float) -> float | None:
    if ttl_days is None:
        return None
    days = finite_number(ttl_days, "ttl_days")
    if not 0 < days <= MAX_TTL_DAYS:
        raise InvalidInputError(
            f"ttl_days must be a positive number of days, at most {MAX_TTL_DAYS:g}, got {shown(ttl_days)}"
        )
    return now + days * 86400.0


MAX_TAGS = 32
MAX_LABEL_CHARS = 64  # a tag or a category
MAX_SESSION_ID_CHARS = 128
MAX_METADATA_BYTES = 64 * 1024
MAX_METADATA_DEPTH = 16


def _layout_char(ch: str) -> bool:
    """Control, format and line or paragraph separator characters: they fake layout in a capsule."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")


# Characters that draw nothing although Unicode calls them letters or symbols (Hangul fillers, the blank
# braille pattern), and the marks that only modify another character (combining marks, variation selectors)
_BLANK = frozenset("ᅟᅠㅤﾠ⠀")


def _invisible(ch: str) -> bool:
    return ch.isspace() or ch in _BLANK or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Mn", "Me")


def validate_label(value: object, what: str) -> str:
    """A tag or category: a non-blank string of at most 64 characters, valid Unicode, on one line."""
    if not isinstance(value, str):
        raise InvalidInputTypeError(f"{what} must be a string, got {type(value).__name__}")
    if not value.strip() or len(value) > MAX_LABEL_CHARS:
        raise InvalidInputError(
            f"{what} must be a non-blank string of at most {MAX_LABEL_CHARS} characters, got {shown(value)}"
        )
    require_utf8(value, what)
    if any(_layout_char(ch) for ch in value):
        raise InvalidInputError(
            f"{what} {shown(value)} contains a control, format or line-break character; not allowed"
        )
    return value


def validate_tags(tags: object) -> tuple[str, ...]:
    if tags is None:
        return ()
    if isinstance(tags, str) or not isinstance(tags, (list, tuple, set, frozenset)):
        raise InvalidInputTypeError("tags must be a list of strings")
    if len(tags) > MAX_TAGS:
        raise InvalidInputError(f"{len(tags)} tags; the limit is {MAX_TAGS}")
    return tuple(dict.fromkeys(validate_label(tag, "each tag") for tag in tags))


# The session of facts whose writer names none: the writing store's run, ``run:<hex>``. Facts of one run are
# written in order but need not follow one another (an agent's notes on several tasks), so neighbour context
# never links them; a session the writer names (a conversation, a case) is one where order means something.
RUN_SESSION_PREFIX = "run:"


def validate_session_id(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputTypeError(f"session_id must be a string, got {type(value).__name__}")
    if not value or len(value) > MAX_SESSION_ID_CHARS:
        raise InvalidInputError(f"session_id must be 1 to {MAX_SESSION_ID_CHARS} characters, got {len(value)}")
    require_utf8(value, "session_id")
    if any(_layout_char(ch) for ch in value):
        raise InvalidInputError("session_id contains a control, format or line-break character; not allowed")
    return value


def validate_reason(value: object) -> str | None:
    """A forget reason: free text of at most 1000 characters, valid Unicode, without NUL."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 1000:
        raise InvalidInputError("reason must be a string of at most 1000 characters")
    require_utf8(value, "reason")
    if "\x00" in value:
        raise InvalidInputError("reason contains a NUL character; not allowed")
    return value


def validate_metadata(value: object) -> dict[str, Any]:
    """Metadata: a JSON object of at most 64 KiB and 16 levels, string keys, finite numbers, valid Unicode
    without NUL (what both SQLite's JSON and PostgreSQL's jsonb store alike)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputTypeError(f"metadata must be a mapping, got {type(value).__name__}")
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:  # iterative: a deeply nested value cannot exhaust the Python stack
        item, depth = stack.pop()
        if depth > MAX_METADATA_DEPTH:
            raise InvalidInputError(f"metadata is nested deeper than {MAX_METADATA_DEPTH} levels")
        if isinstance(item, Mapping):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise InvalidInputTypeError(f"metadata keys must be strings, got {type(key).__name__}")
                stack += [(key, depth), (inner, depth + 1)]
        elif isinstance(item, (list, tuple)):
            stack += [(inner, depth + 1) for inner in item]
        elif isinstance(item, str):
            if "\x00" in item:
                raise InvalidInputError("metadata contains a NUL character; not allowed")
            require_utf8(item, "metadata")
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidInputError(f"metadata holds {item!r}; only finite numbers are allowed")
        elif isinstance(item, int) and not isinstance(item, bool) and not -(2**63) <= item < 2**63:
            raise InvalidInputError("metadata holds an integer beyond 64 bits")
        elif item is not None and not isinstance(item, (bool, int, float)):
            raise InvalidInputTypeError(f"metadata must hold JSON values only, got {type(item).__name__}")
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise InvalidInputError(f"metadata is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}")
    return dict(value)


@dataclass(frozen=True)
class Draft:
    """A validated fact about to be written (the store builds it; backends persist it)."""

    id: str
    content: str
    created_by: str
    created_at: float
    confidence: float = 1.0
    tags: tuple[str, ...] = ()
    category: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    session_id: str | None = None
    expires_at: float | None = None
    supersedes: tuple[str, ...] = ()
    content_hash: str = ""
    status: Status = "active"  # "pending": a global write held for review (stored, not recalled)


@dataclass(frozen=True)
class Fact:
    """A stored fact with its whole lifecycle state. ``status`` is computed: an active fact past
    ``expires_at`` reads as ``expired``."""

    id: str
    scope: ScopeRef
    content: str
    created_by: str
    created_at: float
    confidence: float
    tags: tuple[str, ...]
    category: str | None
    metadata: dict[str, Any]
    session_id: str | None
    expires_at: float | None
    supersedes: tuple[str, ...]
    superseded_by: str | None
    status: Status
    tombstone_by: str | None
    tombstone_at: float | None
    tombstone_reason: str | None
    reinforcement: int
    content_hash: str
    version: int
    updated_at: float
    stated_by: tuple[str, ...] = ()  # the distinct agents that stated it, its author first

    def __post_init__(self) -> None:
        if not self.stated_by:  # rows written before stated_by existed
            object.__setattr__(self, "stated_by", (self.created_by,))

    @property
    def owner(self) -> str:
        return self.scope.owner

    @property
    def valid_to(self) -> float | None:
        """When the fact stopped being believed: superseded (= its successor's ``created_at``), forgotten
        or expired; None while it holds."""
        ends = [self.tombstone_at] if self.status in ("superseded", "forgotten") else []
        if self.expires_at is not None:
            ends.append(self.expires_at)
        return min((e for e in ends if e is not None), default=None)

    @property
    def active(self) -> bool:
        return self.status == "active"


@dataclass(frozen=True)
class Receipt:
    """What ``remember`` returns: the id that now holds the fact and whether it was new.

    ``held`` means the fact is stored but held for review (a global write by an agent that is not a global
    writer, with ``review_global_writes``): recalled once approved. ``reinforced`` means the same thing was
    said again (``duplicate_of`` holds it, ``similarity`` is the
    cosine of a near duplicate). ``similar`` lists live facts the new one resembles but was not merged into
    (they differ in a detail): if the new fact replaces one, remember it with ``supersedes=[that id]``.
    """

    id: str
    scope: ScopeRef
    status: Literal["created", "reinforced", "held"]
    duplicate_of: str | None = None
    similarity: float | None = None
    superseded: tuple[str, ...] = ()
    similar: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hit:
    """A recalled fact with provenance and why it was recalled."""

    fact: Fact
    score: float
    lexical_rank: int | None
    semantic_rank: int | None
    cosine: float | None = None
    context_of: str | None = None  # neighbour context: the recalled fact this one was written next to

    @property
    def id(self) -> str:
        return self.fact.id

    @property
    def content(self) -> str:
        return self.fact.content


@dataclass(frozen=True)
class AuditEvent:
    """One line of a fact's audit trail (created, reinforced, superseded, forgotten, purged, reembedded)."""

    fact_id: str
    event: str
    actor: str
    at: float
    detail: dict[str, Any]
    seq: int = 0  # order within the scope (events of one transaction share ``at``)


@dataclass(frozen=True)
class Filters:
    """Search filters every backend applies the same way (all of them together: an AND).

    The status rule comes first: by default only active facts unexpired at the call (``status == "active"``
    and ``expires_at`` NULL or after ``time.time()``); ``include_inactive`` drops the rule (any status,
    ``pending`` included); ``as_of`` replaces it (and overrides ``include_inactive``) with the facts valid at
    that time, as :func:`~autogen_shared_memory.backends.base.as_of_clause` writes it: created by then,
    active or closed (superseded, forgotten) after it, unexpired at it. That is
    :func:`~autogen_shared_memory.core.lifecycle.valid_at` except that ``pending`` facts never match.
    """

    tags: tuple[str, ...] = ()  # the fact has every one of these tags
    created_by: tuple[str, ...] = ()  # its author (``created_by``, not ``stated_by``) is one of these
    category: str | None = None  # equal
    since: float | None = None  # created_at >= since
    until: float | None = None  # created_at < until
    min_confidence: float | None = None  # confidence >= min_confidence
    include_inactive: bool = False
    as_of: float | None = None  # facts valid at this time (any status now but pending), see above

    @property
    def narrows(self) -> bool:
        """True if anything besides the status rule restricts the candidates."""
        return bool(
            self.tags
            or self.created_by
            or self.category is not None
            or self.since is not None
            or self.until is not None
            or self.min_confidence is not None
            or self.as_of is not None
        )


@dataclass(frozen=True)
class ScopeStats:
    """What ``Backend.stats`` reports of one scope."""

    scope: ScopeRef
    # facts per status as Fact.status reads (an active fact past its expiry counts as "expired"): always the
    # keys "active", "forgotten", "superseded" and "expired" (0 when none), plus "pending" when there are any
    counts: dict[str, int]
    size_bytes: int  # the storage the scope takes, as the backend can tell (file sizes, column sizes)
    embedding_model: str | None  # the meta rows embedding_model / embedding_dim, None when unset
    embedding_dim: int | None
    last_write: float | None  # ``now`` of the last committed transaction that changed facts; None if none
    schema_version: int  # the backend's storage format version (0 for a scope that does not exist)


_POSITION_PREFIX = "p1."
_MAX_POSITION_JSON = 64 * 1024 * 1024  # a decompressed token larger than this is refused (a zip bomb)
MAX_SEQ = 2**63 - 1  # the largest audit seq a backend stores (a signed 64-bit integer)
_MARK = re.compile(r"[0-9a-f]{1,64}")


class Position:
    """A resumable place in the change feed: for each scope, the ``seq`` of the last change of its audit trail
    that was seen, and a mark of that change (a scope it does not name is read from its beginning).

    Immutable. ``str(position)`` is a compact URL- and shell-safe token (``p1.`` + base64url of compressed
    JSON); :meth:`parse` reads it back. A scope's audit ``seq`` grows in commit order (every write to a scope
    holds its write lock from before its audit rows are inserted to its commit), so "everything of each scope
    after its ``seq``" is exactly what happened after the position. A position belongs to the store it came
    from. The mark (a short hash of the change, see :func:`autogen_shared_memory.feed.mark`) tells the feed
    whether the scope still holds the change the position saw: a scope file deleted and created again, or
    restored from an older copy, does not, and the feed reads that scope from its beginning. Positions
    without marks (tokens written by earlier releases, or built from ``seqs`` alone) are accepted: the feed
    then only checks that the scope still has a change at that ``seq``.
    :meth:`advanced` shares storage with the position it extends, so a feed hands one to every change
    at O(1) cost; the per-scope maps are built the first time they are asked for.
    """

    __slots__ = ("_mark", "_marks", "_parent", "_scope", "_seq", "_seqs", "_token")

    def __init__(self, seqs: Mapping[ScopeRef, int] | None = None, marks: Mapping[ScopeRef, str] | None = None) -> None:
        """A position from the last seen ``seq`` of each scope.

        Args:
            seqs: the last seen audit ``seq`` of each scope (0: nothing of it seen; left out).
            marks: the mark of the change at that ``seq``, for any of those scopes.

        Raises:
            PositionError: a seq that is not an int in [0, 2**63 - 1], a mark that is not 1 to 64 lower-case
                hex digits, or a mark for a scope without a seq.
            TypeError: a key that is not a ScopeRef.
        """
        clean: dict[ScopeRef, int] = {}
        for scope, seq in (seqs or {}).items():
            if not isinstance(scope, ScopeRef):
                raise InvalidInputTypeError(f"a position maps ScopeRef to int, got {type(scope).__name__}")
            if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
                raise PositionError(f"a position's seq must be an int in [0, 2**63 - 1], got {shown(seq)} for {scope}")
            if seq:
                clean[scope] = seq
        kept: dict[ScopeRef, str] = {}
        for scope, mark in (marks or {}).items():
            if not isinstance(mark, str) or not _MARK.fullmatch(mark):
                raise PositionError(f"a position's mark must be 1 to 64 lower-case hex digits, got {shown(mark)}")
            if scope not in clean:
                raise PositionError(f"a position has a mark but no seq for {scope}")
            kept[scope] = mark
        self._parent: Position | None = None
        self._scope: ScopeRef | None = None
        self._seq = 0
        self._mark: str | None = None
        self._seqs: dict[ScopeRef, int] | None = clean
        self._marks: dict[ScopeRef, str] | None = kept
        self._token: str | None = None

    def advanced(self, scope: ScopeRef, seq: int, mark: str | None = None) -> Position:
        """This position with ``scope`` moved on to ``seq`` (O(1): it shares this position's storage).

        Args:
            scope: the scope the change is in.
            seq: its audit ``seq`` (0: the scope is read from its beginning again).
            mark: the change's mark (None: none).

        Returns:
            The new position.
        """
        nxt = Position.__new__(Position)
        nxt._parent, nxt._scope, nxt._seq, nxt._mark = self, scope, seq, mark
        nxt._seqs, nxt._marks, nxt._token = None, None, None
        return nxt

    def _materialise(self) -> tuple[dict[ScopeRef, int], dict[ScopeRef, str]]:
        seqs, marks = self._seqs, self._marks
        if seqs is None or marks is None:
            steps: list[Position] = []
            node: Position = self
            while True:  # safe while another thread materialises the same chain: it sets _seqs before _parent
                found, parent = node._seqs, node._parent
                if found is None and parent is None:
                    found = node._seqs
                if found is not None:
                    break
                assert parent is not None
                steps.append(node)
                node = parent
            seqs, marks = dict(found), dict(node._marks or {})
            for step in reversed(steps):
                assert step._scope is not None
                marks.pop(step._scope, None)
                if step._seq:
                    seqs[step._scope] = step._seq
                    if step._mark is not None:
                        marks[step._scope] = step._mark
                else:
                    seqs.pop(step._scope, None)
            self._marks = marks
            self._seqs, self._parent = seqs, None  # materialised: the chain behind it can be collected
        return seqs, marks

    @property
    def seqs(self) -> Mapping[ScopeRef, int]:
        """The last seen ``seq`` of each scope it names (read-only)."""
        return MappingProxyType(self._materialise()[0])

    @property
    def marks(self) -> Mapping[ScopeRef, str]:
        """The mark of the last seen change of each scope it has one for (read-only)."""
        return MappingProxyType(self._materialise()[1])

    def get(self, scope: ScopeRef) -> int:
        """The last seen ``seq`` of ``scope`` (0: nothing of it seen yet)."""
        return self._materialise()[0].get(scope, 0)

    @classmethod
    def parse(cls, token: str) -> Position:
        """The position a token from ``str(position)`` names.

        Args:
            token: ``p1.`` + base64url of zlib-compressed JSON: a list of ``[kind, owner, seq]`` or
                ``[kind, owner, seq, mark]``.

        Returns:
            The position.

        Raises:
            PositionError: it is not such a token (bad encoding, too large, nested, a seq out of range, an
                unknown scope kind); the message says what is wrong.
            TypeError: ``token`` is not a str.
        """
        if not isinstance(token, str):
            raise InvalidInputTypeError(f"a position token is a str, got {type(token).__name__}")
        if not token.startswith(_POSITION_PREFIX):
            raise PositionError(
                f"{shown(token, 40)} is not a change-feed position (it starts with {_POSITION_PREFIX!r})"
            )
        try:
            packed = base64.urlsafe_b64decode(token[len(_POSITION_PREFIX) :] + "=" * (-len(token) % 4))
            inflate = zlib.decompressobj()
            text = inflate.decompress(packed, _MAX_POSITION_JSON)
            if inflate.unconsumed_tail or not inflate.eof:
                raise ValueError("truncated or too large")
            try:
                entries = json.loads(text)
            except RecursionError:  # a token is a list of flat lists: anything deeper is not one
                raise ValueError("nested too deeply") from None
            if not isinstance(entries, list):
                raise ValueError("not a list")
            seqs: dict[ScopeRef, int] = {}
            marks: dict[ScopeRef, str] = {}
            for entry in entries:
                if not isinstance(entry, list) or len(entry) not in (3, 4):
                    raise ValueError(f"an entry is not [kind, owner, seq] or [kind, owner, seq, mark]: {shown(entry)}")
                kind, owner, seq = entry[:3]
                scope = ScopeRef(kind, owner)
                seqs[scope] = seq
                if len(entry) == 4:
                    marks[scope] = entry[3]
            position = cls(seqs, marks)
        except (ValueError, TypeError, zlib.error) as exc:
            raise PositionError(f"{shown(token, 40)} is not a valid change-feed position ({exc})") from None
        position._token = token
        return position

    def __str__(self) -> str:
        if self._token is None:
            seqs, marks = self._materialise()
            entries = [[s.kind, s.owner, seq] + ([marks[s]] if s in marks else []) for s, seq in sorted(seqs.items())]
            packed = zlib.compress(json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode(), 9)
            self._token = _POSITION_PREFIX + base64.urlsafe_b64encode(packed).decode().rstrip("=")
        return self._token

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Position) and self._materialise() == other._materialise()

    def __hash__(self) -> int:
        return hash(frozenset(self.seqs.items()))

    def __repr__(self) -> str:
        items = sorted(self.seqs.items())
        shown = ", ".join(f"{s}: {n}" for s, n in items[:5]) + (f", … {len(items) - 5} more" if len(items) > 5 else "")
        return f"Position({{{shown}}})"


_SCHEMA_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")


def validate_schema_name(schema: object) -> str:
    """A PostgreSQL schema name the backend puts in its SQL unquoted: lower-case ASCII letters, digits and
    ``_``, at most 63 characters. PostgreSQL folds an unquoted name to lower case and cuts it at 63 bytes,
    so ``TenantX`` and ``tenantx``, or two long names with the same start, would be one schema: one tenant's
    facts in another's store."""
    if isinstance(schema, str) and _SCHEMA_NAME.fullmatch(schema) and not schema.startswith("pg_"):
        return schema
    if isinstance(schema, str) and schema.startswith("pg_"):
        raise InvalidInputError(f"schema {schema!r}: names starting with pg_ are PostgreSQL's own")
    hint = ""
    if isinstance(schema, str) and _SCHEMA_NAME.fullmatch(schema.lower()):
        hint = f" (PostgreSQL would read it as {schema.lower()!r}: write that)"
    elif isinstance(schema, str) and len(schema) > 63:
        hint = f" (it has {len(schema)} characters; PostgreSQL keeps 63)"
    raise InvalidInputError(
        f"schema must be lower-case letters, digits and _, starting with a letter, at most 63 characters; "
        f"got {shown(schema)}{hint}"
    )


def shown(value: object, limit: int = 60) -> str:
    """``value`` quoted for an error message, cut after ``limit`` characters: a model-chosen argument of 100k
    characters is named, not echoed back into the model's context."""
    if isinstance(value, str):
        return repr(value if len(value) <= limit else value[:limit] + "…")
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's 4,300-digit limit for str()
        return f"<{type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(frozen=True)
class Change:
    """One change to a fact, as the change feed reports it: one event of a scope's audit trail (``created``,
    ``reinforced``, ``superseded``, ``forgotten``, ``approved``, ``purged``, ``reembedded``)."""

    scope: ScopeRef
    event: str
    fact_id: str
    actor: str
    at: float  # when the writing transaction started (Unix seconds; the writer's clock)
    detail: dict[str, Any]
    seq: int  # its place in the scope's audit trail (grows in commit order within the scope)
    position: Position  # the feed's position just after this change: pass it as ``since`` to resume after it
