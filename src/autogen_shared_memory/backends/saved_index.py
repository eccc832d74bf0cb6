"""Saving scope indexes to files and mapping them back, for the backends that search in the process
(:mod:`~autogen_shared_memory.search.saved` holds the file format; this module the files and threads).

A backend gives each scope index a ``home`` (SQLite: beside the scope's file; PostgreSQL: in the
``index_dir`` it was given), asks :meth:`SavedIndexes.map` on an index's first refresh, and
:meth:`SavedIndexes.save_later` after a search or write. It checks that a file belongs to the scope as it is
now through ``last_id(seq)``: the id of the fact at a seq in storage, which must be the file's (ids are
random, so a file of another store, database or earlier scope file of the same name fails it).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..search import saved
from ..search.index import Ids, VectorIndex
from ..tempfiles import building, remove_stale_builds

logger = logging.getLogger("autogen_shared_memory")

SAVE_DELAY = 0.5  # seconds between the search or write that makes a save worth it and the capture
DEFAULT_SAVE_FROM = 20_000  # facts


class SavedIndexes:
    """One backend's saved scope indexes: mapping them into fresh indexes, and saving them on background
    threads (one at a time per index), which :meth:`close` waits for.

    Args:
        start: the facts from which a scope's index is saved (and saved again after a quarter more); None:
            never saved (files already there are still mapped).
        writable: False for a read-only store (it maps, never writes).
        mode: the permission bits of the files it writes, or a function of the file's path that gives them
            (SQLite: those of the scope file it is beside).
    """

    def __init__(self, start: int | None, writable: bool = True, mode: int | Callable[[Path], int] = 0o600) -> None:
        self.start = start
        self.writable = writable
        self.mode = mode
        self._threads: dict[threading.Thread, None] = {}
        self._lock = threading.Lock()

    def map(self, index: VectorIndex, epoch: int, rev: int, last_id: Callable[[int], str | None]) -> bool:
        """Install the saved index at ``index.home`` into the fresh ``index`` when it belongs to the scope as
        it is now: the same ``epoch``, a revision not ahead of ``rev``, and the fact at its last seq is
        ``last_id(seq)``'s. Caller holds ``index.lock``.

        Args:
            index: a fresh index (no row, never refreshed) with its ``home`` set.
            epoch: the scope's epoch in storage.
            rev: the scope's revision in storage.
            last_id: the id of the fact at a seq in storage (None: no such fact).

        Returns:
            Whether it was installed (``index.saved`` then says what it holds).
        """
        if index.home is None:
            return False
        mapped = saved.read(index.home)
        if mapped is None:
            return False
        head, arrays = mapped.header, mapped.arrays
        rows = int(head.get("rows", 0))
        if head.get("epoch") != epoch or not 0 <= int(head.get("rev", -1)) <= rev or rows < 1:
            return False
        if last_id(int(arrays["seq"][rows - 1])) != Ids(arrays["ids.blob"], arrays["ids.ends"])[rows - 1]:
            return False
        try:
            index.saved = saved.install(mapped, index)
        except (KeyError, ValueError, TypeError, IndexError):  # a file without what its format holds
            epoch_kept = index.epoch
            index.reset()
            index.epoch = epoch_kept
            return False
        return True

    def save_later(self, index: VectorIndex) -> None:
        """Save ``index`` at its ``home`` on a background thread when it has outgrown its saved form
        (:meth:`~autogen_shared_memory.search.saved.Coverage.behind`); searches and writes go on meanwhile.

        Args:
            index: a scope index of this backend.
        """
        if self.start is None or not self.writable or index.saving or index.home is None:
            return
        if not index.saved.behind(saved.coverage(index), self.start):
            return
        index.saving = True
        # Not a daemon: a process that ends right after a search still finishes the save (a few seconds at 1M
        # facts) instead of leaving the next process to read every row again.
        thread = threading.Thread(target=self._save, args=(index,), name="asm-index-save")
        with self._lock:
            self._threads[thread] = None
        thread.start()

    def _save(self, index: VectorIndex) -> None:
        try:
            time.sleep(SAVE_DELAY)  # the other leg of the search that asked may still be indexing
            with index.lock:  # no write transaction of this process is under way (it holds the lock)
                generation, captured = index.generation, saved.capture(index, index.epoch)
            path: Path | None = index.home
            if captured is None or path is None:
                return
            remove_stale_builds(path)  # what a process killed while saving left
            mode = self.mode(path) if callable(self.mode) else self.mode
            with building(path) as tmp:
                with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as out:
                    saved.write(captured, out)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, path)
            with index.lock:
                if index.generation == generation:
                    index.saved = captured.coverage
        except Exception:  # a cache: after a failed save the next process reads storage as without one
            logger.debug("saving the search index at %s failed", index.home, exc_info=True)
        finally:
            index.saving = False
            with self._lock:
                self._threads.pop(threading.current_thread(), None)

    def close(self) -> None:
        """Wait for the saves under way (each file is whole, or never renamed into place)."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join()
