"""A local stand-in for the Hugging Face hub's file endpoint, on loopback, for the download tests and CI.

It answers what ``huggingface_hub.hf_hub_download`` asks (read from its source, ``file_download.py``):
``HEAD`` and ``GET`` on ``/{repo_id}/resolve/{revision}/{filename}``, with ``X-Repo-Commit`` (the revision),
``ETag`` (a git blob id for small files), ``X-Linked-Etag`` / ``X-Linked-Size`` (the SHA-256 and size of a large
file, as the hub sends for LFS files), ``Content-Length``, and ``Range: bytes=N-`` answered with 206 (the
client resumes a cut download that way). Unknown repos, revisions and files get the hub's 404 codes.

Faults for the tests: ``cut_after`` ends the first GET of a file after that many bytes (a dropped connection),
``corrupt`` serves a file with one byte changed (same size). Every request is logged.

.ci/lean_check.py serves the model's files with it to the users' install in CI.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

REPO = "sentence-transformers/all-MiniLM-L6-v2"
REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"
LFS_FILES = {"model.safetensors"}  # served the way the hub serves large (LFS) files


@dataclass
class Request:
    method: str
    path: str
    range: str | None


@dataclass
class HubServer:
    folder: Path
    repo: str = REPO
    revision: str = REVISION
    cut_after: dict[str, int] = field(default_factory=dict)
    corrupt: set[str] = field(default_factory=set)
    log: list[Request] = field(default_factory=list)
    bytes_sent: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._blobs: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def blob(self, name: str) -> bytes | None:
        with self._lock:
            if name not in self._blobs:
                path = self.folder / name
                if not path.is_file() or not path.resolve().is_relative_to(self.folder.resolve()):
                    return None
                data = bytearray(path.read_bytes())
                if name in self.corrupt:
                    data[len(data) // 2] ^= 0xFF
                self._blobs[name] = bytes(data)
            return self._blobs[name]

    def gets(self, name: str) -> list[Request]:
        return [r for r in self.log if r.method == "GET" and r.path.endswith(f"/{name}")]


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _error(self, code: str) -> None:
            self.send_response(404)
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _serve(self, body: bool) -> None:
            path = unquote(self.path.split("?")[0])
            hub.log.append(Request(self.command, path, self.headers.get("Range")))
            prefix = f"/{hub.repo}/resolve/"
            if not path.startswith(prefix):
                return self._error("RepoNotFound")
            revision, _, name = path[len(prefix) :].partition("/")
            if revision != hub.revision:
                return self._error("RevisionNotFound")
            data = hub.blob(name)
            if data is None:
                return self._error("EntryNotFound")
            start = 0
            wanted = self.headers.get("Range")
            if wanted and wanted.startswith("bytes=") and wanted[6:].split("-")[0].isdigit():
                start = min(int(wanted[6:].split("-")[0]), len(data))
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", hub.revision)
            if name in LFS_FILES:
                sha = hashlib.sha256(data).hexdigest()
                self.send_header("ETag", f'"{sha}"')
                self.send_header("X-Linked-Etag", f'"{sha}"')
                self.send_header("X-Linked-Size", str(len(data)))
            else:
                blob_id = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
                self.send_header("ETag", f'"{blob_id}"')
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(len(data) - start))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if not body:
                return
            part = data[start:]
            first_get = len(hub.gets(name)) == 1
            if name in hub.cut_after and first_get:
                part = part[: hub.cut_after[name]]
                self.close_connection = True
            self.wfile.write(part)
            self.wfile.flush()
            hub.bytes_sent[name] = hub.bytes_sent.get(name, 0) + len(part)

    return Handler
