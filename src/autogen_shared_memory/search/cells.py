"""The cells of a scope's vectors: an inverted file that proposes a write's near-duplicate candidates from a
few cells of the scope instead of every row.

Every row belongs to one cell, the one whose centre (the normalised mean of its rows when the cell was made)
is nearest; a vector's candidates are the rows of the :data:`PROBES` cells whose centres are nearest to it,
narrowed by the signs of their coordinates (:func:`sign_limit`). A cell that outgrows twice
:func:`cell_size` splits in two (2-means on its rows), so cells grow with the square root of the scope: a
vector is compared with about ``2 * sqrt(PROBES * n)`` centres and rows instead of ``n`` rows.

It is an approximation, and only ever on the side of keeping a fact: a near duplicate that is not proposed is
not merged into, so the write stores a new fact; every proposed row is still re-checked on bounded int8
products, and a merge is decided on the exact float32 cosine and the wording rule
(:func:`~autogen_shared_memory.core.lifecycle.says_the_same`).
"""

from __future__ import annotations

import contextlib
import math
import threading

import numpy as np
import numpy.typing as npt

from .int8 import Codes, one_blas_thread

PROBES = 16  # cells read per vector: a near duplicate of real embeddings sits in its vector's nearest cells
CELLS_FROM = 4096  # rows: below this, a batch's products with every rebuilt row cost about as much
_SEEDS = 64  # first-level cells of a first build (k-means on a sample), then split down to cell_size
_CHUNK = 32768  # rows converted to float32 at a time


def cell_size(n: int) -> int:
    """The size a cell of an ``n``-row scope aims at: it splits past twice this. ``sqrt(n / PROBES)`` balances
    the products with the centres (``n / size``) against the rows of the probed cells (``PROBES * size``)."""
    return max(32, math.isqrt(max(1, n // PROBES)))


SIGN_BITS = 384  # coordinates whose signs narrow a probe: 48 bytes a row, 6 words of 64 bits


def signs(coarse: npt.NDArray[np.int8]) -> npt.NDArray[np.uint64]:
    """The signs of each row's first :data:`SIGN_BITS` coordinates as bits, in 64-bit words, one column per
    row (zeros past a shorter row's end): a probe compares every row's first word, then every row's second..."""
    packed = np.packbits(coarse[:, :SIGN_BITS] > 0, axis=1)
    bits = np.zeros((len(coarse), SIGN_BITS // 8), dtype=np.uint8)
    bits[:, : packed.shape[1]] = packed
    return np.ascontiguousarray(bits.view(np.uint64).T)


def differing(rows: npt.NDArray[np.uint64], q: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint16]:
    """In how many of the :data:`SIGN_BITS` signs each column of ``rows`` differs from the column ``q``."""
    return np.asarray(np.bitwise_count(rows ^ q[:, None]).sum(axis=0, dtype=np.uint16))


def sign_limit(dim: int, floor: float) -> int:
    """The most coordinate signs two vectors whose cosine reaches ``floor`` may differ in, with room: for
    directions spread evenly the share that differs is ``angle / pi`` (a random hyperplane splits them with
    that chance), and the limit adds 7 standard deviations of that count; below the floor a pair's share grows
    with its angle (a cosine of 0: half the signs, 9 standard deviations over a 0.8 floor's limit at 384-d)."""
    share = math.acos(max(-1.0, min(1.0, floor))) / math.pi
    return math.ceil(dim * share + 7 * math.sqrt(dim * share * (1 - share)) + 2)


def _unit(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    size = np.linalg.norm(rows, axis=-1, keepdims=True)
    return np.asarray(rows / np.where(size > 0, size, 1.0), dtype=np.float32)


def _halves(x: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
    """Which rows of ``x`` (unit rows) go to the first half of a split: 2-means on a sample from the first row
    and the one least like it, then every row to the nearer centre; rows 2-means cannot part are halved."""
    sample = x[:: max(1, len(x) // 256)]
    centres = np.stack([sample[0], sample[int(np.argmin(sample @ sample[0]))]])
    for _ in range(3):
        scores = sample @ centres.T
        side = scores[:, 0] >= scores[:, 1]
        if side.all() or not side.any():
            break
        centres = _unit(np.stack([sample[side].sum(axis=0), sample[~side].sum(axis=0)]))
    scores = x @ centres.T
    side = scores[:, 0] >= scores[:, 1]
    if side.all() or not side.any():
        side = np.arange(len(x)) < len(x) // 2
    return np.asarray(side)


def _directions(codes: Codes, rows: npt.NDArray[np.int64] | slice) -> npt.NDArray[np.float32]:
    """The rows' directions from their coarse codes (the scale is a positive factor per row: it changes no
    nearest centre)."""
    coarse = codes.coarse[rows] if isinstance(rows, slice) else codes.gather("coarse", rows)
    return _unit(coarse.astype(np.float32))


class Cells:
    """The cells of the first ``n`` rows of one scope index generation (rows never change within one), with
    the signs of their rows' coordinates (:func:`signs`) stored cell by cell: a probe reads a few contiguous
    blocks instead of gathering rows from all over the scope."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.centres = np.zeros((0, 0), dtype=np.float32)
        self.members: list[npt.NDArray[np.int64]] = []
        self.signs: list[npt.NDArray[np.uint64]] = []  # of each cell's rows (columns), in its members' order
        self.sums = np.zeros((0, 0), dtype=np.float32)  # of each cell's row directions: its centre's direction
        self.n = 0
        self.lock = threading.Lock()
        # the nearest centre of each vector of the last probe, by its coarse codes: the rows a batch stores
        # are placed with the product its probe made (valid while the centres stay as they were then)
        self._known: dict[bytes, int] = {}

    def extend(self, codes: Codes, n: int) -> None:
        """Place rows ``self.n .. n - 1`` of ``codes``: all at once on the first call (first-level cells by
        k-means on a sample, split down to :func:`cell_size`); after that each row joins the cell of its
        nearest centre, which moves with it (the normalised sum of its rows: cells made before a new kind of
        fact came follow it), and a cell that outgrows twice :func:`cell_size` splits in two. Only the cells
        that rows joined are touched (a single write costs one product with the centres)."""
        with self.lock, one_blas_thread() if n - self.n > 16 else contextlib.nullcontext():
            if n <= self.n:
                return
            limit = 2 * cell_size(n)
            if self.n == 0:
                self.members, self.signs, sums = [], [], []
                for rows in self._seeded(codes, n):
                    sums += self._place(codes, rows, limit)
                self.sums = np.ascontiguousarray(np.stack(sums), dtype=np.float32)
                self.centres = _unit(self.sums)
                self.n = n
                return
            touched: set[int] = set()
            for lo in range(self.n, n, _CHUNK):
                hi = min(n, lo + _CHUNK)
                x = _directions(codes, slice(lo, hi))
                best = self._nearest_known(codes.coarse[lo:hi])
                unknown = best < 0
                if unknown.any():
                    best[unknown] = np.argmax(x[unknown] @ self.centres.T, axis=1)
                order = np.argsort(best, kind="stable")
                cuts = np.searchsorted(best[order], np.arange(len(self.members) + 1))
                joined = np.flatnonzero(np.diff(cuts))
                self.sums[joined] += np.add.reduceat(x[order], cuts[joined], axis=0)
                added = signs(codes.coarse[lo:hi])
                for cell in joined.tolist():
                    new = order[cuts[cell] : cuts[cell + 1]]
                    self.members[cell] = np.concatenate([self.members[cell], lo + new])
                    self.signs[cell] = np.concatenate([self.signs[cell], added[:, new]], axis=1)
                    touched.add(cell)
            self._known = {}
            more: list[npt.NDArray[np.float32]] = []
            for cell in sorted(touched):
                if len(self.members[cell]) > limit:  # split: the first part keeps the cell's place
                    rows, first = self.members[cell], len(self.members)
                    parts = self._place(codes, rows, limit)
                    self.members[cell], self.signs[cell] = self.members.pop(first), self.signs.pop(first)
                    self.sums[cell] = parts[0]
                    more += parts[1:]
            if more:
                self.sums = np.ascontiguousarray(np.concatenate([self.sums, np.stack(more)]), dtype=np.float32)
                self.centres = _unit(self.sums)
            else:
                changed = np.fromiter(touched, dtype=np.int64)
                self.centres[changed] = _unit(self.sums[changed])
            self.n = n

    def _nearest_known(self, coarse: npt.NDArray[np.int8]) -> npt.NDArray[np.int64]:
        """The nearest centre of each row of ``coarse`` that the last probe found (its vector's codes were
        the same), -1 for the others."""
        known = self._known
        if not known:  # no probe since the last placement (a first load, another process's rows)
            return np.full(len(coarse), -1, dtype=np.int64)
        return np.fromiter((known.get(row.tobytes(), -1) for row in coarse), dtype=np.int64, count=len(coarse))

    def _place(self, codes: Codes, rows: npt.NDArray[np.int64], limit: int) -> list[npt.NDArray[np.float32]]:
        """Append ``rows`` as cells of at most ``limit`` rows (halving by 2-means) to ``members`` and
        ``signs``; return their sums of row directions."""
        x = _directions(codes, rows)
        sums = []
        for part in self._split(x, limit):
            self.members.append(rows[part])
            self.signs.append(signs(codes.gather("coarse", rows[part])))
            sums.append(x[part].sum(axis=0))
        return sums

    def _seeded(self, codes: Codes, n: int) -> list[npt.NDArray[np.int64]]:
        """First-level cells of rows ``0 .. n - 1``: a few k-means rounds on an even sample, then every row to
        its nearest seed."""
        sample = _directions(codes, np.linspace(0, n - 1, min(n, 64 * _SEEDS)).astype(np.int64))
        k = min(_SEEDS, max(1, n // (2 * cell_size(n))))
        seeds = sample[np.linspace(0, len(sample) - 1, k).astype(np.int64)]
        for _ in range(4):
            best = np.argmax(sample @ seeds.T, axis=1)
            sums = np.zeros_like(seeds)
            np.add.at(sums, best, sample)
            seeds = np.where(np.bincount(best, minlength=k)[:, None] > 0, _unit(sums), seeds)
        owner = np.zeros(n, dtype=np.int64)
        for lo in range(0, n, _CHUNK):
            owner[lo : lo + _CHUNK] = np.argmax(_directions(codes, slice(lo, min(n, lo + _CHUNK))) @ seeds.T, axis=1)
        order = np.argsort(owner, kind="stable")
        cuts = np.searchsorted(owner[order], np.arange(k + 1))
        return [order[cuts[c] : cuts[c + 1]].astype(np.int64) for c in range(k) if cuts[c + 1] > cuts[c]]

    @staticmethod
    def _split(x: npt.NDArray[np.float32], limit: int) -> list[npt.NDArray[np.int64]]:
        """Positions in ``x`` in parts of at most ``limit``, halving by 2-means."""
        out, todo = [], [np.arange(len(x))]
        while todo:
            part = todo.pop()
            if len(part) <= limit:
                out.append(part)
                continue
            side = _halves(x[part])
            todo += [part[side], part[~side]]
        return out

    def probe(self, vectors: Codes, floor: float) -> list[npt.NDArray[np.int64]]:
        """For each of ``vectors`` (a batch's codes), the rows of the :data:`PROBES` cells whose centres are
        nearest to it whose coordinate signs differ from its own in at most :func:`sign_limit` places, in
        ascending order."""
        with self.lock:  # extend changes cells in place (only writers of the scope probe: they take turns anyway)
            return self._probe(vectors, floor)

    def _probe(self, vectors: Codes, floor: float) -> list[npt.NDArray[np.int64]]:
        centres, members, marks = self.centres, self.members, self.signs
        b = len(vectors)
        if b == 0 or not members:
            return [np.zeros(0, dtype=np.int64)] * b
        if len(members) <= PROBES:
            nearest = np.broadcast_to(np.arange(len(members)), (b, len(members)))
            self._known = {}
        else:
            with one_blas_thread() if b > 16 else contextlib.nullcontext():  # a few rows: no BLAS threads anyway
                scores = _unit(vectors.coarse.astype(np.float32)) @ centres.T
            nearest = np.argpartition(scores, -PROBES, axis=1)[:, -PROBES:]
            best = np.argmax(scores, axis=1).tolist()
            self._known = {row.tobytes(): cell for row, cell in zip(vectors.coarse, best, strict=True)}
        q, limit, out = signs(vectors.coarse), sign_limit(min(SIGN_BITS, centres.shape[1]), floor), []
        none = np.zeros(0, dtype=np.int64)
        for j, cells in enumerate(nearest):
            close = differing(np.concatenate([marks[c] for c in cells], axis=1), q[:, j]) <= limit
            out.append(np.sort(np.concatenate([members[c] for c in cells])[close]) if close.any() else none)
        return out


def grown(found: Cells | None, generation: int, codes: Codes, n: int) -> Cells:
    """``found`` (a scope index's cells) with rows up to ``n`` placed while it serves index ``generation``,
    else new cells of the first ``n`` rows."""
    if found is None or found.generation != generation or found.n > n:
        found = Cells(generation)
    found.extend(codes, n)
    return found
