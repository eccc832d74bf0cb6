"""A TCP proxy that holds every chunk of bytes for a fixed time each way: a PostgreSQL server on another host,
played on this one (Linux's ``netem`` would need a kernel module that a container may lack)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo


@contextlib.contextmanager
def delayed(dsn: str, one_way_s: float) -> Iterator[str]:
    """A DSN that reaches the server of ``dsn`` through a proxy delaying each chunk by ``one_way_s``.

    Args:
        dsn: the server (TCP or a Unix socket directory as ``host``).
        one_way_s: the delay each way, in seconds (0: the server's own DSN, no proxy).

    Yields:
        The DSN to connect to, valid until the context exits.
    """
    if one_way_s <= 0:
        yield dsn
        return
    params = conninfo_to_dict(dsn)
    host, port = str(params.get("host") or "localhost"), int(params.get("port") or 5432)
    target: Any = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
    family = socket.AF_UNIX if host.startswith("/") else socket.AF_INET
    server = socket.create_server(("127.0.0.1", 0))

    def pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(1 << 16):
                time.sleep(one_way_s)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def accept() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(family, socket.SOCK_STREAM)
            upstream.connect(target)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield make_conninfo(dsn, host="127.0.0.1", port=str(server.getsockname()[1]))
    finally:
        server.close()
