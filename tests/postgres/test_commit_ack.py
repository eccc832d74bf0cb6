"""A write whose COMMIT reached the server but whose answer was lost is applied once, not retried into a
second application (a remember counted as said twice, a forget answered "already forgotten")."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from autogen_shared_memory import SharedMemoryStore
from autogen_shared_memory.backends.postgres import PostgresBackend
from autogen_shared_memory.testing import HashEmbedder

pytestmark = pytest.mark.usefixtures("pg_dsn")


class _LoseCommitAnswers:
    """A TCP proxy in front of the server that, while armed, passes one COMMIT on to the server, lets it
    commit, and then cuts the connection before the answer reaches the client (a network failure at the
    worst moment)."""

    def __init__(self, dsn: str) -> None:
        params = conninfo_to_dict(dsn)
        host, port = str(params.get("host") or "localhost"), int(params.get("port") or 5432)
        self.target: Any = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
        self.family = socket.AF_UNIX if host.startswith("/") else socket.AF_INET
        self.server = socket.create_server(("127.0.0.1", 0))
        self.dsn = make_conninfo(dsn, host="127.0.0.1", port=str(self.server.getsockname()[1]))
        self.armed = threading.Event()
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(self.family, socket.SOCK_STREAM)
            upstream.connect(self.target)
            threading.Thread(target=self._to_server, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _to_server(self, client: socket.socket, upstream: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if self.armed.is_set() and b"COMMIT\x00" in data:
                    self.armed.clear()
                    self.cuts += 1
                    client.shutdown(socket.SHUT_RDWR)  # the client hears nothing more ...
                    upstream.sendall(data)  # ... while the server gets the COMMIT and commits
                    time.sleep(0.3)
                    break
                upstream.sendall(data)
        self._close(client, upstream)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        self._close(src, dst)

    @staticmethod
    def _close(*sockets: socket.socket) -> None:
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.server.close()


def test_a_commit_whose_answer_was_lost_is_applied_once(pg_dsn: str) -> None:
    proxy = _LoseCommitAnswers(pg_dsn)
    name = f"t{uuid.uuid4().hex[:16]}"
    store = SharedMemoryStore(
        backend=PostgresBackend(proxy.dsn, schema=name, min_size=1, max_size=2), embedder=HashEmbedder()
    )
    fact = "the deploy window is Tuesday 14:00 UTC"
    created = store.remember(fact, "global")
    before = store.get(created.id).reinforcement

    proxy.armed.set()
    again = store.remember(fact, "global")  # said a second time: reinforced once
    assert proxy.cuts == 1
    assert again.status == "reinforced" and again.id == created.id
    assert store.get(created.id).reinforcement == before + 1  # a retry would make it + 2
    assert [e.event for e in store.history(created.id)].count("reinforced") == 1

    fresh = store.remember("the release train leaves on Thursdays", "global")
    assert fresh.status == "created"
    proxy.armed.set()
    forgotten = store.forget(fresh.id)  # a retry would find the fact already forgotten
    assert proxy.cuts == 2
    assert forgotten.status == "forgotten"
    assert [e.event for e in store.history(fresh.id)] == ["created", "forgotten"]
    store.close()
    proxy.close()
