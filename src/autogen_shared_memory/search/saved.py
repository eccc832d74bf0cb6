"""A scope's search index saved to a file and mapped back: a new process's first search (or first write) maps
what another process built instead of reading every vector and indexing every text again.

The file holds one :class:`~.index.VectorIndex` as it was at one revision of its scope: the int8 codes, seqs,
ids, status and expiry of its rows, the postings of the facts indexed for the lexical leg, and the cells of
the near-duplicate check. Storage-neutral: the backend decides where the file lives, checks that it belongs
to the scope as it is now (same epoch, a revision not ahead of the scope's, the same fact at its last seq),
and then reads what changed since its revision as it would for any index refreshed earlier.

Invariants:

* A saved index is only ever what an index of this process held at a committed revision: it is captured
  under the index's lock, which a write transaction holds from its start to its commit or roll-back.
* The file is written under a temporary name and renamed into place (:mod:`~..backends.saved_index`): a
  reader maps a whole file or none, and a process that maps it keeps its pages however often it is replaced.
* Loading never trusts more than it checks: a file of another format, epoch or scope, or one that is cut
  short, is ignored (the scope is read from storage, as without a file).
* Arrays are mapped copy-on-write (``mmap.ACCESS_COPY``): rows appended or changed later are this process's
  own pages; the file is never written through a mapping. The arrays that grow with the scope have room for a
  quarter more rows in the file (a sparse hole, no disk), so appending does not copy the mapped rows.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from .cells import Cells
from .index import Coverage, Ids, VectorIndex
from .int8 import CODE_ARRAYS, Codes, RowFile
from .postings import Vocab

MAGIC = b"ASMINDEX"
FORMAT = 4
_ALIGN = 64
_HEAD = struct.Struct("<8sQI")  # magic, length and CRC-32 of the JSON header that follows


def coverage(index: VectorIndex) -> Coverage:
    """What ``index`` holds now (read without its lock: a hint for :meth:`Coverage.behind`)."""
    cells = index.cells
    placed = cells.n if cells is not None and cells.generation == index.generation else 0
    return Coverage(index.n, index.postings.n, placed, index.rev)


@dataclass
class Capture:
    """An index as it was at one revision, detached from the live one (taken under its lock, written
    without it)."""

    header: dict[str, Any]
    arrays: dict[str, npt.NDArray[Any]]
    room: dict[str, int]  # rows of room per array in the file (the arrays that grow with the scope)
    ids: Ids
    vocab: Vocab
    coverage: Coverage


def capture(index: VectorIndex, epoch: int) -> Capture | None:
    """What :func:`write` saves of ``index``, or None when it holds no row. Caller holds ``index.lock``
    (outside any write transaction). Costs a copy of the status and expiry columns, of the cells' centres and
    of the stems added since a load; the codes, seqs and postings are referenced (rows below ``n`` never change in
    one index generation; a merge or growth replaces arrays instead of changing them)."""
    n = index.n
    if n == 0 or index.rev < 0:
        return None
    room = max(1024, n // 4)
    arrays: dict[str, npt.NDArray[Any]] = {
        "seq": index.seq[:n],
        "active": index.active[:n].copy(),
        "expires": index.expires[:n].copy(),
    }
    for name in CODE_ARRAYS:
        arrays[f"codes.{name}"] = getattr(index.codes, name)[:n]
    grows = dict.fromkeys(arrays, room)
    postings = index.postings
    if postings.n and postings._tail:
        postings._merge()
    vocab = postings.vocab.snapshot()
    if postings.n:
        arrays |= {
            "postings.starts": postings.starts,
            "postings.docs": postings.docs,
            "postings.tfs": postings.tfs,
            "postings.lengths": postings.lengths[: postings.n],
        }
    cells = index.cells
    placed = 0
    if cells is not None and cells.generation == index.generation and cells.n:
        with cells.lock:
            placed = cells.n
            sizes = np.fromiter((len(m) for m in cells.members), dtype=np.int64, count=len(cells.members))
            arrays |= {
                "cells.centres": cells.centres.copy(),
                "cells.sums": cells.sums.copy(),
                "cells.ends": np.concatenate([[0], np.cumsum(sizes)]),
                "cells.members": np.concatenate(cells.members) if cells.members else np.zeros(0, np.int64),
                "cells.signs": np.concatenate(cells.signs, axis=1) if cells.signs else np.zeros((0, 0), np.uint64),
            }
    arrays |= {f"extra.{name}": array for name, array in index.saved_extras().items()}
    header = {
        "format": FORMAT,
        "epoch": int(epoch),
        "rev": int(index.rev),
        "rows": n,
        "dim": int(index.dim),
        "postings": {"n": postings.n, "tokens": postings.tokens},
        "cells": placed,
    }
    cover = Coverage(n, postings.n, placed, int(index.rev))
    return Capture(header, arrays, grows, index.ids.snapshot(n), vocab, cover)


def write(saved: Capture, out: BinaryIO) -> None:
    """Write a captured index to ``out``, a new file open for binary writing (the backend builds it under a
    temporary name, syncs it and renames it into place).

    Args:
        saved: from :func:`capture`.
        out: the file; it must support ``seek`` and ``truncate``.

    Raises:
        OSError: the file could not be written (a full disk).
    """
    blob, ends = saved.ids.packed(saved.header["rows"])
    stems, stem_ends, stem_order = saved.vocab.packed()
    arrays = dict(saved.arrays) | {
        "ids.blob": blob,
        "ids.ends": ends,
        "vocab.blob": stems,
        "vocab.ends": stem_ends,
        "vocab.order": stem_order,
    }
    layout: dict[str, Any] = {}
    offset = 0
    for name, array in arrays.items():
        shape = [len(array) + saved.room[name], *array.shape[1:]] if name in saved.room else list(array.shape)
        size = int(np.prod(shape, dtype=np.int64)) * array.dtype.itemsize
        layout[name] = {"offset": offset, "dtype": array.dtype.str, "shape": shape, "filled": len(array)}
        offset += -(-size // _ALIGN) * _ALIGN
    header = json.dumps({**saved.header, "arrays": layout, "data_bytes": offset}).encode()
    start = -(-(_HEAD.size + len(header)) // _ALIGN) * _ALIGN
    out.write(_HEAD.pack(MAGIC, len(header), zlib.crc32(header)) + header)
    for name, array in arrays.items():
        out.seek(start + layout[name]["offset"])
        out.write(np.ascontiguousarray(array).tobytes())
    out.truncate(start + offset)  # the room after the last array: a hole, no disk


@dataclass
class Mapped:
    """A saved index mapped into memory: its header and arrays (copy-on-write views of the file), and the
    file's code rows for gathers (:class:`~.int8.RowFile`, which owns a descriptor of the file)."""

    header: dict[str, Any]
    arrays: dict[str, npt.NDArray[Any]]
    filled: dict[str, int]
    file: RowFile


def read(path: Path) -> Mapped | None:
    """Map a saved index, or None when there is none or it is not a whole file of this format.

    Args:
        path: the file.

    Returns:
        The mapped index, its arrays at their full room (``filled`` rows of each hold data).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except (OSError, ValueError):
        return None
    try:
        size = os.fstat(fd).st_size
        if size < _HEAD.size:
            os.close(fd)
            return None
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError):
        os.close(fd)
        return None
    file = RowFile(fd, {}, 0, 0, mm)  # closes the descriptor when nothing holds it any more
    try:
        magic, length, crc = _HEAD.unpack_from(mm, 0)
        if magic != MAGIC or _HEAD.size + length > size:
            return None
        if zlib.crc32(mm[_HEAD.size : _HEAD.size + length]) != crc:  # a damaged header (its counts, offsets)
            return None
        header = json.loads(bytes(mm[_HEAD.size : _HEAD.size + length]))
        if header.get("format") != FORMAT:
            return None
        start = -(-(_HEAD.size + length) // _ALIGN) * _ALIGN
        if size != start + int(header["data_bytes"]):  # cut short (or grown): not the file that was written
            return None
        arrays, filled = {}, {}
        for name, spec in header["arrays"].items():
            dtype = np.dtype(spec["dtype"])
            count = int(np.prod(spec["shape"], dtype=np.int64))
            if start + spec["offset"] + count * dtype.itemsize > size:
                return None
            arrays[name] = np.frombuffer(mm, dtype=dtype, count=count, offset=start + spec["offset"]).reshape(
                spec["shape"]
            )
            filled[name] = int(spec["filled"])
            file.offsets[name] = start + int(spec["offset"])
        file.rows, file.width = int(header["rows"]), int(header["dim"])
    except (ValueError, KeyError, TypeError, struct.error):
        return None
    return Mapped(header, arrays, filled, file)


def install(mapped: Mapped, index: VectorIndex) -> Coverage:
    """Make a fresh ``index`` (no row) the mapped one: rows, postings and cells. Caller holds its lock and has
    checked that the file belongs to the scope as it is now (:func:`read` checked only its shape)."""
    a, h = mapped.arrays, mapped.header
    n = int(h["rows"])
    index.dim = int(h["dim"])
    file = mapped.file
    file.offsets = {name: file.offsets[f"codes.{name}"] for name in ("coarse", "fine")}
    index.codes = Codes.of((a[f"codes.{name}"] for name in CODE_ARRAYS), file)
    index.seq, index.active, index.expires = a["seq"], a["active"], a["expires"]
    index.ids = Ids(a["ids.blob"], a["ids.ends"])
    index.n = n
    index.rev = int(h["rev"])
    postings = index.postings
    if h["postings"]["n"]:
        postings.vocab = Vocab(a["vocab.blob"], a["vocab.ends"], a["vocab.order"])
        postings.starts, postings.docs, postings.tfs = a["postings.starts"], a["postings.docs"], a["postings.tfs"]
        postings.lengths = a["postings.lengths"]
        postings.n, postings.tokens = int(h["postings"]["n"]), int(h["postings"]["tokens"])
    placed = int(h["cells"])
    if placed:
        cells = Cells(index.generation)
        ends = a["cells.ends"]
        cells.centres, cells.sums = a["cells.centres"], a["cells.sums"]
        cells.members = [a["cells.members"][ends[c] : ends[c + 1]] for c in range(len(ends) - 1)]
        cells.signs = [a["cells.signs"][:, ends[c] : ends[c + 1]] for c in range(len(ends) - 1)]
        cells.n = placed
        index.cells = cells
    index.install_extras({name[6:]: array for name, array in a.items() if name.startswith("extra.")})
    return Coverage(n, postings.n, placed, index.rev)
