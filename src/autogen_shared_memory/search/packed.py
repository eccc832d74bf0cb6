"""A big scope's first pass: its vectors as 4-bit codes, scanned by ONNX Runtime's ``MatMulNBits`` kernel.

The exact scan reads every row's 384 int8 coarse codes (1M facts: 384 MB a query, 37 ms on 2 cores here).
This pass reads half of that, 4 bits a coordinate with a scale per row and block of 64 coordinates, in a
kernel built for quantized language-model weights (1M facts: about 15 ms on the same cores). Its estimates
carry an error of about 0.005 in cosine, with no useful bound, so they only choose the candidates: every
row within a wide margin of the ``k``-th best estimate (:meth:`Packed.candidates`), and those are ranked as
the exact scan's shortlist is, by their rebuilt int8 codes and, where the order is in doubt, the stored
float32 vectors. A row the pass misses is one whose cosine was ranked below that margin by its 4-bit codes:
a result can be missing from the top, never wrong in its cosine.

The codes are made from the int8 coarse codes on a background thread (rows below ``n`` never change within
an index generation; one that does drops the pass), written to an unlinked temporary file and handed to
ONNX Runtime as an external initializer, which packs them into its own layout once. The file's storage is
then given back (a hole punched through the mapping), so a temporary folder in memory (tmpfs) holds it only
while the pass is built: the packed copy (about 240 bytes a row) is what stays. That relies on the session
never reading its initializers again, which a small session checks once per process (:func:`_keeps_copies`);
where it would, only the file's pages leave this process and the file keeps its storage.
"""

from __future__ import annotations

import logging
import mmap
import os
import tempfile
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from .int8 import Codes, quantize

_log = logging.getLogger(__name__)

BLOCK = 64  # coordinates per scale (MatMulNBits' block_size: 32 was 15% slower at 1M rows, 128 12% slower)
LEVELS = 7  # codes -7 .. 7 around the zero point 8: a zero coordinate stays exactly zero
MIN_FACTS = 1 << 18  # below this, the exact scan takes a few milliseconds: no approximation is worth it
MARGIN = 4.0  # candidates: estimates within this many error deviations of the k-th best
MAX_CANDIDATES = 4096  # at most this many rows re-scored (the best estimates), whatever the margin holds
CHUNK = 16384  # rows quantized at a time: ~25 MB of temporaries at 384-d (65,536 was no faster at 1M rows)


class _Abandoned(RuntimeError):
    """A build given up because the interpreter is shutting down (ONNX Runtime must not be inside a session's
    creation when its process-wide state is torn down: the process would abort)."""


def _reserve(fd: int, size: int) -> None:
    """Give the file ``size`` bytes of storage now: a page written through a mapping of a sparse file on a full
    file system (a small tmpfs ``/tmp``) kills the process with SIGBUS, where this raises OSError (the build
    fails and searches stay exact)."""
    if hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, 0, size)
    else:  # no posix_fallocate (macOS): a sparse file
        os.ftruncate(fd, size)


def _shutting_down() -> bool:
    return not threading.main_thread().is_alive()


def _release(area: mmap.mmap, *, punch: bool) -> None:
    """Give back the pages of a file the session no longer needs: with ``punch``, their storage too (reads of a
    punched hole give zeros, so nothing that still maps it can fault); without it, or where the file system
    cannot punch holes, only this process's pages (the file keeps its storage)."""
    if punch and hasattr(mmap, "MADV_REMOVE"):
        try:
            area.madvise(mmap.MADV_REMOVE)
            return
        except OSError:  # no hole punching on this file system
            pass
    if hasattr(mmap, "MADV_DONTNEED"):
        area.madvise(mmap.MADV_DONTNEED)


_copies: list[bool] = []  # the answer of _keeps_copies, once known


def _keeps_copies() -> bool:
    """Whether this process's ONNX Runtime scans a pass from its own packed copy of the codes, never from the
    file they were supplied in: a pass of 64 random rows answers a query, has its file zeroed, and must answer
    the same. Only then may a pass's file lose its storage (its hole would read as zeros). A probe that fails
    (no room for its file) answers no, and is asked again by the next build."""
    if not _copies:
        rng = np.random.default_rng(0)
        rows = rng.standard_normal((64, BLOCK)).astype(np.float32)
        try:
            probe = Packed(quantize(rows), 64, release=False)
            before = probe.products(rows[0]).copy()
            np.frombuffer(probe._map, dtype=np.uint8)[:] = 0
            same = bool(np.array_equal(before, probe.products(rows[0])))
        except _Abandoned:
            raise
        except Exception:  # the pass itself may still be built: its file just keeps its storage
            _log.debug("the first pass's storage check failed", exc_info=True)
            return False
        _copies.append(same)
    return _copies[0]


class Packed:
    """4-bit codes of rows ``0 .. n-1`` of a scope's :class:`~.int8.Codes` and the ONNX Runtime session that
    scans them. Thread-safe: ``candidates`` may run in several threads at once.

    Args:
        codes: the scope's codes (only their coarse codes and row scales are read).
        n: how many rows to pack.
        release: give the file's pages and, where the session keeps its own copy, its storage back once the
            session is made (:func:`_keeps_copies` makes one with False).

    Raises:
        ImportError: onnxruntime or onnx is not installed.
        OSError: the temporary file could not be made or given its storage (a full temporary folder).
        _Abandoned: the interpreter began shutting down during the build (checked between chunks of rows
            and before the session is made; a build thread is not a daemon, so the exit waits for the
            session under way).
    """

    def __init__(self, codes: Codes, n: int, *, release: bool = True) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped]
        from onnx import TensorProto, helper

        punch = release and _keeps_copies()  # asked first: a full temporary folder fails the small probe alone
        dim = int(codes.coarse.shape[1])
        self.n, self.dim = n, dim
        self.width = -(-dim // BLOCK) * BLOCK  # padded with zero coordinates to whole blocks
        blocks = self.width // BLOCK
        size_b, size_s = n * blocks * (BLOCK // 2), n * blocks * 4
        self._file = tempfile.TemporaryFile(prefix="asm-packed-")  # noqa: SIM115 - lives with the session
        _reserve(self._file.fileno(), size_b + size_s)
        self._map = mmap.mmap(self._file.fileno(), size_b + size_s)
        packed = np.frombuffer(self._map, dtype=np.uint8, count=size_b).reshape(n, blocks, BLOCK // 2)
        scales = np.frombuffer(self._map, dtype=np.float32, count=n * blocks, offset=size_b)
        spread = np.zeros(blocks, dtype=np.float64)  # per block: the sum of its steps' squares
        holding = np.zeros(blocks, dtype=np.int64)  # per block: how many rows have a coordinate there
        for lo in range(0, n, CHUNK):
            if _shutting_down():
                raise _Abandoned("the interpreter is shutting down")
            hi = min(n, lo + CHUNK)
            if self.width == dim:
                coarse = np.asarray(codes.coarse[lo:hi]).reshape(hi - lo, blocks, BLOCK)
            else:
                coarse = np.zeros((hi - lo, self.width), dtype=np.int8)
                coarse[:, :dim] = codes.coarse[lo:hi]
                coarse = coarse.reshape(hi - lo, blocks, BLOCK)
            step_peaks = _peaks(coarse)
            step = step_peaks.astype(np.float32) / LEVELS  # in coarse units, per row and block
            step[step == 0] = 1.0  # an all-zero block: its codes are all exact zeros whatever the step
            four = np.multiply(coarse, 1 / step[..., None], dtype=np.float32)
            np.rint(four, out=four)
            four += 8
            nibbles = four.astype(np.uint8).view(np.uint16)  # two codes a word, the first in the low byte
            packed[lo:hi] = ((nibbles & 0xFF) | ((nibbles >> 4) & 0xF0)).astype(np.uint8)
            steps = step * np.asarray(codes.scale[lo:hi], dtype=np.float32)[:, None]  # in vector units
            scales[lo * blocks : hi * blocks] = steps.reshape(-1)
            held = step_peaks > 0
            spread += np.where(held, steps * steps, 0.0).sum(axis=0)
            holding += held.sum(axis=0)
        # Rounding to a step leaves each coordinate off by up to half of it, about step^2 / 12 in variance:
        # a query's product with a row's error deviates by about sqrt(sum over blocks of |q_b|^2 * step_b^2
        # / 12), with step_b the mean step of the rows that hold something in block b (a row's empty
        # blocks are exact). It is the deviation of rows whose coordinates lie where the query's do, so
        # sparse vectors (a few large coordinates) get margins as wide as their errors.
        self.variance = spread / np.maximum(holding, 1) / 12

        def external(name: str, dtype: int, shape: list[int]) -> Any:
            tensor = TensorProto(name=name, data_type=dtype, dims=shape, data_location=TensorProto.EXTERNAL)
            for key, value in (("location", "supplied-by-the-process"), ("offset", "0"), ("length", "0")):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            return tensor

        node = helper.make_node(
            "MatMulNBits",
            ["q", "codes", "scales"],
            ["products"],
            domain="com.microsoft",
            K=self.width,
            N=n,
            bits=4,
            block_size=BLOCK,
            accuracy_level=4,  # int8 products of the query with the codes (VNNI where the CPU has it)
        )
        graph = helper.make_graph(
            [node],
            "packed-scan",
            [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, self.width])],
            [helper.make_tensor_value_info("products", TensorProto.FLOAT, [1, n])],
            initializer=[
                external("codes", TensorProto.UINT8, [n, blocks, BLOCK // 2]),
                external("scales", TensorProto.FLOAT, [n * blocks]),
            ],
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
        )
        model.ir_version = 8
        options = ort.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads leave the cores
        self._values = [ort.OrtValue.ortvalue_from_numpy(packed), ort.OrtValue.ortvalue_from_numpy(scales)]
        options.add_external_initializers(["codes", "scales"], self._values)
        if _shutting_down():
            raise _Abandoned("the interpreter is shutting down")
        self._session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        if release:
            _release(self._map, punch=punch)

    def products(self, q: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Estimates of ``q . x`` for rows ``0 .. n-1`` (each off by about :meth:`deviation`).

        Args:
            q: the query vector, ``(dim,)``.

        Returns:
            A ``(n,)`` float32 array.
        """
        padded = np.zeros((1, self.width), dtype=np.float32)
        padded[0, : self.dim] = q
        return np.asarray(self._session.run(None, {"q": padded})[0][0])

    def deviation(self, q: npt.NDArray[np.float32]) -> float:
        """How far an estimate of ``q . x`` typically is from the product of ``x``'s int8 codes.

        Args:
            q: the query vector.

        Returns:
            The deviation (a cosine difference for unit vectors).
        """
        padded = np.zeros(self.width, dtype=np.float64)
        padded[: self.dim] = q
        per_block = np.square(padded).reshape(-1, BLOCK).sum(axis=1)
        return float(np.sqrt(per_block @ self.variance))

    def candidates(self, q: npt.NDArray[np.float32], live: npt.NDArray[np.bool_], k: int) -> npt.NDArray[np.int64]:
        """The live rows (``live``: one flag per row ``0 .. n-1``) whose estimate is within ``MARGIN`` error
        deviations of the ``k``-th best live estimate, at most ``MAX_CANDIDATES`` of them (the best), ascending.

        Args:
            q: the query vector.
            live: which rows may be returned.
            k: how many rows the caller will keep.

        Returns:
            Row positions, an int64 array.
        """
        k = min(k, int(np.count_nonzero(live)))
        if k <= 0:
            return np.zeros(0, dtype=np.int64)
        estimate = self.products(q)
        margin = MARGIN * self.deviation(q) + 1e-6
        # A strided sample's k-th best is at most the whole's: rows at or above it hold the k best rows of all,
        # and usually a few hundred more; only when too many of those are not live does a full pass decide.
        sample = estimate[::32]
        floor = float(np.partition(sample, len(sample) - k)[len(sample) - k]) if len(sample) > k else -np.inf
        floor -= margin
        rows = np.flatnonzero(estimate >= floor)
        rows = rows[live[rows]]
        if len(rows) < k:
            rows = np.flatnonzero(live)
        kth = float(np.partition(estimate[rows], len(rows) - k)[len(rows) - k])
        if kth - margin < floor:
            rows = np.flatnonzero(live & (estimate >= kth - margin))
        else:
            rows = rows[estimate[rows] >= kth - margin]
        if len(rows) > MAX_CANDIDATES:
            best = np.argpartition(estimate[rows], len(rows) - MAX_CANDIDATES)[len(rows) - MAX_CANDIDATES :]
            rows = np.sort(rows[best])
        return rows.astype(np.int64, copy=False)


def _peaks(levels: npt.NDArray[np.int8]) -> npt.NDArray[np.int8]:
    """The largest ``|code|`` of each block (last axis of ``BLOCK`` codes, in -127 .. 127), by halving: a
    numpy reduction along a 64-wide axis runs row by row, several times slower than these element-wise
    maxima."""
    peak = np.abs(levels)
    width = peak.shape[-1]
    while width > 1:
        width //= 2
        peak = np.maximum(peak[..., :width], peak[..., width : 2 * width])
    return peak[..., 0]
