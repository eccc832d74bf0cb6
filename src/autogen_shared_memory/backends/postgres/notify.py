"""Change notifications between hosts: writes ``NOTIFY`` the schema's channel, subscribers ``LISTEN`` on it.

A notification only says "this scope changed": it is lost if nobody listens when the write commits (a
listener reconnecting). The change feed (:mod:`autogen_shared_memory.feed`) therefore uses notifications to
wake up and reads what changed from the audit trail, and reads every scope each time :func:`subscribe`
(re)starts listening (``on_listening``), so nothing is lost.
"""

from __future__ import annotations

import hashlib
import json
import logging
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


def subscribe(
    dsn: str,
    to: str,
    callback: Callable[[ScopeRef, str], None],
    listeners: list[tuple[threading.Event, threading.Thread]],
    on_listening: Callable[[], None] | None = None,
    *,
    connect_timeout: float = 10.0,
    ready_timeout: float = 30.0,
) -> Callable[[], None]:
    """Call ``callback(scope, event)`` for every write to the schema of channel ``to``, by any process or host.

    A listener thread keeps one connection (``application_name`` :data:`LISTENER_NAME`, TCP keepalives so
    a vanished server is noticed) and reconnects only after it fails, with a growing pause (0.1 s up to
    5 s). Notifications sent while it is disconnected are not replayed: ``on_listening()`` is called in the
    listener thread every time it starts listening, first time included, so the caller can catch up.
    Returns once it listens (or after ``ready_timeout``: it keeps trying), so a write committed after this
    returns is heard. Returns a function that stops it.
    """
    stop = threading.Event()
    listening = threading.Event()

    def handle(payload: str) -> None:
        try:
            data = json.loads(payload)
            callback(ScopeRef(data["kind"], data["owner"]), data["event"])
        except Exception:  # a callback error (or a stray payload) must not kill the listener
            logger.warning("shared memory change callback failed", exc_info=True)

    def listen() -> None:
        pause = 0.0
        while not stop.is_set():
            try:
                with psycopg.connect(
                    dsn,
                    autocommit=True,
                    connect_timeout=max(1, int(connect_timeout)),
                    application_name=LISTENER_NAME,
                    keepalives=1,
                    keepalives_idle=30,
                    keepalives_interval=10,
                    keepalives_count=3,
                ) as conn:
                    conn.execute(f'LISTEN "{to}"')
                    if pause:
                        logger.info("listening for shared memory changes again on %s", redact(dsn))
                    pause = 0.0
                    if on_listening is not None:
                        try:
                            on_listening()
                        except Exception:
                            logger.warning("shared memory on_listening callback failed", exc_info=True)
                    listening.set()
                    while not stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            handle(note.payload)
                            if stop.is_set():
                                break
            except psycopg.Error as exc:
                if stop.is_set():
                    break
                pause = min(max(pause * 2, 0.1), 5.0)
                logger.warning(
                    "the shared memory listener lost its PostgreSQL connection (%s); reconnecting in %.1f s",
                    " ".join(str(exc).split()) or type(exc).__name__,
                    pause,
                )
                stop.wait(pause)

    thread = threading.Thread(target=listen, name="shared-memory-listen", daemon=True)
    thread.start()
    entry = (stop, thread)
    listeners.append(entry)
    if not listening.wait(timeout=ready_timeout):
        logger.warning("the shared memory listener is not listening yet (%s); it keeps trying", redact(dsn))

    def unsubscribe() -> None:
        stop.set()
        if threading.current_thread() is not thread:
            thread.join(timeout=5)
        if entry in listeners:
            listeners.remove(entry)

    return unsubscribe
