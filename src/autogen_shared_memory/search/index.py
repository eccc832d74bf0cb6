"""The in-memory index of one scope (int8 codes and full-text postings, refreshed by revision), a big scope's
4-bit first pass or the optional HNSW graph, and the near-duplicate lookup of a write batch. Storage-neutral:
re-scoring from float32 and the text of facts to index are callbacks."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt

from ..core.types import EmbeddingModelMismatchError, Filters, ScopeRef
from ..embedding import Vectors
from .cells import CELLS_FROM, Cells, grown
from .engine import side_by_side
from .int8 import (
    CODE_ARRAYS,
    ROUNDING,
    Codes,
    coarse_bounds,
    contenders,
    int8_bounds,
    norms,
    one_blas_thread,
    overlapping,
    pairs,
    quantize,
    scan_many,
    scan_pool,
    shortlist,
)
from .packed import MIN_FACTS as PACKED_FROM
from .packed import Packed, _Abandoned
from .postings import Postings, ScopeTerms

VectorIndexKind = Literal["int4", "exact", "hnsw"]
VECTOR_INDEX_KINDS = get_args(VectorIndexKind)
_log = logging.getLogger(__name__)

# float32 cosines of a query with the facts of these seqs, from the stored vectors (-inf: gone meanwhile)
Exact = Callable[[npt.NDArray[np.int64], npt.NDArray[np.float32]], npt.NDArray[np.float32]]


class Ids(Sequence[str]):
    """A scope index's fact ids by position: a packed base (UTF-8 bytes and offsets, mapped from a saved index)
    and a list of the ids added since. Reading an id decodes it; nothing decodes the base as a whole."""

    __slots__ = ("_base", "_blob", "_ends", "_tail")

    def __init__(self, blob: npt.NDArray[np.uint8] | None = None, ends: npt.NDArray[np.int64] | None = None) -> None:
        self._blob = np.zeros(0, dtype=np.uint8) if blob is None else blob
        self._ends = np.zeros(1, dtype=np.int64) if ends is None else ends  # ends[i]..ends[i + 1]: id i
        self._base = len(self._ends) - 1
        self._tail: list[str] = []

    def __len__(self) -> int:
        return self._base + len(self._tail)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        i = int(i)
        if i < 0:
            i += len(self)
        if i < self._base:
            if i < 0:
                raise IndexError(i)
            return bytes(self._blob[self._ends[i] : self._ends[i + 1]]).decode()
        return self._tail[i - self._base]

    def __iter__(self) -> Iterator[str]:
        for i in range(self._base):
            yield bytes(self._blob[self._ends[i] : self._ends[i + 1]]).decode()
        yield from self._tail

    def extend(self, ids: Iterable[str]) -> None:
        """Add ids at the end."""
        self._tail.extend(ids)

    def packed(self, n: int) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """The first ``n`` ids as (UTF-8 bytes, ends with a leading 0), to save."""
        base = min(n, self._base)
        tail = [s.encode() for s in self._tail[: n - base]]
        blob = np.concatenate([self._blob[: self._ends[base]], np.frombuffer(b"".join(tail), dtype=np.uint8)])
        lengths = np.fromiter((len(b) for b in tail), dtype=np.int64, count=len(tail))
        ends = np.concatenate([self._ends[: base + 1], self._ends[base] + np.cumsum(lengths)])
        return blob, ends

    def snapshot(self, n: int) -> Ids:
        """The first ``n`` ids, unaffected by later additions (the tail is copied, the base is immutable)."""
        out = Ids(self._blob, self._ends)
        out._base = min(n, self._base)
        out._tail = self._tail[: n - out._base]
        return out


@dataclass(frozen=True)
class Coverage:
    """How much of a scope a saved index holds: rows, rows indexed for the lexical leg, rows placed in cells,
    and the scope revision it was taken at."""

    rows: int = 0
    postings: int = 0
    cells: int = 0
    rev: int = -1

    def behind(self, now: Coverage, start: int) -> bool:
        """Whether an index covering ``now`` is worth saving over this one: one of its parts reaches ``start``
        rows and holds a quarter more than it does here."""
        return any(
            b >= start and b >= a + max(1, a // 4)
            for a, b in ((self.rows, now.rows), (self.postings, now.postings), (self.cells, now.cells))
        )


def hash_key(content_hash: str) -> int:
    """The first 60 bits of a content hash (SHA-256 hex), 0 for anything else (PostgreSQL's SQL twin is
    ``backends.postgres.backend._HKEY_SQL``)."""
    head = content_hash[:15]
    return int(head, 16) if len(head) == 15 and all(c in "0123456789abcdef" for c in head) else 0


_NIBBLE = np.full(256, -1, dtype=np.int64)  # an ASCII byte's hex digit, -1 for any other byte
_NIBBLE[np.frombuffer(b"0123456789", dtype=np.uint8)] = np.arange(10)
_NIBBLE[np.frombuffer(b"abcdef", dtype=np.uint8)] = np.arange(10, 16)
_PLACES = 16 ** np.arange(14, -1, -1, dtype=np.int64)


def hash_keys(content_hashes: Sequence[str]) -> npt.NDArray[np.int64]:
    """:func:`hash_key` of each of ``content_hashes``, a first load's worth at a time (1M hashes: a fraction
    of a second instead of seconds)."""
    try:
        heads = np.array([h[:15] for h in content_hashes], dtype="S15")  # shorter ones end in NUL bytes
    except UnicodeEncodeError:  # not ASCII: not a content hash this package made
        return np.fromiter((hash_key(h) for h in content_hashes), dtype=np.int64, count=len(content_hashes))
    digits = _NIBBLE[np.frombuffer(heads.tobytes(), dtype=np.uint8).reshape(len(content_hashes), 15)]
    return np.where((digits >= 0).all(axis=1), digits @ _PLACES, 0).astype(np.int64)


class HashKeys:
    """The content-hash keys (:func:`hash_key`) of every stored fact of a scope, any status: a draft whose key
    is absent has no stored duplicate, and needs no query (a present key is checked by the database).

    Args:
        base: sorted keys (a first load's, or a saved index's).
    """

    def __init__(self, base: npt.NDArray[np.int64]) -> None:
        self.base = base
        self.extra: set[int] = set()  # added since: folded into base once they are an eighth of it

    def __contains__(self, key: int) -> bool:
        if key in self.extra:
            return True
        i = int(np.searchsorted(self.base, key))
        return i < len(self.base) and int(self.base[i]) == key

    def add(self, keys: Iterable[int]) -> None:
        """Add ``keys`` (a set costs ~80 bytes a key, the sorted base 8: a long-lived writer's keys move
        there, a sort of the whole every eighth of growth)."""
        self.extra.update(keys)
        if len(self.extra) > max(4096, len(self.base) // 8):
            self.base = self.keys()
            self.extra = set()

    def keys(self) -> npt.NDArray[np.int64]:
        """Every key, sorted (a key may appear twice: membership is all it is asked)."""
        if not self.extra:
            return self.base
        extra = np.fromiter(self.extra, dtype=np.int64, count=len(self.extra))
        return np.sort(np.concatenate([self.base, extra]))


class VectorIndex:
    """The vectors of one scope as growable two-level int8 codes (:class:`Codes`), refreshed from storage
    by revision: 2 bytes per dimension, half of a float16 copy; and its facts' postings (the lexical leg,
    same positions, indexed on the first lexical search: ~110 bytes per fact)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.home: Any = None  # where the backend saves this index (search/saved.py); None: nowhere
        self.saving = False  # a save is under way
        self.reset()

    def reset(self) -> None:
        """Forget everything (the next refresh reloads the scope); the lock is kept."""
        self.generation = getattr(self, "generation", 0) + 1  # a graph built for an older one is dropped
        self.ann: Ann | None = None
        self.ann_building = False
        self.packed: Packed | None = None  # the 4-bit first pass over rows 0 .. packed.n - 1 (big scopes)
        self.packed_building = False
        self.packed_failed = False  # a build failed (onnxruntime without MatMulNBits, say): exact scans only
        self.changes = 0  # rows below n whose vector changed (a pass built meanwhile is dropped)
        self.postings = Postings()  # positions 0 .. postings.n - 1 indexed
        self.cells: Cells | None = None  # a big scope's cells, for write batches' near-duplicate candidates
        self.saved = Coverage()  # what the saved form of this generation holds (empty: none known)
        self.rev = -1
        self.epoch = -1
        self.n = 0
        self.dim = 0
        self.ids = Ids()
        self.seq = np.zeros(0, dtype=np.int64)
        self.codes = quantize(np.zeros((0, 0), dtype=np.float32))
        self.active = np.zeros(0, dtype=bool)
        self.expires = np.zeros(0, dtype=np.float64)
        self._live: tuple[int, float, float, npt.NDArray[np.bool_]] | None = None  # live_mask's last answer
        # the content-hash keys of rows 0 .. n - 1 and of this process's inserts (the backend's refresh and
        # inserts keep them): an exact duplicate's candidates without a query
        self.hashes = HashKeys(np.zeros(0, dtype=np.int64))

    def saved_extras(self) -> dict[str, npt.NDArray[Any]]:
        """What the index keeps beside the rows and saves with them (caller holds the lock; the arrays must
        not change afterwards): the content-hash keys."""
        return {"hashes": self.hashes.keys()}

    def install_extras(self, arrays: Mapping[str, npt.NDArray[Any]]) -> None:
        """Take back what :meth:`saved_extras` saved, from a mapped file."""
        self.hashes = HashKeys(arrays["hashes"])

    def _grow(self, need: int, dim: int) -> None:
        if self.dim != dim:
            if self.n:
                raise EmbeddingModelMismatchError(f"vector of dimension {dim} in a {self.dim}-d index")
            self.dim = dim
            self.codes = quantize(np.zeros((0, dim), dtype=np.float32))
        cap = len(self.codes)
        if need <= cap:
            return
        new_cap = max(need, cap * 2, 256)

        def grown(old: npt.NDArray[Any]) -> npt.NDArray[Any]:
            arr = np.zeros((new_cap, *old.shape[1:]), dtype=old.dtype)
            arr[: self.n] = old[: self.n]
            return arr

        self.codes = Codes.of(grown(getattr(self.codes, name)) for name in CODE_ARRAYS)  # in memory: no file
        for name in ("seq", "active", "expires"):
            setattr(self, name, grown(getattr(self, name)))
        self._live = None

    def _set_vectors(self, lo: int, vectors: npt.NDArray[np.float32], codes: Codes | None = None) -> None:
        codes = quantize(vectors) if codes is None else codes
        if self.codes.file is not None and lo < self.codes.file.rows:  # a mapped row changes: the file no longer has it
            self.codes.file = None
        if lo < self.n:
            self.changes += 1
            if self.packed is not None and lo < self.packed.n:
                self.packed = None  # it holds the old vector's codes
        for name in CODE_ARRAYS:
            getattr(self.codes, name)[lo : lo + len(vectors)] = getattr(codes, name)

    def append(
        self,
        seq: int,
        fact_id: str,
        vector: npt.NDArray[np.float32],
        active: bool,
        expires: float | None,
    ) -> None:
        """Add one fact."""
        self.extend([seq], [fact_id], quantize(vector.reshape(1, -1)), [active], [expires])

    def extend(
        self,
        seqs: Sequence[int],
        fact_ids: Sequence[str],
        codes: Codes,
        active: Sequence[bool],
        expires: Sequence[float | None],
    ) -> None:
        """Add facts in ``seq`` order, with ``codes`` the ``quantize`` of their vectors: all at once (a write
        batch's inserts, a first load), as per row numpy's call overhead is most of the cost."""
        self._grow(self.n + len(fact_ids), int(codes.coarse.shape[1]))
        lo, hi = self.n, self.n + len(fact_ids)
        for name in CODE_ARRAYS:
            getattr(self.codes, name)[lo:hi] = getattr(codes, name)
        self.seq[lo:hi] = seqs
        self.active[lo:hi] = active
        self.expires[lo:hi] = [np.inf if e is None else e for e in expires]
        self.ids.extend(fact_ids)
        self.n = hi

    def _append_many(self, rows: Sequence[tuple[Any, ...]]) -> None:
        dim = len(rows[0][4] or b"") // 4
        if any(len(r[4] or b"") != 4 * dim for r in rows):
            raise EmbeddingModelMismatchError("vectors of different dimensions in one scope")
        vectors = np.frombuffer(b"".join(r[4] or b"" for r in rows), dtype=np.float32).reshape(-1, dim)
        self.extend(
            [r[0] for r in rows],
            [r[1] for r in rows],
            quantize(vectors),
            [r[2] == "active" for r in rows],
            [r[3] for r in rows],
        )

    def position(self, seq: int) -> int | None:
        i = int(np.searchsorted(self.seq[: self.n], seq))
        return i if i < self.n and self.seq[i] == seq else None

    def apply(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Apply changed rows ``(seq, id, status, expires_at, embedding-or-None, ...)`` in seq order (columns
        past the fifth are not read)."""
        if self.n == 0:  # first load: whole chunks at a time (1M facts: seconds instead of ~20 s row by row)
            rows = [r for r in rows if r[4] is not None]
            for lo in range(0, len(rows), 65536):
                self._append_many(rows[lo : lo + 65536])
            return
        last = int(self.seq[self.n - 1])
        for seq, _, status, expires, blob, *_ in rows:
            pos = self.position(seq) if seq <= last else None
            if pos is not None:
                self.set_status(pos, status, expires)
                if blob is not None:
                    self._set_vectors(pos, np.frombuffer(blob, dtype=np.float32).reshape(1, -1))
        new = [r for r in rows if r[0] > last and r[4] is not None]  # after the known ones: seq order
        for lo in range(0, len(new), 65536):  # appended a chunk at a time, as in a first load
            self._append_many(new[lo : lo + 65536])

    def set_status(self, pos: int, status: str, expires: float | None) -> None:
        """Set the status and expiry of the row at ``pos`` (every change of them goes through here or
        :meth:`extend`, and :meth:`live_mask`'s kept answer follows)."""
        self.active[pos] = status == "active"
        self.expires[pos] = until = np.inf if expires is None else expires
        kept = self._live
        if kept is not None and pos < kept[0]:  # the kept answer, as of its time, with this row's new state
            at, soonest, mask = kept[1], kept[2], kept[3]
            mask[pos] = status == "active" and until > at
            self._live = (kept[0], at, min(soonest, until) if until > at else soonest, mask)

    def live_mask(self, now: float, include_inactive: bool) -> npt.NDArray[np.bool_]:
        """Which of the first ``n`` rows are active and not expired at ``now`` (all of them with
        ``include_inactive``): a new array the caller may change.

        The last answer is kept as of the time it was computed for (1M rows: a copy of it costs ~0.05 ms,
        computing it 1.2–4 ms), and serves while ``now`` lies between that time and the soonest expiry still
        ahead of it; a ``now`` before that time is computed afresh (the clock went back). A row's new status
        or expiry (:meth:`set_status`) is written into it, and rows added since are computed alone, as of
        the same time: a single write into a big scope does not pay for every row.
        """
        n = self.n
        if include_inactive:
            return np.ones(n, dtype=bool)
        kept = self._live
        if kept is not None and kept[0] <= n and kept[1] <= now < kept[2]:
            if kept[0] < n:
                lo, at = kept[0], kept[1]
                ahead = self.expires[lo:n] > at
                soonest = min(kept[2], float(self.expires[lo:n].min(where=ahead, initial=np.inf)))
                kept = self._live = (n, at, soonest, np.concatenate([kept[3], self.active[lo:n] & ahead]))
            if now < kept[2]:
                return np.array(kept[3])
        future: npt.NDArray[np.bool_] = self.expires[:n] > now
        mask: npt.NDArray[np.bool_] = self.active[:n] & future
        soonest = float(self.expires[:n].min(where=future, initial=np.inf))
        self._live = (n, now, soonest, mask)
        return np.array(mask)

    def terms(
        self,
        scope: ScopeRef,
        stems: Sequence[str],
        now: float,
        everything: bool,
        texts: Callable[[npt.NDArray[np.int64]], Mapping[int, str]],
    ) -> ScopeTerms | None:
        """What one lexical search needs of this (refreshed) scope, None when it holds no fact. Facts not
        indexed yet are indexed first, their text read with ``texts(seqs)`` (seq -> content; a fact deleted
        meanwhile is missing, and indexed as empty: its deletion moves the epoch on). ``everything``: no
        status rule (``include_inactive`` or ``as_of``). Caller holds ``self.lock``."""
        n, index = self.n, self.postings
        if n == 0:
            return None
        if index.n < n:
            seqs = self.seq[index.n : n]
            found = texts(seqs)
            index.add([found.get(int(s), "") for s in seqs])
        return ScopeTerms(
            scope,
            n,
            {t: index.lookup(t) for t in stems},
            index.lengths[:n],
            index.avgdl,
            self.live_mask(now, everything),
            self.seq[:n],
            self.ids,
        )

    def view(
        self,
        scope: ScopeRef,
        q: npt.NDArray[np.float32],
        limit: int,
        filters: Filters,
        now: float,
        graph: tuple[VectorIndexKind, int, int],
        source: Any = None,
    ) -> ScopeView | None:
        """What one semantic search needs of this (refreshed) scope: its codes, ids, seqs and live mask, and the
        HNSW graph's candidates (``graph``: kind, min facts, ef) unless filters narrow the rows; None when the
        scope holds no vector. Caller holds ``self.lock``; narrowing filters are the backend's to apply."""
        n = self.n
        if n == 0:
            return None
        if q.shape[0] != self.dim:
            raise EmbeddingModelMismatchError(
                f"query vector has {q.shape[0]} dimensions, {scope} holds {self.dim}-d vectors"
            )
        everything = filters.include_inactive or filters.as_of is not None
        view = ScopeView(
            scope, self.codes.rows(n), self.ids, self.seq[:n], self.live_mask(now, everything), source=source
        )
        if graph[0] == "int4":
            view.packed = self.first_pass()
            return view
        ann = None if filters.narrows else self.graph(*graph)
        if ann is not None:
            view.graph = functools.partial(self._graph_candidates, ann, q, limit, view.mask, graph[2])
        return view

    def first_pass(self) -> Packed | None:
        """The scope's 4-bit first pass (:mod:`~.packed`), or None (exact scan) while there is none.

        A search of a scope of ``PACKED_FROM`` facts or more starts building it on a background thread, and
        is answered exactly, as are the searches that follow until it is ready; it is built again, the old
        one answering meanwhile, once the scope holds a quarter more rows than it covers (the rows past it
        are scanned exactly). Caller holds ``self.lock``.
        """
        if self.n < PACKED_FROM or self.packed_failed:
            return None
        have = self.packed
        if (have is None or self.n - have.n > have.n // 4) and not self.packed_building:
            self.packed_building = True
            generation, codes, n, changes = self.generation, self.codes, self.n, self.changes

            def build() -> None:
                made: Packed | None = None
                try:
                    made = Packed(codes, n)
                except _Abandoned:  # the process is exiting
                    pass
                except Exception:  # searches stay exact; the cause is logged once per index generation
                    _log.warning("the 4-bit first pass could not be built: searches scan exactly", exc_info=True)
                    with self.lock:
                        if self.generation == generation:
                            self.packed_failed = True
                finally:
                    with self.lock:
                        if self.generation == generation:
                            self.packed_building = False
                            if made is not None and self.changes == changes:
                                self._install_first_pass(made)

            # Not a daemon: an exit waits for it (at most the session's creation, see packed._Abandoned) instead of
            # tearing ONNX Runtime down under it.
            threading.Thread(target=build, name="asm-packed-build", daemon=False).start()
        return have

    def graph(self, kind: VectorIndexKind, min_facts: int, ef: int) -> Ann | None:
        """The scope's HNSW graph brought up to date, or None (exact scan) while it does not exist yet.

        The first search of a scope with ``min_facts`` or more facts starts building the graph on a background
        thread and is answered exactly, as are the searches that follow until the graph is ready; rows written
        since are added before each query. Caller holds ``self.lock``.
        """
        if kind != "hnsw" or self.n < min_facts:
            return None
        if self.ann is not None:
            self.ann.add(self.codes, self.n)
            return self.ann
        if not self.ann_building:
            self.ann_building = True
            generation, codes, n = self.generation, self.codes, self.n

            def build() -> None:
                ann: Ann | None = None
                try:
                    ann = Ann(codes, n, threads=max(1, (os.cpu_count() or 2) // 2), ef=ef)
                finally:  # a failed build is retried by a later search
                    with self.lock:
                        if self.generation == generation:
                            self.ann_building = False
                            self.ann = ann

            threading.Thread(target=build, name="asm-hnsw-build", daemon=True).start()
        return None

    def _graph_candidates(
        self, ann: Ann, q: npt.NDArray[np.float32], limit: int, live: npt.NDArray[np.bool_], ef: int
    ) -> npt.NDArray[np.int64] | None:
        """The live rows (of the first ``len(live)``) the graph proposes for ``q``, over-fetched so that
        inactive rows among them still leave ``limit``; None when the exact scan must answer (too many
        inactive neighbours). Takes the lock: rows appended since the view may be in the graph."""
        with self.lock:
            found, _ = ann.query(q, 2 * limit, ef)
        found = found[found < len(live)]
        keep = live[found]
        return found[keep] if keep.sum() >= min(limit, int(live.sum())) else None

    def build_graph(self, kind: VectorIndexKind, min_facts: int, ef: int, refresh: Callable[[], None]) -> bool:
        """Build the HNSW graph (``kind='hnsw'``) or the 4-bit first pass (``'int4'``) now, in this thread (e.g.
        at start-up, before the first search); searches go on meanwhile (exactly). ``refresh`` brings the index
        up to date (called under the lock). Returns False when there is nothing to build (``kind='exact'``,
        fewer than ``min_facts`` facts for a graph, fewer than ``PACKED_FROM`` for a first pass)."""
        if kind == "int4":
            return self._build_first_pass(refresh)
        if kind != "hnsw":
            return False
        with self.lock:
            refresh()
            if self.n < min_facts:
                return False
            generation, codes, n = self.generation, self.codes, self.n
            built = self.ann
        if built is None:  # rows below n never change in a generation
            built = Ann(codes, n, threads=os.cpu_count() or 1, ef=ef)
        with self.lock:
            if self.generation == generation and self.ann is None:
                self.ann = built
            if self.ann is not None:
                self.ann.add(self.codes, self.n)
        return True

    def _build_first_pass(self, refresh: Callable[[], None]) -> bool:
        while True:  # a build a search started is waited for, not repeated
            with self.lock:
                refresh()
                if self.n < PACKED_FROM:
                    return False
                if not self.packed_building:
                    break
            time.sleep(0.05)
        with self.lock:
            if self.packed is not None and self.packed.n == self.n:
                return True
            generation, codes, n, changes = self.generation, self.codes, self.n, self.changes
        made = Packed(codes, n)  # rows below n never change in a generation (one that does bumps changes)
        with self.lock:
            current = self.generation == generation and self.changes == changes
            if current and (self.packed is None or self.packed.n < made.n):
                self._install_first_pass(made)
        return True

    def _install_first_pass(self, made: Packed) -> None:
        """Searches use ``made`` from now on; the mapped coarse codes it covers leave this process's memory
        (a search scans them no more). Caller holds ``self.lock``."""
        self.packed = made
        if self.codes.file is not None and made.n >= self.codes.file.rows:
            self.codes.file.release("coarse")


def check_options(vector_index: object, **counts: object) -> None:
    """Validate a backend's vector-index and budget options at construction: a clear error, not a failure
    at the first big search (``hnsw`` needs the ``ann`` extra)."""
    if vector_index not in VECTOR_INDEX_KINDS:
        raise ValueError(f"vector_index must be 'int4', 'exact' or 'hnsw', got {vector_index!r}")
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if vector_index == "hnsw":
        try:
            import hnswlib  # noqa: F401
        except ImportError as exc:
            raise ImportError("vector_index='hnsw' needs hnswlib: pip install 'autogen-shared-memory[ann]'") from exc


class BatchInserts:
    """The facts a write batch inserts, on their way into the scope's index: added in one go when something
    is about to read the index (per row, numpy's call overhead cost more than the row's SQL), with the
    batch's vectors quantized once."""

    def __init__(self) -> None:
        self.position: dict[int, int] = {}  # vector of the write -> its index position, once added
        self.pending: list[tuple[int, int, str, bool, float | None]] = []  # (vector, seq, id, active, expires)
        self._codes: tuple[object, Codes] | None = None

    def add(self, j: int, seq: int, fact_id: str, active: bool, expires: float | None) -> None:
        self.pending.append((j, seq, fact_id, active, expires))

    def settle(self, index: VectorIndex, vectors: Vectors) -> None:
        """Add the pending facts to ``index`` (``vectors``: the write's, row ``j`` for vector ``j``)."""
        if not self.pending:
            return
        if self._codes is None or self._codes[0] is not vectors:
            self._codes = (vectors, quantize(np.asarray(vectors, dtype=np.float32)))
        js, seqs, ids, active, expires = zip(*self.pending, strict=True)
        self.pending.clear()
        index.extend(seqs, ids, self._codes[1].take(np.asarray(js, dtype=np.int64)), active, expires)
        self.position.update(zip(js, range(index.n - len(js), index.n), strict=True))


class Ann:
    """An HNSW graph (hnswlib) over the rebuilt rows of one scope's codes: approximate top-k in ~1 ms at any
    size, where the exact scan reads every vector's coarse codes (1M facts: 384 MB per query). Labels are
    row positions; status, expiry and filters are applied to its candidates afterwards, as for the scan."""

    M = 16
    EF_CONSTRUCTION = 64

    def __init__(self, codes: Codes, n: int, threads: int, ef: int) -> None:
        import hnswlib

        self.graph = hnswlib.Index(space="ip", dim=int(codes.coarse.shape[1]))
        self.graph.init_index(max_elements=max(1024, n + n // 4), ef_construction=self.EF_CONSTRUCTION, M=self.M)
        self.threads = threads
        self.ef = ef
        self.n = 0
        self.add(codes, n)

    def add(self, codes: Codes, n: int) -> None:
        """Insert rows ``self.n .. n-1`` of ``codes`` (rows are append-only within an index generation)."""
        if n <= self.n:
            return
        capacity = self.graph.get_max_elements()
        if n > capacity:
            self.graph.resize_index(max(n, capacity + capacity // 2))
        for lo in range(self.n, n, 65536):  # float32 copies a block at a time
            hi = min(n, lo + 65536)
            self.graph.add_items(codes.rebuild(slice(lo, hi)), np.arange(lo, hi), num_threads=self.threads)
        self.n = n

    def query(
        self, q: npt.NDArray[np.float32], k: int, ef: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Positions and cosines of (about) the ``k`` nearest rows, best first."""
        found, sims = self.query_many(q.reshape(1, -1), k, ef)
        return found[0], sims[0]

    def query_many(
        self, vectors: Vectors, k: int, ef: int | None = None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        self.graph.set_ef(max(ef or self.ef, k))  # hnswlib's default (10) would miss near neighbours
        labels, distances = self.graph.knn_query(vectors, k=min(k, self.n), num_threads=1)
        return labels.astype(np.int64), (1.0 - distances).astype(np.float32)


class NearestExisting:
    """Near-duplicate and similar-fact lookup for one write batch.

    Up front, the HNSW graph, a big scope's nearest cells (:class:`~.cells.Cells`), or in a small scope one
    pass over every row (coarse int8 bounds for a single vector, rebuilt rows for a batch) proposes each
    vector's nearest live facts whose rebuilt cosine can reach ``floor`` (the rebuilt cosine's error bound
    included); ``lookup(j)`` adds the facts inserted earlier in this batch and
    returns the most similar live ones at or above ``floor``: re-scored exactly from the file where they can
    reach ``exact_from`` (the merge decision), rebuilt (within ~4e-5) below it (the similar list).
    """

    CANDIDATES = 8

    def __init__(
        self,
        exact: Exact,
        index: VectorIndex,
        vectors: Vectors,
        now: float,
        floor: float,
        exact_from: float,
        inserted: Mapping[int, int],
    ) -> None:
        self.exact, self.index, self.vectors, self.floor, self.exact_from = exact, index, vectors, floor, exact_from
        self.near: list[npt.NDArray[np.int64]] = [np.zeros(0, dtype=np.int64)] * len(vectors)
        self.rebuilt: dict[int, tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]] = {}  # near[j]'s cosines
        self.earlier = self._within_batch()
        self.position = inserted  # batch vector -> index position, for the ones this batch inserted
        if floor > 1.0 or index.n == 0 or len(vectors) == 0:
            return
        live = index.live_mask(now, include_inactive=False)
        if not live.any():
            return
        codes = index.codes.rows(index.n)
        if index.ann is not None:  # a big scope with a graph: ask it instead of scanning every vector
            index.ann.add(codes, index.n)
            found, _ = index.ann.query_many(vectors, min(self.CANDIDATES, index.n))
            self.near = [self._reaching(codes, rows[live[rows]], j) for j, rows in enumerate(found)]
            return
        if index.n >= CELLS_FROM:  # a big scope: the rows of the vectors' nearest cells, not every row
            self._cells(codes, live)
            return
        if len(vectors) == 1:  # one remember: the coarse bounds shortlist the rows that can reach it
            q = np.asarray(vectors[0], dtype=np.float32)
            self.near = [self._reaching(codes, shortlist(int8_bounds([codes], q)[0], q, live, 1, floor), 0)]
            return
        self._scan(codes, live)

    def _scan(self, codes: Codes, live: npt.NDArray[np.bool_]) -> None:
        """Each batch vector's candidates from upper bounds on its product with every rebuilt row of a small
        scope (rounding within ``d * 2**-23`` of ``|x| |v|``, twice the textbook bound), a chunk of the batch
        at a time: no row whose rebuilt cosine (or stored one) can reach the floor is left out;
        :meth:`_nearest` picks the ones that can be among the nearest."""
        quantized: list[Codes] = []  # the batch's codes, made when a dense neighbourhood needs them
        for lo, cols, hits in self._rebuilt(codes, np.asarray(self.vectors, dtype=np.float32)):
            keep = live[hits]
            cols, hits = cols[keep], hits[keep]
            cuts = np.searchsorted(cols, np.arange(int(cols[-1]) + 2)) if len(cols) else np.zeros(1, np.int64)
            for col in np.flatnonzero(np.diff(cuts)):  # most vectors have no near match
                self.near[lo + col] = self._nearest(codes, hits[cuts[col] : cuts[col + 1]], quantized, lo + col)

    def _cells(self, codes: Codes, live: npt.NDArray[np.bool_]) -> None:
        """Each batch vector's candidates among the rows of its nearest cells (:class:`Cells`), then
        :meth:`_nearest`'s. A near duplicate that the cells do not propose is missed, and the write keeps the
        fact as a new one."""
        index = self.index
        cells = index.cells = grown(index.cells, index.generation, codes, len(codes))
        vectors = np.asarray(self.vectors, dtype=np.float32)
        quantized = [quantize(vectors)]
        for j, rows in enumerate(cells.probe(quantized[0], self.floor)):
            rows = rows[live[rows]]
            if len(rows):
                self.near[j] = self._nearest(codes, rows, quantized, j)

    def _rebuilt(
        self, codes: Codes, vectors: npt.NDArray[np.float32]
    ) -> Iterator[tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
        """The pairs whose bound reaches the floor, from the products with the rebuilt rows: their float32
        rounding is within ``d * 2**-23`` of ``|x| |v|`` (twice the textbook bound), added to the rows' slack,
        and so is ``cosines()``'s rounding margin (``ROUNDING``, twice, as the coarse bounds' margin has it):
        every row that :meth:`_reaching`'s re-check on ``cosines()`` could keep is a candidate, whichever path
        found it (without it, a row within ~1e-6 of the floor was kept by a single ``remember`` and not by
        this one)."""
        slack = codes.slack + np.float32(codes.coarse.shape[1] * 2.0**-23 + 2 * ROUNDING) * codes.norm
        for lo in range(0, len(vectors), 256):
            chunk = vectors[lo : lo + 256]
            products = scan_many(codes, chunk)
            q_norms = norms(chunk)
            # The bound is the product plus |v| times the row's slack (~1e-4): a pass over the products, with a
            # margin of the largest such term, leaves the few pairs that need it, which then get it exactly.
            hits, cols = pairs(products >= self.floor - 2 * float(q_norms.max()) * float(slack.max()) - 1e-6)
            keep = products[hits, cols] + q_norms[cols] * slack[hits] >= self.floor
            order = np.argsort(cols[keep], kind="stable")  # by vector, then row
            yield lo, cols[keep][order].astype(np.int64), hits[keep][order].astype(np.int64)

    def _nearest(
        self, codes: Codes, rows: npt.NDArray[np.int64], quantized: list[Codes], j: int
    ) -> npt.NDArray[np.int64]:
        """:meth:`_reaching` of ``rows`` for vector ``j``; in a dense neighbourhood (hundreds of rows whose
        bound reaches the floor) only the ones that can be among its ``CANDIDATES`` nearest by rebuilt cosine:
        the coarse int8 estimates bound it within ``half`` (their error plus the rebuilt cosine's), and a row
        whose upper end stays below the ``CANDIDATES``-th best lower end of the rows sure to reach the floor
        cannot be among them."""
        if len(rows) > 4 * self.CANDIDATES:
            if not quantized:
                quantized.append(quantize(np.asarray(self.vectors, dtype=np.float32)))
            estimate, error = coarse_bounds(codes, rows, quantized[0], j)
            q_norm = np.float32(quantized[0].norm[j])
            rebuilt = 1.01 * q_norm * (codes.slack[rows] + np.float32(ROUNDING) * codes.norm[rows])  # cosines()'s error
            half = error + rebuilt
            upper, lower = estimate + half, estimate - half
            may = upper + rebuilt >= self.floor
            sure = lower >= self.floor
            if sure.sum() >= self.CANDIDATES:
                kth = np.partition(lower[sure], int(sure.sum()) - self.CANDIDATES)[int(sure.sum()) - self.CANDIDATES]
                may &= upper >= kth
            rows = rows[may]
        return self._reaching(codes, rows, j)

    def _within_batch(self) -> list[npt.NDArray[np.int64]]:
        """For each vector of the batch, the earlier ones whose cosine with it can reach the floor (at most
        ``4 * CANDIDATES``, the nearest): one float32 product per block of the batch, instead of comparing
        each vector with every fact inserted before it (quadratic per-row work for big batches)."""
        n = len(self.vectors)
        out = [np.zeros(0, dtype=np.int64)] * n
        if self.floor > 1.0 or n < 2:
            return out
        vectors = np.asarray(self.vectors, dtype=np.float32)
        keep = 4 * self.CANDIDATES
        for lo in range(1, n, 512):
            hi = min(n, lo + 512)
            with one_blas_thread():  # float32 products: well within 1e-4 of the exact ones
                block = vectors[lo:hi] @ vectors[:hi].T
            # the pairs (j, i < j) that can reach the floor, in row order: most rows have none
            rows, cols = pairs(np.tril(block >= self.floor - 1e-4, lo - 1))
            cuts = np.searchsorted(rows, np.arange(hi - lo + 1))
            for r in np.flatnonzero(np.diff(cuts)):
                found = cols[cuts[r] : cuts[r + 1]]
                if len(found) > keep:
                    found = found[np.argpartition(-block[r, found], keep)[:keep]]
                out[lo + r] = found
        return out

    def _reaching(self, codes: Codes, rows: npt.NDArray[np.int64], j: int) -> npt.NDArray[np.int64]:
        """The (at most ``CANDIDATES``) rows whose rebuilt cosine with vector ``j`` can reach the floor,
        nearest first."""
        if len(rows) == 0:
            return rows
        approx, error = codes.cosines(rows, np.asarray(self.vectors[j], dtype=np.float32))
        keep = np.flatnonzero(approx + error >= self.floor)
        keep = keep[np.argsort(-approx[keep], kind="stable")][: self.CANDIDATES]
        self.rebuilt[j] = approx[keep], error[keep]  # lookup(j) needs them again (a row's do not depend on the others)
        return rows[keep]

    def lookup(self, j: int) -> list[tuple[int, float]]:
        """Index positions and cosines of the live facts (this batch's inserts included) at or above the
        floor, most similar first; exact where they can reach ``exact_from``."""
        if self.floor > 1.0 or not (len(self.near[j]) or len(self.earlier[j])):  # most vectors: nothing near
            return []
        index = self.index
        q = np.asarray(self.vectors[j], dtype=np.float32)
        positions = self.near[j]
        empty = np.zeros(0, dtype=np.float32)
        approx, error = self.rebuilt.get(j, (empty, empty))
        batch = [self.position[i] for i in self.earlier[j] if i in self.position]  # inserted by this batch
        if batch:
            mine = np.asarray(batch, dtype=np.int64)
            more = index.codes.cosines(mine, q)
            positions = np.concatenate([positions, mine])
            approx, error = np.concatenate([approx, more[0]]), np.concatenate([error, more[1]])
        live = index.active[positions]
        positions, approx, error = positions[live], approx[live], error[live]  # (copies)
        if len(positions) == 0:
            return []
        keep = approx + error >= self.floor
        positions, approx, error = positions[keep], approx[keep], error[keep]
        doubt = np.flatnonzero(approx + error >= self.exact_from)
        if len(doubt):
            approx[doubt] = self.exact(index.seq[positions[doubt]], q)
        order = [i for i in np.argsort(-approx, kind="stable") if approx[i] >= self.floor]
        return [(int(positions[i]), float(approx[i])) for i in order[: self.CANDIDATES]]


@dataclass
class ScopeView:
    """What one semantic search needs of a scope: its vectors, ids, seqs and live rows (a backend's refreshed
    :class:`VectorIndex`), and the candidates found when its HNSW graph answered."""

    scope: ScopeRef
    codes: Codes
    ids: Sequence[str]
    seqs: npt.NDArray[np.int64]
    mask: npt.NDArray[np.bool_]
    found: npt.NDArray[np.int64] | None = None
    source: Any = None  # what the backend needs to re-score this scope's rows exactly (a connection, say)
    graph: Callable[[], npt.NDArray[np.int64] | None] | None = None  # asks the HNSW graph (sets found)
    packed: Packed | None = None  # the 4-bit first pass over the first rows (the rest are scanned exactly)


def rank_across(
    views: Sequence[ScopeView],
    q: npt.NDArray[np.float32],
    limit: int,
    exact: Callable[[Sequence[tuple[ScopeView, npt.NDArray[np.int64]]]], Sequence[npt.NDArray[np.float32]]],
) -> list[tuple[ScopeRef, str, float]]:
    """The ``limit`` rows of all ``views`` nearest to ``q``, ranked by float32 cosine, best first.

    The scopes' HNSW graphs are asked side by side (a scope whose graph cannot answer is scanned); the coarse
    int8 scans of every other scope run at once and shortlist the rows that can make each scope's top; their
    rebuilt cosines (with a bound per row) pick the rows that can make the overall top ``limit``, and only those
    whose order is still in doubt (their intervals overlap) are re-scored from the stored float32 vectors by
    one call of ``exact([(view, seqs), ...])`` for every scope that has such rows (one array of cosines per
    pair, ``-inf`` for a row gone meanwhile: a server answers them all in one round trip).
    """
    asked = [v for v in views if v.graph is not None]  # each scope's graph on its own core (lock)
    answers = side_by_side([v.graph for v in asked if v.graph], os.cpu_count() or 1, scan_pool())
    for view, rows in zip(asked, answers, strict=True):
        view.found = rows
    to_scan = [v for v in views if v.found is None]
    heads = [0 if v.packed is None else v.packed.n for v in to_scan]  # rows the first pass covers
    parts = [v.codes if head == 0 else v.codes.since(head) for v, head in zip(to_scan, heads, strict=True)]
    masks = [v.mask[head:] for v, head in zip(to_scan, heads, strict=True)]
    some = [j for j, part in enumerate(parts) if len(part)]  # a first pass may leave no row to scan
    bounds = int8_bounds([parts[j] for j in some], q, [masks[j] for j in some], limit) if some else []
    scans = dict(zip(some, bounds, strict=True))
    for j, (view, head, mask) in enumerate(zip(to_scan, heads, masks, strict=True)):
        view.found = shortlist(scans[j], q, mask, limit) if j in scans else np.zeros(0, dtype=np.int64)
        if view.packed is not None:
            first = view.packed.candidates(q, view.mask[:head], limit)
            view.found = np.concatenate([first, view.found + head])
    found = [(v, v.found, *v.codes.cosines(v.found, q)) for v in views if v.found is not None and len(v.found)]
    if not found:
        return []
    approx = np.concatenate([a for _, _, a, _ in found])
    error = np.concatenate([e for _, _, _, e in found])
    owner = np.concatenate([np.full(len(rows), i) for i, (_, rows, _, _) in enumerate(found)])
    rows = np.concatenate([rows for _, rows, _, _ in found])
    top = contenders(approx, error, limit)
    approx, error, owner, rows = approx[top], error[top], owner[top], rows[top]
    doubtful = overlapping(approx, error)
    redo = [(view, np.flatnonzero(doubtful & (owner == i))) for i, (view, *_) in enumerate(found)]
    redo = [(view, at) for view, at in redo if len(at)]
    if redo:
        for (_, at), scores in zip(redo, exact([(view, view.seqs[rows[at]]) for view, at in redo]), strict=True):
            approx[at] = scores
    order = np.argsort(-approx, kind="stable")[:limit]
    return [
        (found[owner[i]][0].scope, found[owner[i]][0].ids[int(rows[i])], float(approx[i]))
        for i in order
        if approx[i] > -np.inf
    ]
