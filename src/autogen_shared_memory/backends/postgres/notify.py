"""Change notifications between hosts: writes ``NOTIFY`` the schema's channel, subscribers ``LISTEN`` on it.

A notification only says "this scope changed": it is lost if nobody listens when the write commits (a
listener reconnecting). A process keeps one listening connection per server, whatever the number of its
subscriptions. The change feed (:mod:`autogen_shared_memory.feed`) therefore uses notifications to
wake up and reads what changed from the audit trail, and reads every scope each time :func:`subscribe`
(re)starts listening (``on_listening``), so nothing is lost.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from ...core.types import ScopeRef
from .errors import redact

logger = logging.getLogger("autogen_shared_memory")

CHANNEL = "asm_changes"  # the prefix of every schema's channel
LISTENER_NAME = "autogen-shared-memory listener"  # the listening connection's application_name
_MAX_IDENTIFIER = 63  # PostgreSQL's NAMEDATALEN - 1


def channel(schema: str) -> str:
    """The notification channel of one schema (tenants in one database do not hear each other's writes).

    Unquoted identifiers fold to lower case, so ``MySchema`` and ``myschema`` are one schema and one channel;
    a name too long for an identifier is replaced by its hash."""
    name = f"{CHANNEL}_{schema.lower()}"
    if len(name) > _MAX_IDENTIFIER:
        name = f"{CHANNEL}_{hashlib.sha256(schema.lower().encode()).hexdigest()[:40]}"
    return name


def notify(conn: psycopg.Connection[Any], to: str, scope: ScopeRef, event: str) -> None:
    """Tell the subscribers listening on channel ``to`` that ``scope`` changed (sent when the transaction
    commits; not sent if it rolls back)."""
    conn.execute(
        "SELECT pg_notify(%s, %s)", (to, json.dumps({"kind": scope.kind, "owner": scope.owner, "event": event}))
    )


class _Subscriber:
    """One :func:`subscribe` call: its channel, its callbacks, and the LISTEN it was last told about."""

    __slots__ = ("callback", "channel", "on_listening", "ready", "told")

    def __init__(
        self, to: str, callback: Callable[[ScopeRef, str], None], on_listening: Callable[[], None] | None
    ) -> None:
        self.channel = to
        self.callback = callback
        self.on_listening = on_listening
        self.told = 0  # the number of the LISTEN it was last told about (0: none)
        self.ready = threading.Event()

    def listening(self) -> None:
        if self.on_listening is not None:
            try:
                self.on_listening()
            except Exception:
                logger.warning("shared memory on_listening callback failed", exc_info=True)
        self.ready.set()


class _Listener:
    """This process's one ``LISTEN`` connection to one server (one DSN), shared by every subscriber to any
    schema there: a process with many subscriptions holds one connection, not one each (a server admits
    ``max_connections`` clients in all, so a connection per subscription would lock every other client out).

    Its thread listens on the channels its subscribers want, hands each notification to the subscribers of
    its channel, and reconnects after a failure with a growing pause (0.1 s up to 5 s). Each time it
    (re)connects it listens on every channel, then calls every subscriber's ``on_listening``. Subscribers
    come and go through :meth:`add` / :meth:`remove`, which wake the thread through a socket pair."""

    def __init__(self, dsn: str, connect_timeout: float) -> None:
        self.dsn = dsn
        self.connect_timeout = connect_timeout
        self.lock = threading.Lock()
        self.subscribers: dict[str, list[_Subscriber]] = {}  # channel -> its subscribers
        self.listened: dict[str, int] = {}  # channel -> the number of the live connection's LISTEN on it
        self._listens = 0  # LISTENs executed (numbers them)
        self.stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.thread = threading.Thread(target=self._run, name="shared-memory-listen", daemon=True)

    # ------------------------------------------------------------------ any thread
    def add(self, sub: _Subscriber) -> bool:
        """Register ``sub``; True if the live connection already listens on its channel (the caller then
        calls ``sub.listening()``), else the thread listens on it and tells it."""
        with self.lock:
            self.subscribers.setdefault(sub.channel, []).append(sub)
            live = sub.channel in self.listened
            if live:
                sub.told = self.listened[sub.channel]
        if not live:
            self.wake()
        return live

    def remove(self, sub: _Subscriber) -> bool:
        """Unregister ``sub``; True if it was the last subscriber."""
        with self.lock:
            subs = self.subscribers.get(sub.channel, [])
            if sub in subs:
                subs.remove(sub)
            if not subs:
                self.subscribers.pop(sub.channel, None)
            last = not self.subscribers
        self.wake()  # stops listening on a channel nobody wants any more
        return last

    def wake(self) -> None:
        with contextlib.suppress(OSError):  # full (a wake-up is pending anyway) or closed
            self._wake_w.send(b"x")

    def close(self) -> None:
        self.stop.set()
        self.wake()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=5)

    # ------------------------------------------------------------------ the listener's thread
    def _dispatch(self, channel_name: str, payload: str) -> None:
        with self.lock:
            subs = list(self.subscribers.get(channel_name, ()))
        try:
            data = json.loads(payload)
            scope, event = ScopeRef(data["kind"], data["owner"]), data["event"]
        except Exception:  # a stray payload must not kill the listener
            logger.warning("ignored a malformed shared memory notification on %s", channel_name, exc_info=True)
            return
        for sub in subs:
            try:
                sub.callback(scope, event)
            except Exception:  # a callback error must not kill the listener
                logger.warning("shared memory change callback failed", exc_info=True)

    def _sync(self, conn: psycopg.Connection[Any], listened: dict[str, int]) -> None:
        """Listen on the channels subscribers want (and no other), then tell each subscriber not told yet that
        its channel is listened on (each LISTEN gets a new number: a subscriber told an older one is told
        again, after a reconnect, or a channel dropped and listened on again)."""
        with self.lock:
            wanted = set(self.subscribers)
        for name in sorted(wanted - set(listened)):
            conn.execute(f'LISTEN "{name}"')
            self._listens += 1
            listened[name] = self._listens
        for name in sorted(set(listened) - wanted):
            conn.execute(f'UNLISTEN "{name}"')
            del listened[name]
        with self.lock:
            self.listened = dict(listened)
            untold = [
                s for subs in self.subscribers.values() for s in subs if s.told != listened.get(s.channel, s.told)
            ]
            for sub in untold:
                sub.told = listened[sub.channel]
        for sub in untold:
            sub.listening()

    def _run(self) -> None:
        pause = 0.0
        while not self.stop.is_set():
            try:
                with psycopg.connect(
                    self.dsn,
                    autocommit=True,
                    connect_timeout=max(1, int(self.connect_timeout)),
                    application_name=LISTENER_NAME,
                    keepalives=1,
                    keepalives_idle=30,
                    keepalives_interval=10,
                    keepalives_count=3,
                ) as conn:
                    if pause:
                        logger.info("listening for shared memory changes again on %s", redact(self.dsn))
                    pause = 0.0
                    listened: dict[str, int] = {}
                    while not self.stop.is_set():
                        self._sync(conn, listened)
                        # Notifications that arrived during a LISTEN wait in psycopg, not on the socket.
                        for note in conn.notifies(timeout=0):
                            self._dispatch(note.channel, note.payload)
                        wake = self._wake_r.fileno()
                        readable, _, _ = select.select([conn.fileno(), wake], [], [], 5.0)
                        if wake in readable:
                            with contextlib.suppress(OSError):
                                while self._wake_r.recv(4096):
                                    pass
            except (psycopg.Error, OSError, ValueError) as exc:
                with self.lock:
                    self.listened = {}
                if self.stop.is_set():
                    break
                pause = min(max(pause * 2, 0.1), 5.0)
                logger.warning(
                    "the shared memory listener lost its PostgreSQL connection (%s); reconnecting in %.1f s",
                    " ".join(str(exc).split()) or type(exc).__name__,
                    pause,
                )
                self.stop.wait(pause)
        with self.lock:
            self.listened = {}
        for end in (self._wake_r, self._wake_w):
            end.close()


_registry_lock = threading.Lock()
_registry: dict[str, _Listener] = {}  # this process's listener per DSN


def _forget_listeners() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()  # another thread may have held it when the process forked
    _registry.clear()  # a forked child has none of its parent's threads or connections


os.register_at_fork(after_in_child=_forget_listeners)


def subscribe(
    dsn: str,
    to: str,
    callback: Callable[[ScopeRef, str], None],
    listeners: list[Callable[[], None]],
    on_listening: Callable[[], None] | None = None,
    *,
    connect_timeout: float = 10.0,
    ready_timeout: float = 30.0,
) -> Callable[[], None]:
    """Call ``callback(scope, event)`` for every write to the schema of channel ``to``, by any process or host.

    Every subscription of this process to the server at ``dsn`` shares one listening connection
    (``application_name`` :data:`LISTENER_NAME`, TCP keepalives so a vanished server is noticed), kept by one
    thread, which reconnects only after it fails, with a growing pause (0.1 s up to 5 s); it closes when its
    last subscription stops. Notifications sent while it is disconnected are not replayed: ``on_listening()``
    is called every time the connection starts listening on ``to`` (first time included; in the listener's
    thread, or in this one when the connection already listens on ``to``), so the caller can catch up.

    Args:
        dsn: the server's connection string.
        to: the channel (see :func:`channel`).
        callback: called with the scope and event of each notification on ``to`` (in the listener's thread;
            an exception it raises is logged).
        listeners: the function that stops this subscription is added to it, and removed when called.
        on_listening: called each time the connection starts listening, see above.
        connect_timeout: seconds to wait for each connection attempt.
        ready_timeout: seconds to wait for the first ``on_listening`` (it keeps trying after that).

    Returns:
        A function that stops this subscription. Returns once the connection listens on ``to`` (or after
        ``ready_timeout``), so a write committed after this returns is heard.
    """
    sub = _Subscriber(to, callback, on_listening)
    with _registry_lock:
        listener = _registry.get(dsn)
        if listener is None:
            listener = _registry[dsn] = _Listener(dsn, connect_timeout)
            listener.thread.start()
        live = listener.add(sub)
    if live:
        sub.listening()
    if not sub.ready.wait(timeout=ready_timeout):
        logger.warning("the shared memory listener is not listening yet (%s); it keeps trying", redact(dsn))
    stopped = threading.Event()

    def unsubscribe() -> None:
        if stopped.is_set():
            return
        stopped.set()
        with _registry_lock:
            last = listener.remove(sub)
            if last and _registry.get(dsn) is listener:
                del _registry[dsn]
        if last:
            listener.close()
        with contextlib.suppress(ValueError):
            listeners.remove(unsubscribe)

    listeners.append(unsubscribe)
    return unsubscribe
