"""Records written on a background thread, so a framework's event loop never waits on a database.

A message or tool call is observed on the loop (AutoGen's runtime hooks, AG2's message hooks) and only
queued there; one thread writes the queue in batches (a busy scope file can hold a write for seconds). Reads
of the records ask the store's recorders to :meth:`RecordWriter.flush` first, so they see every record made
before them.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import queue
import threading
import time
import weakref
from typing import TYPE_CHECKING

from ..core.records import Record
from ..facts import as_engine
from ..views.agents import upsert_agent

if TYPE_CHECKING:
    from ..facts import FactStore

logger = logging.getLogger("autogen_shared_memory")


class RecordWriter:
    """A queue of records and the thread that writes it (each batch in one transaction per agent file), and
    marks the agents whose records it wrote active in the directory."""

    def __init__(self, store: FactStore, max_pending: int = 100_000) -> None:
        self.store = as_engine(store)
        self.errors = 0  # batches that could not be written (logged)
        self.recorded = 0
        self._max_pending = max_pending
        self._closed = False
        self._lock = threading.Lock()  # put, close and a restart in a forked child: one at a time
        self._start()
        store._recorders.add(self)
        _WRITERS.add(self)

    def _start(self) -> None:
        """A new queue and thread (at creation, and in a forked child: the parent's thread is not there, and
        the records it had queued are the parent's to write). Caller holds ``_lock`` (or owns the writer)."""
        restart = hasattr(self, "_pid")
        self._queue: queue.Queue[Record | None] = queue.Queue(maxsize=self._max_pending)
        self._thread = threading.Thread(target=self._drain, name="shared-memory-recorder", daemon=True)
        self._thread.start()
        self._pid = os.getpid()
        if restart:  # a multiprocessing child ends with os._exit (no atexit): its finalizers still run
            from multiprocessing.util import Finalize

            Finalize(self, self.close, exitpriority=10)

    def put(self, record: Record) -> None:
        """Queue ``record`` (``queue.Full`` when ``max_pending`` records wait, RuntimeError once closed: the
        caller drops it and logs why)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the recorder is closed (its store was closed)")
            if self._pid != os.getpid():
                self._start()
            self._queue.put_nowait(record)

    def _drain(self) -> None:
        while True:
            first = self._queue.get()
            batch = [first]
            while len(batch) < 500:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            records = [r for r in batch if r is not None]
            try:
                if records:
                    self.store.log_records(records)
                    self.recorded += len(records)
                    last_seen: dict[str, float] = {}
                    for record in records:
                        last_seen[record.agent_id] = max(last_seen.get(record.agent_id, 0.0), record.created_at)
                    for agent, at in last_seen.items():
                        upsert_agent(self.store, agent, status="active", last_active_at=at)
            except Exception:
                self.errors += 1
                logger.warning("shared memory recorder failed to write %d records", len(records), exc_info=True)
            finally:
                for _ in batch:
                    self._queue.task_done()
            if any(r is None for r in batch):
                return

    def flush(self, timeout: float = 30.0) -> bool:
        """Block until every record queued so far is written (for reads, tests and shutdown); False if some
        were still pending when ``timeout`` ran out."""
        deadline = time.monotonic() + timeout
        if self._pid != os.getpid():  # a forked child: nothing of its own queued yet
            return True
        if threading.get_ident() == self._thread.ident:  # the writer itself: waiting would never end
            return not self._queue.unfinished_tasks
        while self._queue.unfinished_tasks and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        return not self._queue.unfinished_tasks

    async def aflush(self, timeout: float = 30.0) -> bool:
        return await asyncio.to_thread(self.flush, timeout)

    def close(self) -> None:
        """Write what is pending and stop the thread (the store's ``close`` does this, and so does the
        interpreter's exit: the thread is a daemon, and what it had not written would be lost)."""
        with self._lock:
            running = not self._closed and self._pid == os.getpid() and self._thread.is_alive()
            self._closed = True
            if running:
                self._queue.put(None)  # after every record put before it (the thread drains without the lock)
        if running and threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)

    def _after_fork(self) -> None:
        """In a forked child: a lock another thread of the parent held would stay held here."""
        self._lock = threading.Lock()


_WRITERS: weakref.WeakSet[RecordWriter] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for writer in list(_WRITERS):
        writer._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_all() -> None:
    for writer in list(_WRITERS):
        writer.close()
