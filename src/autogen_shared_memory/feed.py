"""The change feed: every change to a fact, in every scope, made by any process or host, resumable.

Where positions come from: every backend writes an ``audit`` row for each change to a fact (``created``,
``reinforced``, ``superseded``, ``forgotten``, ``rejected``, ``approved``, ``withdrawn``, ``purged``,
``reembedded``) inside the scope's write transaction, and holds the scope's write lock (SQLite ``BEGIN
IMMEDIATE`` on its file, PostgreSQL ``SELECT ... FOR UPDATE`` of its row in ``asm_scopes``) from before those
rows are inserted until the commit. So within one scope the audit ``seq`` grows in commit order, and any read
sees a prefix of each scope's trail. A :class:`~.core.types.Position` is the last ``seq`` seen per scope;
"every row of each scope after it" is exactly what happened since, and nothing after it was seen: nothing
lost, nothing repeated.
Across scopes there is no order (PostgreSQL's ``seq`` is one sequence for all scopes, but scopes are locked
separately, so it is not commit order across them): positions are per scope.

Waking up is separate from reading, so a missed wake-up only delays a change, never loses it:

* PostgreSQL: writes ``NOTIFY`` the schema's channel at commit; every subscription of a process to the
  server shares one ``LISTEN`` connection (:mod:`.backends.postgres.notify`) and reads the scope a
  notification names. Each time it (re)starts listening it reads every scope: a change committed while it
  was reconnecting is read then, and one committed after is notified.
* A backend with a :meth:`~.backends.base.Backend.change_watcher` (SQLite: no notifications between
  processes): the subscription asks it every ``poll_interval`` which scopes may have changed and reads
  those. SQLite's looks at the scope files' metadata (size, modification time and inode of each file and its
  WAL) and reports the scopes whose files changed, and new files as they appear; a file modified within two
  seconds of the last look counts as changed (a later write in the same clock tick could leave its metadata
  unchanged).
* Any other backend: every scope is read every ``poll_interval``.

A position also keeps a mark of the change it saw in each scope (:func:`mark`): a scope whose trail no
longer holds that change at that ``seq`` (a file deleted and made again, or restored from an older copy)
is read from its beginning (:func:`rows_after`), so its changes are delivered again rather than skipped.

Record tables (messages, tool calls, tasks, the case log, ...) and scope settings (membership, privacy) are
not facts and have no audit trail: they are not in the feed.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

from .backends.base import Backend, page_after
from .core.types import Change, Position, ScopeRef

logger = logging.getLogger("autogen_shared_memory")

Since = Position | str | Literal["now"] | None
DEFAULT_POLL_INTERVAL = 0.2  # seconds between looks at a store that cannot notify (SQLite files)
BATCH = 1000  # audit rows read per query
_REBASE_EVERY = 256  # a subscription materialises every n-th position, so the chain behind it can be freed


@runtime_checkable
class Notifies(Protocol):
    """A backend that wakes subscribers when a scope changes (PostgreSQL's LISTEN/NOTIFY)."""

    def subscribe(
        self, callback: Callable[[ScopeRef, str], None], *, on_listening: Callable[[], None] | None = None
    ) -> Callable[[], None]: ...


# ------------------------------------------------------------------------------------------- positions
def mark(row: Mapping[str, Any]) -> str:
    """The mark a position keeps of the change an audit row records.

    Another scope file (deleted and made again, or restored from an older copy) has another change at that
    ``seq`` (another fact id, or another time), or none, so the mark a position kept no longer matches.

    Args:
        row: an audit row (``fact_id``, ``event``, ``actor``, ``at``).

    Returns:
        12 hex digits of a hash of its fact id, event, actor and time.
    """
    text = "\x1f".join((str(row["fact_id"]), str(row["event"]), str(row["actor"]), repr(float(row["at"]))))
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def current(backend: Backend) -> Position:
    """The position after the last change of every scope: "now".

    Args:
        backend: the store's backend.

    Returns:
        Each scope's newest audit ``seq`` and the mark of that change.
    """
    seqs: dict[ScopeRef, int] = {}
    marks: dict[ScopeRef, str] = {}
    for scope in backend.scopes():
        last = backend.rows(scope, "audit", limit=1, oldest_first=False)
        if last:
            seqs[scope] = int(last[0]["seq"])
            marks[scope] = mark(last[0])
    return Position(seqs, marks)


def rows_after(
    backend: Backend, scope: ScopeRef, seq: int, seen: str | None, limit: int | None
) -> tuple[list[dict[str, Any]], bool]:
    """The scope's audit rows after the change a position saw in it.

    A scope's audit trail is append-only, so a scope whose change at ``seq`` is gone, or is another change
    (its mark differs), is not the storage the position was taken from: a file deleted and made again, or
    restored from an older copy. Its rows are then read from its beginning (and a warning logged), since
    reading after ``seq`` would skip every change the new storage holds up to ``seq``. The row at ``seq`` is
    read along with the rows after it: no extra query.

    Args:
        backend: the store's backend.
        scope: the scope.
        seq: the last ``seq`` seen of it (0: none).
        seen: the mark of that change (None: any change at ``seq`` is taken as the one seen).
        limit: at most this many rows (None: all).

    Returns:
        The rows in ``seq`` order, and whether they are read from the beginning because the change at ``seq``
        is not the one seen.
    """
    if seq <= 0:
        return backend.rows(scope, "audit", after_seq=0, limit=limit), False
    rows = backend.rows(scope, "audit", after_seq=seq - 1, limit=None if limit is None else limit + 1)
    if rows and int(rows[0]["seq"]) == seq and (seen is None or mark(rows[0]) == seen):
        return rows[1:], False
    logger.warning(
        "the change feed's position for %s names a change the scope does not hold (its storage was replaced "
        "or restored from an older copy): reading %s from its beginning",
        scope,
        scope,
    )
    return backend.rows(scope, "audit", after_seq=0, limit=limit), True


def start(backend: Backend, since: Since) -> Position:
    """The position ``since`` names.

    Args:
        backend: the store's backend.
        since: ``None`` (the beginning), ``"now"`` (:func:`current`), a position token or a Position.

    Returns:
        The position.

    Raises:
        PositionError: ``since`` is a str that is not a position token.
        TypeError: ``since`` is of another type.
    """
    if since is None:
        return Position()
    if isinstance(since, Position):
        return since
    if since == "now":
        return current(backend)
    if isinstance(since, str):
        return Position.parse(since)
    raise TypeError(f"since must be a Position, a position token, 'now' or None, got {type(since).__name__}")


def _change(scope: ScopeRef, row: Mapping[str, Any], position: Position) -> Change:
    detail = row.get("detail")
    if isinstance(detail, str):
        try:
            detail = json.loads(detail)
        except ValueError:
            detail = {"text": detail}
    return Change(
        scope=scope,
        event=str(row["event"]),
        fact_id=str(row["fact_id"]),
        actor=str(row["actor"]),
        at=float(row["at"]),
        detail=detail if isinstance(detail, dict) else {},
        seq=int(row["seq"]),
        position=position,
    )


def read(backend: Backend, since: Position, limit: int | None = None) -> list[Change]:
    """The changes after ``since``, at most ``limit``: each scope's in ``seq`` order, the scopes interleaved
    by time. Each change carries the position after it (``since`` moved on by it and the changes before it
    in the list), so resuming from any of them neither skips nor repeats one."""
    streams: list[list[tuple[ScopeRef, dict[str, Any]]]] = []
    marks, position = since.marks, since
    for scope in backend.scopes():
        rows, restarted = rows_after(backend, scope, since.get(scope), marks.get(scope), limit)
        if restarted:
            position = position.advanced(scope, 0)  # what was seen of the scope's old storage is void
        if rows:
            streams.append([(scope, row) for row in rows])
    # heapq.merge only ever takes the head of a stream: each scope stays in seq order whatever its times.
    merged = heapq.merge(*streams, key=lambda item: (float(item[1]["at"]), item[0], int(item[1]["seq"])))
    changes: list[Change] = []
    for scope, row in merged:
        if limit is not None and len(changes) >= limit:
            break
        position = position.advanced(scope, int(row["seq"]), mark(row))
        if len(changes) % _REBASE_EVERY == _REBASE_EVERY - 1:
            position.seqs  # noqa: B018 - materialise: keeps every chain of positions short
        changes.append(_change(scope, row, position))
    return changes


# -------------------------------------------------------------------------------------- subscriptions
def _backoff(failures: int) -> float:
    """Seconds to wait before trying again after ``failures`` failures in a row: 0.2 s, doubling, up to 5 s."""
    return min(0.1 * 2.0 ** min(failures, 6), 5.0)


class Subscription:
    """A running subscription to the change feed (:meth:`~.facts.FactStore.subscribe` returns one).

    ``callback(change)`` runs in the subscription's own thread, one change at a time: every change of every
    scope after the start position exactly once, each scope's in ``seq`` order. An exception in the callback
    is logged and the feed goes on; a store that cannot be read (a dropped connection) is retried, from the
    last delivered position, and so is a scope that cannot be read, on its own: the other scopes keep
    flowing meanwhile. A scope whose storage was replaced since the position is read from its beginning
    (see :func:`rows_after`). Call the subscription (or :meth:`stop`) to end it; :attr:`position` is where it
    got to, to resume from later.
    """

    def __init__(
        self,
        backend: Backend,
        callback: Callable[[Change], object],
        since: Position,
        *,
        poll_interval: float | None = None,
        on_stop: Callable[[Subscription], None] | None = None,
    ) -> None:
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        self.backend = backend
        self.callback = callback
        self._position = since
        self._seqs: dict[ScopeRef, int] = dict(since.seqs)
        self._marks: dict[ScopeRef, str] = dict(since.marks)
        self._lock = threading.Lock()
        self._pending: set[ScopeRef] = set()
        self._sweep = True  # the first round reads every scope
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._delivered = 0
        self._on_stop = on_stop
        self._watcher = backend.change_watcher()
        notifies = self._watcher is None and isinstance(backend, Notifies)
        if poll_interval is not None and (
            isinstance(poll_interval, bool) or not poll_interval > 0 or math.isinf(poll_interval)
        ):
            raise ValueError(f"poll_interval must be a positive number of seconds, got {poll_interval!r}")
        # A watcher (SQLite's files) is asked every interval; a notifying backend sweeps every scope only when
        # asked to; any other backend sweeps every scope every interval.
        self.poll_interval = poll_interval if poll_interval is not None or notifies else DEFAULT_POLL_INTERVAL
        self._sweep_on_poll = self._watcher is None
        self._unlisten: Callable[[], None] | None = None
        if notifies:
            assert isinstance(backend, Notifies)
            self._unlisten = backend.subscribe(self._heard, on_listening=self._resync)  # returns once listening
        self._thread = threading.Thread(target=self._run, name="shared-memory-feed", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ state
    @property
    def position(self) -> Position:
        """The position after the last change delivered (the start position before the first)."""
        return self._position

    @property
    def running(self) -> bool:
        return not self._stopped.is_set()

    # ------------------------------------------------------------------ wake-ups (any thread)
    def _heard(self, scope: ScopeRef, event: str) -> None:
        with self._lock:
            self._pending.add(scope)
            self._wake.set()

    def _resync(self) -> None:
        """Listening (again): read every scope, so whatever committed before it listened is caught up."""
        with self._lock:
            self._sweep = True
            self._wake.set()

    # ------------------------------------------------------------------ the feed's thread
    def _run(self) -> None:
        try:
            self._follow()
        finally:
            self.backend.release_thread()

    def _follow(self) -> None:
        failures = 0  # rounds in a row in which the store could not be listed
        failing: dict[ScopeRef, int] = {}  # scope -> reads of it in a row that failed
        while not self._stopped.is_set():
            with self._lock:
                sweep, pending = self._sweep, self._pending
                self._sweep, self._pending = False, set()
                self._wake.clear()
            try:
                if self._watcher is not None:
                    pending |= self._watcher.changed()
                if sweep:
                    pending |= set(self.backend.scopes())
                failures = 0
            except Exception:
                if self._stopped.is_set():
                    return
                failures += 1
                logger.warning(
                    "the change feed could not read the store; retrying from the last delivered position",
                    exc_info=failures == 1,
                )
                with self._lock:
                    self._sweep = True  # whatever was not read yet is read on the next round
                    self._pending |= pending | set(failing)
                self._stopped.wait(_backoff(failures))
                continue
            # Each scope on its own: one that cannot be read (a damaged file, a failing query) is retried
            # with a growing pause, and the others keep flowing.
            for scope in sorted(pending | set(failing)):
                if self._stopped.is_set():
                    return
                try:
                    self._catch_up(scope)
                    failing.pop(scope, None)
                except Exception:
                    if self._stopped.is_set():
                        return
                    failing[scope] = failing.get(scope, 0) + 1
                    logger.warning(
                        "the change feed could not read %s; retrying it from its last delivered change",
                        scope,
                        exc_info=failing[scope] == 1,
                    )
            wait, retrying = self.poll_interval, False
            if failing and (wait is None or _backoff(min(failing.values())) < wait):
                wait, retrying = _backoff(min(failing.values())), True
            woken = self._wake.wait(wait)
            if not woken and self._sweep_on_poll and not retrying:
                with self._lock:
                    self._sweep = True

    def _catch_up(self, scope: ScopeRef) -> None:
        """Deliver the scope's changes after the last one delivered (all of them if its storage was replaced
        since, see :func:`rows_after`)."""
        rows, restarted = rows_after(self.backend, scope, self._seqs.get(scope, 0), self._marks.get(scope), BATCH)
        if restarted:
            self._seqs.pop(scope, None)
            self._marks.pop(scope, None)
            self._position = self._position.advanced(scope, 0)
        after = self._seqs.get(scope, 0)
        while True:
            for row in rows:
                if self._stopped.is_set():
                    return
                seq = int(row["seq"])
                if seq <= after:  # pragma: no cover - the backend's after_seq rules this out
                    continue
                seen = mark(row)
                position = self._position.advanced(scope, seq, seen)
                self._delivered += 1
                if self._delivered % _REBASE_EVERY == 0:
                    position.seqs  # noqa: B018 - materialise: the chain of earlier positions can be freed
                change = _change(scope, row, position)
                after = self._seqs[scope] = seq
                self._marks[scope] = seen
                self._position = position
                self._deliver(change)
            if len(rows) < BATCH:
                return
            rows = page_after(self.backend, self.backend.rows(scope, "audit", after_seq=after, limit=BATCH), after)

    def _deliver(self, change: Change) -> None:
        try:
            self.callback(change)
        except Exception:  # a callback error must not stop the feed
            logger.warning(
                "a change-feed callback failed on %s of %s in %s",
                change.event,
                change.fact_id,
                change.scope,
                exc_info=True,
            )

    # ------------------------------------------------------------------ stopping
    def stop(self, timeout: float = 5.0) -> None:
        """End the subscription: no callback starts after this returns (one already running finishes)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._wake.set()
        if self._unlisten is not None:
            with contextlib.suppress(Exception):
                self._unlisten()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if self._on_stop is not None:
            self._on_stop(self)

    def __call__(self) -> None:
        self.stop()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<Subscription {'running' if self.running else 'stopped'} at {self._position!r}>"


def stop_all(subscriptions: Iterable[Subscription]) -> None:
    for subscription in list(subscriptions):
        subscription.stop()
