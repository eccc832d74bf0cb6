"""A write whose COMMIT reached the server but whose answer was lost is applied once, not retried into a
second application (a remember counted as said twice, a forget answered "already forgotten")."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid

import pytest
from pg_proxy import Proxy

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.testing import HashEmbedder

pytestmark = pytest.mark.usefixtures("pg_dsn")


def test_a_commit_whose_answer_was_lost_is_applied_once(pg_dsn: str) -> None:
    proxy = Proxy(pg_dsn)
    name = f"t{uuid.uuid4().hex[:16]}"
    store = SharedMemoryStore(PostgresBackend(proxy.dsn, schema=name, min_size=1, max_size=2), embedder=HashEmbedder())
    fact = "the deploy window is Tuesday 14:00 UTC"
    created = store.operator.remember(fact, "global")
    before = store.operator.get(created.id).reinforcement

    proxy.lose_next_commit_answer()
    again = store.operator.remember(fact, "global")  # said a second time: reinforced once
    assert proxy.lost_answers == 1
    assert again.status == "reinforced" and again.id == created.id
    assert store.operator.get(created.id).reinforcement == before + 1  # a retry would make it + 2
    assert [e.event for e in store.operator.history(created.id)].count("reinforced") == 1

    fresh = store.operator.remember("the release train leaves on Thursdays", "global")
    assert fresh.status == "created"
    proxy.lose_next_commit_answer()
    forgotten = store.operator.forget(fresh.id)  # a retry would find the fact already forgotten
    assert proxy.lost_answers == 2
    assert forgotten.status == "forgotten"
    assert [e.event for e in store.operator.history(fresh.id)] == ["created", "forgotten"]
    store.close()
    proxy.close()


class HeldCommitProxy(Proxy):
    """As ``lose_next_commit_answer()``, but the COMMIT reaches the server only once the client, on another
    connection, has asked what became of that transaction and had its answer ("in progress": the server's
    backend has not yet heard of the lost client), or after 30 s."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.status_answered = threading.Event()
        self.asking: set[int] = set()  # the server-side sockets of connections that asked for a status

    def _to_server(self, client: socket.socket, upstream: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if self.commit_armed.is_set() and b"COMMIT\x00" in data:
                    self.commit_armed.clear()
                    self.lost_answers += 1
                    client.shutdown(socket.SHUT_RDWR)  # the client hears nothing more ...
                    self.status_answered.wait(30)  # ... and asks about the transaction while it is open
                    upstream.sendall(data)  # only then does the server get the COMMIT and commit
                    time.sleep(0.3)
                    break
                if b"pg_xact_status" in data:
                    self.asking.add(id(upstream))
                upstream.sendall(data)
        self._close(client, upstream)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
                if id(src) in self.asking:
                    self.status_answered.set()
        self._close(src, dst)


def test_a_lost_commit_still_in_progress_is_waited_for_not_run_again(pg_dsn: str) -> None:
    """The server may still have the transaction open when the retry asks about it. Running the write again
    then would queue behind it on the scope's lock and apply it a second time once it commits."""
    proxy = HeldCommitProxy(pg_dsn)
    store = SharedMemoryStore(
        PostgresBackend(proxy.dsn, schema=f"t{uuid.uuid4().hex[:16]}", min_size=1, max_size=2), embedder=HashEmbedder()
    )
    fact = "the deploy window is Tuesday 14:00 UTC"
    created = store.operator.remember(fact, "global")
    proxy.lose_next_commit_answer()
    again = store.operator.remember(fact, "global")
    assert proxy.lost_answers == 1 and proxy.status_answered.is_set()  # asked while the COMMIT was held back
    assert again.status == "reinforced" and again.id == created.id
    assert store.operator.get(created.id).reinforcement == 2  # run again: 3
    assert [e.event for e in store.operator.history(created.id)] == ["created", "reinforced"]
    store.close()
    proxy.close()
