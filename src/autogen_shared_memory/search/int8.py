"""Vectors as two levels of int8 codes, and products with exact error bounds.

A scan reads a quarter of the float32 bytes (the coarse codes), and every estimate comes with a bound on its
error, not an estimate of it: a row chosen on the bounds is never missed, and only rows whose order is still in
doubt are re-scored from float32 (``tests/search/test_vector_scan.py`` checks the bounds as properties).
"""

from __future__ import annotations

import functools
import itertools
import mmap
import os
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

_BLAS: Any = None

SCAN_BLOCK = 32768  # rows: below this many in all, one scan task (a thread hand-off would cost more)
_SCAN_POOL: tuple[int, ThreadPoolExecutor] | None = None


def scan_pool() -> ThreadPoolExecutor:
    """Threads that scan one block each (SimSIMD releases the GIL and uses no thread team of its own)."""
    global _SCAN_POOL
    if _SCAN_POOL is None or _SCAN_POOL[0] != os.getpid():
        _SCAN_POOL = (os.getpid(), ThreadPoolExecutor(os.cpu_count() or 1, "asm-scan"))
    return _SCAN_POOL[1]


class RowFile:
    """Where a mapped index's code rows also lie in its file (:mod:`~.saved`): the first ``rows`` rows of each
    int8 code array, ``width`` bytes a row from its offset.

    A gather of scattered rows reads them from the file (one ``pread`` each) instead of through the mapping:
    on kernels that keep files in large folios (ext4 on Linux 6.18 here), one touched byte maps a whole folio,
    and a few hundred scattered rows mapped most of a 1M-fact scope's codes into every process that looked
    at them. The rows are the same either way: rows below ``rows`` never change within an index generation,
    and the descriptor keeps the mapped file, not whatever file is renamed over it later.
    """

    __slots__ = ("__weakref__", "fd", "map", "offsets", "rows", "scanned", "width")

    def __init__(
        self, fd: int, offsets: dict[str, int], rows: int, width: int, mapping: mmap.mmap | None = None
    ) -> None:
        self.fd, self.offsets, self.rows, self.width, self.map = fd, offsets, rows, width, mapping
        self.scanned = False  # a search scanned the coarse codes: they are mapped already, gathers read them there
        weakref.finalize(self, os.close, fd)

    def release(self, name: str) -> None:
        """Drop the pages of the file's rows of code array ``name`` from this process (the 4-bit first pass
        scans instead of them): they are read back from the file if anything touches them again.

        Only whole pages within the file's rows are dropped, and only while this file still describes the
        codes (a row changed in place detaches it: :meth:`VectorIndex._set_vectors`): the mapping is
        copy-on-write, and a dropped page that had been written would lose what was written.
        """
        if self.map is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        start = -(-self.offsets[name] // page) * page
        end = (self.offsets[name] + self.rows * self.width) // page * page
        if end > start:
            self.map.madvise(mmap.MADV_DONTNEED, start, end - start)
        if name == "coarse":
            self.scanned = False  # gathers read the file again

    def gather(self, name: str, array: npt.NDArray[np.int8], rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int8]:
        """``array[rows]`` with the rows in the file read from it.

        Args:
            name: which code array (``"coarse"`` or ``"fine"``).
            array: that array as this process holds it (rows past ``self.rows`` are read there).
            rows: row positions, in any order, repeats allowed.

        Returns:
            The rows, a new ``(len(rows), width)`` array.

        Raises:
            OSError: the file could not be read.
        """
        rows = np.asarray(rows, dtype=np.int64)
        in_file = rows < self.rows
        if len(rows) > self.rows // GATHER_SHARE or not in_file.any() or not _PREAD:  # the mapping
            return array[rows]
        base, width, fd = self.offsets[name], self.width, self.fd
        out = np.frombuffer(
            b"".join(os.pread(fd, width, base + r * width) for r in rows[in_file].tolist()), dtype=np.int8
        ).reshape(-1, width)
        if in_file.all():
            return out
        whole = np.empty((len(rows), width), dtype=np.int8)
        whole[in_file] = out
        whole[~in_file] = array[rows[~in_file]]
        return whole


GATHER_SHARE = 16  # a gather of more than 1/16 of the file's rows reads the mapping (it is most pages anyway)
_PREAD = hasattr(os, "pread")  # not on Windows: gathers read the mapping there

CODE_ARRAYS = ("coarse", "scale", "coarse_slack", "fine", "fine_scale", "slack", "norm")


@dataclass
class Codes:
    """Vectors as two levels of int8 codes: ``x = scale * coarse + fine_scale * fine + residual``.

    A scan reads only the coarse codes (a quarter of the float32 bytes); with the fine codes a row is rebuilt
    to within ``slack = |residual|`` (3e-5 to 4e-5 for MiniLM vectors). Each level keeps the exact norm of
    what it leaves out (``coarse_slack = |x - scale * coarse|``, ``slack``) and ``norm = |x|``, so every
    product computed on the codes comes with a bound on its error, not an estimate of it. ``file``: where the
    first rows of mapped codes lie in their file (:meth:`gather` reads scattered rows there).
    """

    coarse: npt.NDArray[np.int8]
    scale: npt.NDArray[np.float32]
    coarse_slack: npt.NDArray[np.float32]
    fine: npt.NDArray[np.int8]
    fine_scale: npt.NDArray[np.float32]
    slack: npt.NDArray[np.float32]
    norm: npt.NDArray[np.float32]
    file: RowFile | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, arrays: Iterable[npt.NDArray[Any]], file: RowFile | None = None) -> Codes:
        """Codes of the arrays in :data:`CODE_ARRAYS` order.

        Args:
            arrays: the seven arrays, in :data:`CODE_ARRAYS` order.
            file: where their first rows lie in a saved index's file, if they are mapped from one.

        Returns:
            The codes.
        """
        named: dict[str, Any] = dict(zip(CODE_ARRAYS, arrays, strict=True))
        return cls(**named, file=file)

    def __len__(self) -> int:
        return len(self.coarse)

    def rows(self, n: int) -> Codes:
        """The first ``n`` rows: they stay put while other threads append (or replace the arrays)."""
        return Codes.of((getattr(self, name)[:n] for name in CODE_ARRAYS), self.file)

    def since(self, lo: int) -> Codes:
        """Rows ``lo`` onwards (views; their positions start at 0, so they are gathered through the arrays)."""
        return Codes.of(getattr(self, name)[lo:] for name in CODE_ARRAYS)

    def take(self, rows: npt.NDArray[np.int64]) -> Codes:
        """These rows (a copy)."""
        return Codes.of(self.gather(name, rows) for name in CODE_ARRAYS)

    def gather(self, name: str, rows: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """``rows`` of the array ``name``, the int8 codes of mapped rows read from their file (:class:`RowFile`).

        Args:
            name: one of :data:`CODE_ARRAYS`.
            rows: row positions.

        Returns:
            A new array of those rows.
        """
        array = getattr(self, name)
        if self.file is None or array.dtype != np.int8 or (name == "coarse" and self.file.scanned):
            return np.asarray(array[rows])
        return self.file.gather(name, array, rows)

    def rebuild(self, rows: npt.NDArray[np.int64] | slice) -> npt.NDArray[np.float32]:
        """float32 vectors of ``rows``, each within its ``slack`` of the original."""
        if isinstance(rows, slice):
            coarse, fine = self.coarse[rows].astype(np.float32), self.fine[rows].astype(np.float32)
        else:
            coarse, fine = self.gather("coarse", rows).astype(np.float32), self.gather("fine", rows).astype(np.float32)
        coarse *= self.scale[rows, None]
        fine *= self.fine_scale[rows, None]
        coarse += fine
        return coarse

    def cosines(
        self, rows: npt.NDArray[np.int64], q: npt.NDArray[np.float32]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """``q . x`` of the rebuilt ``rows`` and a bound on each one's error. The sums run in float64 (no
        float32 accumulation error to bound), the few float32 roundings of the codes are in the margin."""
        q64 = q.astype(np.float64)
        products = np.einsum("ij,j->i", self.gather("coarse", rows), q64) * self.scale[rows]  # no BLAS threads
        products += np.einsum("ij,j->i", self.gather("fine", rows), q64) * self.fine_scale[rows]
        q_norm = float(np.sqrt(q64 @ q64))
        error = q_norm * (self.slack[rows] + ROUNDING * self.norm[rows].astype(np.float64)) + 1e-30
        return products.astype(np.float32), error.astype(np.float32)


def int8_dots(q8: npt.NDArray[np.int8], rows: npt.NDArray[np.int8]) -> npt.NDArray[np.float32]:
    """``rows @ q8`` with SimSIMD's integer kernels: exact integer sums, rounded once to float32 (beyond 2**24,
    at 1536-d say: the bounds' relative margin covers it), releasing the GIL.

    ``dot`` on the query broadcast to every row, never ``cdist``: cdist sets the calling thread's OpenMP
    thread count (to 1), which reaches torch's when torch shares its OpenMP runtime, and the caller's thread
    scans too. Never ``out=``: SimSIMD 6.5 then returns None without a reference of its own, and every call
    takes one from None until the interpreter aborts ("deallocating None"), a few thousand searches on."""
    import simsimd

    if len(rows) == 0:
        return np.zeros(0, dtype=np.float32)
    return np.asarray(simsimd.dot(np.broadcast_to(q8, rows.shape), rows, out_dtype="float32"), dtype=np.float32)


def levels(vectors: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Each row scaled so that its largest component is 127 and rounded."""
    peak = np.abs(vectors).max(axis=1, initial=0.0)
    scale = np.where(peak >= 127 * np.finfo(np.float32).tiny, peak / 127, 1.0).astype(np.float32)
    return np.clip(np.rint(vectors / scale[:, None]), -127, 127).astype(np.int8), scale


def quantize(vectors: npt.NDArray[np.float32]) -> Codes:
    vectors = np.asarray(vectors, dtype=np.float32)
    coarse, scale = levels(vectors)
    rest = vectors - scale[:, None] * coarse
    fine, fine_scale = levels(rest)
    residual = rest - fine_scale[:, None] * fine
    return Codes(coarse, scale, norms(rest), fine, fine_scale, norms(residual), norms(vectors))


def norms(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Row norms summed in float64: float32 squares of tiny components would underflow to a zero norm."""
    squares: npt.NDArray[np.float64] = np.einsum("ij,ij->i", rows, rows, dtype=np.float64)
    return np.sqrt(squares).astype(np.float32)


ROUNDING = 1e-5  # float32 rounding of an estimate and its bound, relative to |q| |x| (it is ~1e-6);
# an absolute 1e-30 more covers products too small for float32 at all


@dataclass
class Bounds:
    """``q . x`` for every row ``x`` of a part, estimated from the coarse codes: ``|q . x - estimate| <= error``.

    With ``q = sq * q8 + e_q`` and ``x = sx * x8 + e_x``: ``q . x = sq * sx * (q8 . x8) + sq * (q8 . e_x) + e_q . x``,
    so by Cauchy-Schwarz the error is at most ``|sq * q8| * |e_x| + |e_q| * |x|``: a bound, not an estimate
    (~0.015 for MiniLM vectors), so a row chosen on it is never missed.
    """

    estimate: npt.NDArray[np.float32]
    codes: Codes
    reach: float  # |sq * q8|
    spill: float  # |e_q|, plus the rounding margin
    # With a mask and k given to int8_bounds: the k best masked estimates of each block (-inf for masked-out
    # rows), which hold the k best of the part, so that shortlist need not partition every row again
    best: tuple[npt.NDArray[np.bool_], int, npt.NDArray[np.float32]] | None = None

    def error(self, rows: npt.NDArray[np.int64] | slice = slice(None)) -> npt.NDArray[np.float32]:
        error = self.reach * self.codes.coarse_slack[rows] + self.spill * self.codes.norm[rows]
        return np.asarray(error + np.float32(1e-30), dtype=np.float32)

    def max_error(self) -> float:
        if len(self.estimate) == 0:
            return 0.0
        return float(self.reach * self.codes.coarse_slack.max() + self.spill * self.codes.norm.max()) + 1e-30


def int8_bounds(
    parts: Sequence[Codes],
    q: npt.NDArray[np.float32],
    masks: Sequence[npt.NDArray[np.bool_]] | None = None,
    k: int = 0,
) -> list[Bounds]:
    """Bounded estimates of ``q . x`` for every row of each part (with ``masks`` and ``k``: also the ``k``
    best masked estimates of each block, for :func:`shortlist`).

    The products run on the coarse int8 codes of both sides with SimSIMD's integer dot-product kernels (100k
    facts: ~1.3 ms on one core, a third of a float16 scan, for a quarter of the bytes), in blocks spread
    evenly over every core whichever part they come from; the caller's thread scans too, and each block is
    scaled and partitioned where it was scanned (serial work a search would otherwise wait for).
    """
    from .engine import side_by_side

    qc = quantize(q.reshape(1, -1))
    q8, q_scale = qc.coarse, qc.scale[0]
    reach = float(np.linalg.norm(float(q_scale) * q8.astype(np.float64)))
    spill = float(qc.coarse_slack[0]) + ROUNDING * float(qc.norm[0])
    dots = [np.empty((1, len(p)), dtype=np.float32) for p in parts]
    best: list[list[npt.NDArray[np.float32]]] = [[] for _ in parts]

    def block(j: int, lo: int, hi: int) -> None:
        codes, out = parts[j], dots[j]
        out[0, lo:hi] = int8_dots(q8[0], codes.coarse[lo:hi])
        estimate = out[0, lo:hi]
        estimate *= codes.scale[lo:hi]
        estimate *= q_scale
        if masks is not None and k > 0:
            live = estimate if whole[j] else np.where(masks[j][lo:hi], estimate, np.float32(-np.inf))
            best[j].append(largest(live, k))

    whole = [masks is not None and bool(m.all()) for m in masks or ()]
    total, workers = sum(len(p) for p in parts), os.cpu_count() or 1
    blocks = []
    for j, part in enumerate(parts):
        n = len(part)
        pieces = max(1, -(-2 * workers * n // total)) if total >= SCAN_BLOCK else 1  # ~2 per core overall
        bounds = [n * i // pieces for i in range(pieces + 1)]
        blocks += [functools.partial(block, j, lo, hi) for lo, hi in itertools.pairwise(bounds) if hi > lo]
    side_by_side(blocks, workers, scan_pool() if len(blocks) > 1 else None)
    for part in parts:
        if part.file is not None:
            part.file.scanned = True
    return [
        Bounds(
            dot[0],
            part,
            reach,
            spill,
            None if masks is None or k <= 0 else (masks[j], k, np.concatenate(best[j] or [np.zeros(0, np.float32)])),
        )
        for j, (part, dot) in enumerate(zip(parts, dots, strict=True))
    ]


def largest(values: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.float32]:
    """The ``k`` largest of ``values``, in no order (all of them if fewer). A subset's k-th largest is at most
    the whole's, so a strided sample's gives a floor that only a few hundred values reach, and only those
    are partitioned (25k rows: ~30 us instead of ~70 us)."""
    n = len(values)
    if n <= k:
        return values
    sample = values[::SAMPLE_STRIDE]
    if len(sample) > k:
        floor = np.partition(sample, len(sample) - k)[len(sample) - k]
        values = values[values >= floor]  # the sample's k values >= floor are among them
    return np.partition(values, len(values) - k)[len(values) - k :]


SAMPLE_STRIDE = 8


def shortlist(
    bounds: Bounds, q: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_], k: int, floor: float = -np.inf
) -> npt.NDArray[np.int64]:
    """The masked rows that may be among the ``k`` nearest to ``q`` and reach ``floor`` (a few hundred rows
    of 100k): the ``k`` rows with the best estimates all have ``q . x >= kth estimate - max error``, so the
    k-th best product is at least that, and a row whose upper bound stays below it cannot make it."""
    estimate = bounds.estimate
    all_live = bool(mask.all())
    k = min(k, len(mask) if all_live else int(mask.sum()))
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    if bounds.best is not None and bounds.best[0] is mask and bounds.best[1] >= k:
        top = bounds.best[2]  # each block's best: they hold the k best rows of the part
    else:
        top = estimate if all_live else np.where(mask, estimate, -np.inf)
    worst = bounds.max_error()
    cut = max(float(np.partition(top, len(top) - k)[len(top) - k]) - worst, floor)
    rows = np.flatnonzero(estimate >= cut - worst)
    if not all_live:
        rows = rows[mask[rows]]
    return rows[estimate[rows] + bounds.error(rows) >= cut].astype(np.int64)


def coarse_bounds(
    codes: Codes, rows: npt.NDArray[np.int64], q: Codes, j: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Estimates of ``q_j . x`` for ``rows`` from both sides' coarse codes and a bound on each one's error
    (:class:`Bounds`' terms), for a few hundred gathered rows: one SimSIMD int8 call."""
    q8, q_scale = q.coarse[j : j + 1], float(q.scale[j])
    reach = q_scale * float(np.sqrt(np.einsum("ij,ij->", q8, q8, dtype=np.float64)))
    spill = float(q.coarse_slack[j]) + ROUNDING * float(q.norm[j])
    estimate = int8_dots(q8[0], codes.gather("coarse", rows)) * (codes.scale[rows] * np.float32(q_scale))
    error = reach * codes.coarse_slack[rows] + spill * codes.norm[rows] + np.float32(1e-30)
    return estimate, error.astype(np.float32)


def pairs(mask: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``np.nonzero`` of a 2-d mask (row-major order), ten times faster: numpy 2.4's 2-d ``nonzero`` takes
    ~2 ms for a 64 x 8192 mask, the flat one and a division ~0.2 ms."""
    rows, cols = np.divmod(np.flatnonzero(mask), mask.shape[1])
    return rows.astype(np.int64, copy=False), cols.astype(np.int64, copy=False)


def contenders(approx: npt.NDArray[np.float32], error: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.int64]:
    """Indices of the intervals ``approx +- error`` that may hold one of the ``k`` largest values."""
    k = min(k, len(approx))
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    lower = approx - error
    kth = np.partition(lower, len(lower) - k)[len(lower) - k]
    return np.flatnonzero(approx + error >= kth)


def overlapping(approx: npt.NDArray[np.float32], error: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
    """Which intervals ``approx +- error`` overlap another one: only their order is in doubt."""
    lower, upper = approx - error, approx + error
    overlap = (lower[:, None] <= upper[None, :]) & (lower[None, :] <= upper[:, None])
    np.fill_diagonal(overlap, False)
    return np.asarray(overlap.any(axis=1))


def scan_many(codes: Codes, vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Products of a batch of vectors with every rebuilt row, ``(n, b)``, over blocks of rows (a float32
    copy of the whole scope would quadruple the index's memory for the duration)."""
    out = np.empty((len(codes), vectors.shape[0]), dtype=np.float32)
    with one_blas_thread():
        for lo in range(0, len(codes), 16384):
            out[lo : lo + 16384] = codes.rebuild(slice(lo, lo + 16384)) @ vectors.T
    return out


_BLAS_LOCK = threading.Lock()
_BLAS_USERS = 0
_BLAS_LIMIT: Any = None


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Keep numpy's BLAS on one thread while inside (a write batch's near-duplicate products): its spinning
    OpenBLAS threads otherwise fight the embedding model's torch threads for the same cores (measured: query
    embedding 3x slower). Reference counted, so overlapping writes in several threads restore the user's
    setting only when the last one leaves."""
    global _BLAS, _BLAS_USERS, _BLAS_LIMIT
    with _BLAS_LOCK:
        if _BLAS is None:
            from threadpoolctl import ThreadpoolController

            _BLAS = ThreadpoolController()
        if _BLAS_USERS == 0:
            _BLAS_LIMIT = _BLAS.limit(limits=1, user_api="blas")
        _BLAS_USERS += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _BLAS_USERS -= 1
            if _BLAS_USERS == 0:
                _BLAS_LIMIT.restore_original_limits()
                _BLAS_LIMIT = None
