"""Change notifications between hosts: writes ``NOTIFY`` on one channel, subscribers ``LISTEN``."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from ...core.types import ScopeRef

logger = logging.getLogger("autogen_shared_memory")

CHANNEL = "asm_changes"


def notify(conn: psycopg.Connection[Any], scope: ScopeRef, event: str) -> None:
    """Tell subscribers of every host that ``scope`` changed (sent when the transaction commits)."""
    conn.execute(
        "SELECT pg_notify(%s, %s)",
        (CHANNEL, json.dumps({"kind": scope.kind, "owner": scope.owner, "event": event})),
    )


def subscribe(
    dsn: str, callback: Callable[[ScopeRef, str], None], listeners: list[tuple[threading.Event, threading.Thread]]
) -> Callable[[], None]:
    """Call ``callback(scope, event)`` for every write made by any process or host (LISTEN/NOTIFY).

    Runs a listener thread with its own connection, kept open (reopened only after an error; writes
    notified while it was down are not replayed), and returns once it listens, so a write made after
    this call returns is heard. Returns a function that stops it.
    """
    stop = threading.Event()
    listening = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    listening.set()
                    while not stop.is_set():
                        for note in conn.notifies(timeout=0.5, stop_after=None):
                            try:
                                data = json.loads(note.payload)
                                callback(ScopeRef(data["kind"], data["owner"]), data["event"])
                            except Exception:  # a callback error must not kill the listener
                                logger.warning("shared memory change callback failed", exc_info=True)
                            if stop.is_set():
                                break
            except psycopg.Error:
                if not stop.is_set():
                    time.sleep(0.5)  # reconnect

    thread = threading.Thread(target=listen, name="shared-memory-listen", daemon=True)
    thread.start()
    listeners.append((stop, thread))
    listening.wait(timeout=30)

    def unsubscribe() -> None:
        stop.set()
        thread.join(timeout=5)

    return unsubscribe
