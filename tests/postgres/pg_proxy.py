"""A TCP proxy in front of the test server, for network failures at chosen moments."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo


class Proxy:
    """Connect through ``proxy.dsn``. ``cut()`` closes every open connection and refuses new ones until
    ``restore()`` (an outage); ``lose_next_commit_answer()`` lets the next COMMIT reach the server and
    commit, then closes that connection before the answer reaches the client (the worst moment)."""

    def __init__(self, dsn: str) -> None:
        params = conninfo_to_dict(dsn)
        host, port = str(params.get("host") or "localhost"), int(params.get("port") or 5432)
        self.target: Any = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
        self.family = socket.AF_UNIX if host.startswith("/") else socket.AF_INET
        self.server = socket.create_server(("127.0.0.1", 0))
        self.dsn = make_conninfo(dsn, host="127.0.0.1", port=str(self.server.getsockname()[1]))
        self.cut_off = threading.Event()
        self.commit_armed = threading.Event()
        self.lost_answers = 0
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.cut_off.is_set():
                client.close()
                continue
            upstream = socket.socket(self.family, socket.SOCK_STREAM)
            upstream.connect(self.target)
            with self.lock:
                self.open += [client, upstream]
            threading.Thread(target=self._to_server, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _to_server(self, client: socket.socket, upstream: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if self.commit_armed.is_set() and b"COMMIT\x00" in data:
                    self.commit_armed.clear()
                    self.lost_answers += 1
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

    def lose_next_commit_answer(self) -> None:
        self.commit_armed.set()

    def cut(self) -> None:
        self.cut_off.set()
        with self.lock:
            self._close(*self.open)
            self.open.clear()

    def restore(self) -> None:
        self.cut_off.clear()

    def close(self) -> None:
        self.cut()
        self.server.close()
